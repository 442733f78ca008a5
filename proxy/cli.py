"""`egress-proxy run|check|ca|health|propose` (README.md#command-line). The only place that
chooses exit codes.

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
from typing import Any

from common.logs import add_log_format_option, log_handler
from common.versions import DefaultsHelpFormatter, add_version_option
from proxy import config as configuration
from proxy import fairness, formats, health, importers, lint, optimized, sandboxes
from proxy import propose as proposing
from proxy.ca import CAError, KeyType, ensure_ca
from proxy.launcher import serve
from proxy.startup import LaunchError, Settings, parse_hostport, refuse_a_taken_port
from proxy.workers import run_workers

PROG = "egress-proxy"
# config/default.yaml, shipped as package data (pyproject.toml), so `run` alone works
# wherever the package is installed (its transform needs DEMO_API_TOKEN).
DEFAULT_CONFIG = Path(__file__).resolve().parent / "default.yaml"


DEFAULTS = DefaultsHelpFormatter  # every option's help shows its default


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="egress-proxy",
        description="Egress proxy with allowlist and token transformation.",
        formatter_class=DEFAULTS,
    )
    add_version_option(parser, PROG, mitmproxy=True)
    sub = parser.add_subparsers(dest="command", required=True, help="each has its own --help")

    run = sub.add_parser("run", help="run the proxy", formatter_class=DEFAULTS)
    run.add_argument(
        "--config",
        default=str(DEFAULT_CONFIG),
        metavar="FILE",
        help="environment file (YAML or JSON); the default is config/default.yaml as "
        "installed with the package",
    )
    run.add_argument(
        "--mode",
        choices=["regular", "transparent"],
        default="regular",
        help="regular: clients name the proxy (HTTPS_PROXY); transparent: their TCP is "
        "redirected to it (iptables/nftables, docs/operations.md)",
    )
    run.add_argument(
        "--listen",
        default="127.0.0.1:8080",
        type=_endpoint,
        metavar="HOST:PORT",
        help="proxy address, HOST:PORT",
    )
    run.add_argument(
        "--metrics",
        default="127.0.0.1:9464",
        type=_endpoint,
        metavar="HOST:PORT",
        help="address of /metrics and /healthz, HOST:PORT",
    )
    run.add_argument(
        "--certs",
        default="certs",
        type=Path,
        metavar="DIR",
        help="CA directory (created with the CA when missing; relative to the working "
        "directory, the resolved path is printed at start)",
    )
    run.add_argument(
        "--audit-log", default="-", metavar="PATH", help="audit log file, or - for stdout"
    )
    run.add_argument(
        "--upstream-ca", type=Path, metavar="FILE", help="extra CA for upstream certificates"
    )
    run.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="proxy processes sharing the listen port (one per core scales throughput)",
    )
    run.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # set by the parent
    run.add_argument(
        "--engine",
        choices=["lean", "mitmdump"],
        default="lean",
        help="lean: only the mitmproxy addons the proxy needs (default); mitmdump: "
        "mitmproxy's full addon chain, as before (for comparison)",
    )
    run.add_argument(
        "--watch-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="reload when the configuration file changes, checked this often (0: SIGHUP only)",
    )
    run.add_argument(
        "--drain-seconds",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="on SIGTERM: stop accepting, let transfers in flight run this long, then exit",
    )
    _key_type_option(run, "--ca-key-type")
    add_log_format_option(run)
    run.add_argument(
        "--http2",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="offer HTTP/2 to clients (default; gRPC needs it); --no-http2: HTTP/1.1 only, "
        "1.2-1.5x cheaper per request (D76)",
    )
    run.add_argument(
        "--dns-cache",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="keep resolver answers this long (0: ask the resolver for every request)",
    )

    _fair_options(run, connections=True)

    dns = sub.add_parser(
        "dns",
        help="answer DNS for names the allowlist could allow, refuse the rest",
        formatter_class=DEFAULTS,
    )
    dns.add_argument(
        "--config", required=True, metavar="FILE", help="environment file (YAML or JSON)"
    )
    dns.add_argument(
        "--listen",
        default="127.0.0.1:5353",
        type=_endpoint,
        metavar="HOST:PORT",
        help="DNS address (UDP and TCP)",
    )
    dns.add_argument(
        "--metrics",
        default="127.0.0.1:9466",
        type=_endpoint,
        metavar="HOST:PORT",
        help="address of /metrics",
    )
    _fair_options(dns, connections=False)
    add_log_format_option(dns)

    _propose_parser(sub)
    check = sub.add_parser(
        "check",
        help="validate a configuration file",
        formatter_class=DEFAULTS,
        description="Validate an environment file: exit 0 when the proxy would load it, "
        "1 with one line per problem (FILE:LINE:COLUMN: location: message). "
        "Warnings (a literal credential in a transform) do not fail the check.",
    )
    check.add_argument(
        "file",
        nargs="?",
        default=str(DEFAULT_CONFIG),
        help="environment file (YAML or JSON); the default is the packaged config/default.yaml",
    )
    check.add_argument(
        "--no-secrets",
        action="store_true",
        help="check everything that needs no secret: ${NAME} and ${file:} references are "
        "checked for syntax, not looked up (for CI, where the secrets are not)",
    )

    imported = sub.add_parser(
        "import",
        help="print an environment file with the allowlist of another sandbox's settings",
        formatter_class=DEFAULTS,
    )
    imported.add_argument(
        "--from", dest="kind", required=True, choices=importers.FORMATS, help="its format"
    )
    imported.add_argument(
        "file", help="sandbox-runtime settings JSON, or Codex config.toml (permission profiles)"
    )

    ca = sub.add_parser(
        "ca",
        help="create the CA if missing and print its certificate path",
        formatter_class=DEFAULTS,
    )
    ca.add_argument("--certs", default="certs", type=Path, metavar="DIR", help="CA directory")
    _key_type_option(ca, "--key-type")

    probe = sub.add_parser(
        "health", help="exit 0 when the proxy's /healthz answers 200", formatter_class=DEFAULTS
    )
    probe.add_argument(
        "--metrics",
        default="127.0.0.1:9464",
        type=_endpoint,
        metavar="HOST:PORT",
        help="the metrics address of `run` (a wildcard address is probed on loopback)",
    )
    probe.add_argument(
        "--timeout",
        default=health.DEFAULT_TIMEOUT,
        type=float,
        metavar="SECONDS",
        help="how long to wait for the answer",
    )
    return parser


def _propose_parser(sub: Any) -> None:
    propose = sub.add_parser(
        "propose", help="print a proposed allowlist from refused and would_deny audit lines"
    )
    propose.add_argument("--audit-log", required=True, help="the audit log file (JSON lines)")
    propose.add_argument("--sandbox", metavar="ID", help="only this sandbox's lines")
    propose.add_argument(
        "--wildcards",
        action="store_true",
        help="group two or more sibling names into one *.parent entry (flagged as broader)",
    )


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


def _endpoint(text: str) -> tuple[str, int]:
    """`HOST:PORT` for argparse: its message, not "invalid parse_hostport value"."""
    try:
        return parse_hostport(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (for example 127.0.0.1:8080 or :8080)") from None


def _fair_options(parser: argparse.ArgumentParser, *, connections: bool) -> None:
    """The fair-share bounds (docs/configuration.md#fair-sharing)."""
    bounds = [
        ("--dns-lookups", fairness.DNS_LOOKUPS, "name lookups at once, all clients"),
        ("--dns-lookups-per-client", fairness.DNS_LOOKUPS_PER_CLIENT, "... of one client"),
    ]
    if connections:
        bounds += [
            ("--max-connections", fairness.CONNECTIONS, "client connections, all clients"),
            ("--max-connections-per-client", fairness.CONNECTIONS_PER_CLIENT, "... of one"),
            ("--metrics-connections", fairness.METRICS_CONNECTIONS, "metrics/health listener"),
        ]
    for flag, default, text in bounds:
        parser.add_argument(flag, type=_positive, default=default, metavar="N", help=text)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


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


def _key_type_option(parser: argparse.ArgumentParser, flag: str) -> None:
    parser.add_argument(
        flag,
        type=KeyType,
        choices=list(KeyType),
        default=KeyType.ECDSA,
        help="key of a CA created now: ecdsa (P-256, cheaper handshakes) or rsa (2048 bits); "
        "an existing CA is never replaced",
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run" and argv is None:  # the console script, not a test's call
        optimized.reexec_optimized()  # under -O: mitmproxy's debug-only checks off (D75)
    if args.command == "check":
        return _check(args.file, secrets=not args.no_secrets)
    if args.command == "import":
        return _import(args.kind, args.file)
    if args.command == "propose":
        return _propose(args)
    if args.command == "dns":
        return _run_dns(args)
    if args.command == "health":
        host, port = args.metrics
        outcome = health.probe(host, port, timeout=args.timeout)
        print(outcome.detail, file=sys.stdout if outcome.healthy else sys.stderr)
        return 0 if outcome.healthy else 1
    if args.command == "ca":
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
    if args.workers > 1 and args.worker is None:
        run_argv = list(sys.argv[1:] if argv is None else argv)
        try:
            refuse_a_taken_port(args.listen)  # the workers share it: probed once, here
        except LaunchError as exc:
            print(f"egress-proxy: {exc}", file=sys.stderr)
            return 2
        try:
            return run_workers(run_argv, args.workers, args.config, args.metrics)
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
        log_format=args.log_format,
        http2=args.http2,
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
        loaded = sandboxes.check_node(path, secrets=secrets)  # with `sandboxes:`, every file too
    except configuration.ConfigError as exc:
        _print_problems(exc)
        return 1
    for warning in lint.warnings(path):
        print(f"warning: {warning}", file=sys.stderr)
    unresolved = "" if secrets else " (references not looked up: --no-secrets)"
    shown = f", {loaded} sandbox files" if loaded is not None else ""
    print(f"{path}: ok, {len(network.allowlist)} allowlist entries{shown}{unresolved}")
    return 0


def _run_dns(args: argparse.Namespace) -> int:
    from proxy import dns

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
