# PYTHON_ARGCOMPLETE_OK  (argcomplete: this console script completes itself, D157)
"""`egress-proxy run|dns|check|import|ca|health|propose`: what each command does
(its options are `runtime.cmdline`). The only place that chooses exit codes.

Exit codes: 0 success; 1 `check` found problems or `health` found the proxy
unhealthy; 2 the proxy could not start (configuration error, unreadable CA,
address in use).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from sandbox_egress.common.completion import offer_completions
from sandbox_egress.common.logs import log_handler
from sandbox_egress.proxy import fairness, health
from sandbox_egress.proxy.config import lint
from sandbox_egress.proxy.config import loader as configuration
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.credentials.probe import probe
from sandbox_egress.proxy.learn import formats, importers
from sandbox_egress.proxy.learn import propose as proposing
from sandbox_egress.proxy.state import StateUnavailable
from sandbox_egress.proxy.tenancy import sandboxes
from sandbox_egress.runtime import optimized
from sandbox_egress.runtime.admin import approvalscli
from sandbox_egress.runtime.admin import usage as usageapi
from sandbox_egress.runtime.admin import usagecli as usage
from sandbox_egress.runtime.admin.api import read_token
from sandbox_egress.runtime.ca import CA_CERT, CAError, ensure_ca
from sandbox_egress.runtime.cmdline import parser
from sandbox_egress.runtime.engine import patches
from sandbox_egress.runtime.fleet.nodeca import DEFAULT_DAYS, issue_intermediate
from sandbox_egress.runtime.fleet.workers import run_workers
from sandbox_egress.runtime.launcher import serve
from sandbox_egress.runtime.otlp import resolve_headers
from sandbox_egress.runtime.startup import LaunchError, Settings, refuse_a_taken_port


def _propose(args: argparse.Namespace) -> int:
    findings = proposing.Findings()
    try:
        with open(args.audit_log, encoding="utf-8", errors="replace") as log:
            lines = proposing.parse_lines(log, findings)
    except OSError as exc:
        print(f"egress-proxy: cannot read {args.audit_log}: {exc.strerror}", file=sys.stderr)
        return 1
    proposals = proposing.propose(lines, findings, args.sandbox, args.wildcards)
    print(proposing.render(proposals, findings, args.audit_log), end="")
    return 0


def _node_ca(args: argparse.Namespace) -> int:
    if args.name is None:
        print("egress-proxy: --intermediate-of needs --name NODE", file=sys.stderr)
        return 2
    try:
        issued = issue_intermediate(
            args.intermediate_of,
            args.name,
            args.certs,
            DEFAULT_DAYS if args.days is None else args.days,
            args.permit,
        )
    except CAError as exc:
        print(f"egress-proxy: {exc}", file=sys.stderr)
        return 2
    print(
        f"egress-proxy: node CA for {issued.node} in {args.certs}, valid until "
        f"{issued.not_after:%Y-%m-%d %H:%M} UTC, sha256 {issued.fingerprint}",
        file=sys.stderr,
    )
    print((args.certs / CA_CERT).resolve())
    return 0


def fairness_of(args: argparse.Namespace) -> fairness.Fairness:
    default = fairness.Fairness()
    dns = fairness.FairShare(
        args.dns_lookups, args.dns_lookups_per_client, default.dns.queue_per_client
    )
    connections = fairness.FairShare(
        getattr(args, "max_connections", default.connections.total),
        getattr(args, "max_connections_per_client", default.connections.per_client),
    )
    served = getattr(args, "metrics_connections", default.metrics_connections)
    return fairness.Fairness(dns, connections, served)


def main(argv: list[str] | None = None) -> int:
    accepted = parser()
    offer_completions(accepted)
    args = accepted.parse_args(argv)
    if args.command == "run" and argv is None:  # the console script, not a test's call
        optimized.reexec_optimized()  # under -O: mitmproxy's debug-only checks off (D75)
    if args.command == "check":
        if args.resolve and args.no_secrets:
            accepted.error("--resolve fetches credentials: it cannot go with --no-secrets")
        status = _check(args.file, secrets=not args.no_secrets)
        return _resolve(args.file, args.upstream_ca) if status == 0 and args.resolve else status
    if args.command == "import":
        return _import(args.kind, args.file)
    if args.command == "propose":
        return _propose(args)
    if args.command == "usage":
        return _usage(args)
    if args.command == "dns":
        return _run_dns(args)
    if args.command == "approvals":
        return approvalscli.run(args)
    if args.command == "health":
        host, port = args.metrics
        outcome = health.probe(host, port, timeout=args.timeout)
        print(outcome.detail, file=sys.stdout if outcome.healthy else sys.stderr)
        return 0 if outcome.healthy else 1
    if args.command == "ca" and args.intermediate_of is not None:
        return _node_ca(args)
    if args.command == "ca":
        if args.name is not None or args.permit or args.days is not None:
            accepted.error("--name, --days and --permit go with --intermediate-of")
        try:
            ca = ensure_ca(args.certs, args.key_type)
        except CAError as exc:
            print(f"egress-proxy: {exc}", file=sys.stderr)
            return 2
        if not ca.created and ca.key_type is not args.key_type:
            print(
                f"egress-proxy: kept the existing {ca.key_type.value} CA in {args.certs}; "
                f"remove that directory to create a {args.key_type.value} one "
                "(every sandbox must then trust the new certificate)",
                file=sys.stderr,
            )
        print(ca.cert.resolve())
        return 0
    if args.workers < 1:
        print("egress-proxy: --workers must be at least 1", file=sys.stderr)
        return 2
    try:  # the references of --otlp-header resolve now, or nothing starts (D402)
        resolve_headers(args.otlp_header)
    except ValueError as exc:
        print(f"egress-proxy: {exc}", file=sys.stderr)
        return 2
    try:
        token = read_token(args.admin_token_file) if args.admin_token_file else None
    except LaunchError as exc:
        print(f"egress-proxy: {exc}", file=sys.stderr)
        return 2
    if args.workers > 1 and args.worker is None:
        run_argv = list(sys.argv[1:] if argv is None else argv)
        try:
            refuse_a_taken_port(args.listen)  # the workers share it: probed once, here
        except LaunchError as exc:
            print(f"egress-proxy: {exc}", file=sys.stderr)
            return 2
        try:
            return run_workers(run_argv, args.workers, args.config, args.metrics, token)
        except configuration.ConfigError as exc:
            _print_problems(exc)
            return 2
        except OSError as exc:
            print(f"egress-proxy: cannot listen for metrics: {exc.strerror}", file=sys.stderr)
            return 2
    settings = Settings(
        config_path=args.config,
        mode=args.mode,
        listen=args.listen,
        metrics=args.metrics,
        certs=args.certs,
        audit_log=args.audit_log,
        upstream_ca=args.upstream_ca,
        dns_cache_seconds=args.dns_cache,
        fairness=fairness_of(args),
        worker=args.worker,
        ca_key_type=args.ca_key_type,
        drain_seconds=args.drain_seconds,
        watch_interval=args.watch_interval,
        engine=args.engine,
        switches=frozenset(name for name in patches.switches() if getattr(args, name)),
        log_format=args.log_format,
        http2=args.http2,
        audit_format=args.audit_format,
        otlp_endpoint=args.otlp_endpoint,
        otlp_headers=tuple(args.otlp_header),
        upstream_connect_s=args.upstream_connect_timeout,
        upstream_answer_s=args.upstream_timeout,
        admin_token=token,
    )
    try:
        return asyncio.run(serve(settings))
    except configuration.ConfigError as exc:
        _print_problems(exc)
        return 2
    except (LaunchError, CAError) as exc:
        print(f"egress-proxy: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


def _print_problems(error: configuration.ConfigError) -> None:
    """The one wording of a refused configuration, for `check`, `run` and `dns` alike."""
    for problem in error.problems:
        print(f"error: {formats.hinted(problem)}", file=sys.stderr)
    unset = formats.unset_variables(error.problems)
    if unset:  # issue 48: what to do about it
        exports = " ".join(f"{name}=..." for name in unset)
        print(
            f"hint: give the proxy's environment the variable named above, e.g. "
            f"`export {exports}` before `egress-proxy run` (`make run` takes config/default.env; "
            f"a container: `-e {unset[0]}=...`), or put the value in a file and write "
            "${file:/path} instead; `egress-proxy check --no-secrets` checks the file without "
            "its secrets",
            file=sys.stderr,
        )


def _import(kind: str, path: str) -> int:
    try:
        imported = importers.read(kind, Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: {path}: cannot read file: {exc}", file=sys.stderr)
        return 1
    except importers.ImportRefused as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(importers.as_environment_file(imported, path, kind))
    return 0


def _check(path: str, *, secrets: bool) -> int:
    try:
        network = configuration.load(path, secrets=secrets)
        # With `sandboxes:`, every sandbox file too.
        loaded = sandboxes.check_node(path, secrets=secrets, node=network)
    except configuration.ConfigError as exc:
        _print_problems(exc)
        return 1
    for warning in lint.warnings(path):
        print(f"warning: {warning}", file=sys.stderr)
    unresolved = "" if secrets else " (references not looked up: --no-secrets)"
    shown = f", {loaded} sandbox files" if loaded is not None else ""
    print(f"{path}: ok, {len(network.allowlist)} allowlist entries{shown}{unresolved}")
    return 0


def _usage(args: argparse.Namespace) -> int:
    """`usage`: the spending of `llm:` budgets, read from the file's Redis store, or from
    the running proxy's admin API with the memory backend (D570)."""
    try:
        network = configuration.load(args.config)
    except configuration.ConfigError as exc:
        _print_problems(exc)
        return 1
    if network.state.backend != "redis":
        token = approvalscli.read_token(args.admin_token_file, "usage (state.backend: memory)")
        if token is None:
            return 2
        host, port = args.metrics
        status, lines = usage.ask(host, port, token, args.sandbox)
        for line in lines:
            print(line, file=sys.stdout if status == 0 else sys.stderr)
        return status
    try:
        lines = asyncio.run(usage.read(network.state, usageapi.clauses(network), args.sandbox))
    except StateUnavailable as exc:
        print(f"egress-proxy: the state store did not answer ({exc})", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0


def _resolve(path: str, upstream_ca: Path | None) -> int:
    """`check --resolve`: every credential fetched once, one line each."""
    network = configuration.load(path)
    https = Https(str(upstream_ca) if upstream_ca else None)
    results = probe(network.credentials, https)
    for result in results:
        print(result, file=sys.stdout if result.problem is None else sys.stderr)
    return 1 if any(r.problem is not None for r in results) else 0


def _run_dns(args: argparse.Namespace) -> int:
    from sandbox_egress.proxy import dns

    # The responder's messages already start with "egress-proxy dns:" in text.
    log_handler("egress", args.log_format, sys.stderr, "", logging.WARNING)
    try:
        return asyncio.run(dns.run(args.config, args.listen, args.metrics, fairness_of(args)))
    except configuration.ConfigError as exc:
        _print_problems(exc)
        return 2
    except OSError as exc:
        print(f"egress-proxy: cannot listen: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
