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
from proxy import config as configuration
from proxy import health, optimized, sandboxes
from proxy import propose as proposing
from proxy.ca import KeyType, ensure_ca
from proxy.launcher import LaunchError, Settings, parse_hostport, serve
from proxy.workers import run_workers


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="egress-proxy", description="Egress proxy with allowlist and token transformation."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the proxy")
    run.add_argument("--config", required=True, help="environment file (YAML or JSON)")
    run.add_argument("--mode", choices=["regular", "transparent"], default="regular")
    run.add_argument("--listen", default="127.0.0.1:8080", type=parse_hostport)
    run.add_argument("--metrics", default="127.0.0.1:9464", type=parse_hostport)
    run.add_argument("--certs", default="certs", type=Path, help="CA directory")
    run.add_argument("--audit-log", default="-", help="audit log file, or - for stdout")
    run.add_argument("--upstream-ca", type=Path, help="extra CA for upstream certificates")
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

    dns = sub.add_parser(
        "dns", help="answer DNS for names the allowlist could allow, refuse the rest"
    )
    dns.add_argument("--config", required=True, help="environment file (YAML or JSON)")
    dns.add_argument("--listen", default="127.0.0.1:5353", type=parse_hostport)
    dns.add_argument("--metrics", default="127.0.0.1:9466", type=parse_hostport)
    add_log_format_option(dns)

    _propose_parser(sub)
    check = sub.add_parser("check", help="validate a configuration file")
    check.add_argument("file")

    ca = sub.add_parser("ca", help="create the CA if missing and print its certificate path")
    ca.add_argument("--certs", default="certs", type=Path)
    _key_type_option(ca, "--key-type")

    probe = sub.add_parser("health", help="exit 0 when the proxy's /healthz answers 200")
    probe.add_argument(
        "--metrics",
        default="127.0.0.1:9464",
        type=parse_hostport,
        help="the metrics address of `run` (a wildcard address is probed on loopback)",
    )
    probe.add_argument("--timeout", default=health.DEFAULT_TIMEOUT, type=float, metavar="SECONDS")
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
        try:
            network = configuration.load(args.file)
            loaded = sandboxes.check_node(args.file)  # with `sandboxes:`, every file too
        except configuration.ConfigError as exc:
            for problem in exc.problems:
                print(f"error: {problem}", file=sys.stderr)
            return 1
        shown = f", {loaded} sandbox files" if loaded is not None else ""
        print(f"{args.file}: ok, {len(network.allowlist)} allowlist entries{shown}")
        return 0
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
        ca = ensure_ca(args.certs, args.key_type)
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
            return run_workers(run_argv, args.workers, args.config, args.metrics)
        except configuration.ConfigError as exc:
            for problem in exc.problems:
                print(f"egress-proxy: configuration error: {problem}", file=sys.stderr)
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
        for problem in exc.problems:
            print(f"egress-proxy: configuration error: {problem}", file=sys.stderr)
        return 2
    except LaunchError as exc:
        print(f"egress-proxy: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


def _run_dns(args: argparse.Namespace) -> int:
    from proxy import dns

    # The responder's messages already start with "egress-proxy dns:" in text.
    log_handler("egress", args.log_format, sys.stderr, "", logging.WARNING)
    try:
        return asyncio.run(dns.run(args.config, args.listen, args.metrics))
    except configuration.ConfigError as exc:
        for problem in exc.problems:
            print(f"egress-proxy: configuration error: {problem}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"egress-proxy: cannot listen: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
