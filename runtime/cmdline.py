"""The command line of `egress-proxy` (README.md#command-line): every subcommand and
option, with its default and help text. What each command does is `runtime.cli`.

A launcher module (it names the CA's key types, `runtime.ca`); parsing a command line
imports no mitmproxy. tests/test_command_line_doc.py checks the README against `parser()`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sandbox_egress.common.logs import add_log_format_option
from sandbox_egress.common.versions import DefaultsHelpFormatter, add_version_option
from sandbox_egress.proxy import fairness, health
from sandbox_egress.proxy.audit import AUDIT_FORMATS
from sandbox_egress.proxy.learn import importers
from sandbox_egress.runtime.admin import approvalscli
from sandbox_egress.runtime.ca import KeyType
from sandbox_egress.runtime.startup import parse_hostport

PROG = "egress-proxy"
# config/default.yaml, shipped as package data (pyproject.toml), so `run` alone works
# wherever the package is installed (its transform needs DEMO_API_TOKEN).
DEFAULT_CONFIG = Path(__file__).resolve().parent / "default.yaml"


DEFAULTS = DefaultsHelpFormatter  # every option's help shows its default


def parser() -> argparse.ArgumentParser:
    """The parser of `egress-proxy` and its subcommands."""
    parser = argparse.ArgumentParser(
        prog=PROG,
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
        "--audit-format",
        choices=list(AUDIT_FORMATS),
        default="jsonl",
        help="jsonl: the project's JSON lines (default); ocsf: one OCSF 1.5 event per line "
        "(HTTP Activity 4002, Network Activity 4001), for SIEMs",
    )
    run.add_argument(
        "--otlp-endpoint",
        type=_otlp_url,
        metavar="URL",
        help="also export each audit record as an OpenTelemetry log (OTLP/HTTP, JSON) to URL "
        "(http(s)://HOST:PORT, /v1/logs by default); batched, never delaying a request",
    )
    run.add_argument(
        "--otlp-header",
        type=_otlp_header,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a header on every OTLP export (repeatable), e.g. the collector's Authorization; "
        "VALUE may hold ${NAME} and ${file:/path} references, read for every batch",
    )
    run.add_argument(
        "--upstream-ca", type=Path, metavar="FILE", help="extra CA for upstream certificates"
    )
    run.add_argument(
        "--admin-token-file",
        type=Path,
        metavar="FILE",
        help="serve the approvals API (/approvals) on the metrics address to this bearer token",
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
        "--body-relay",
        action="store_true",
        help="relay a streamed HTTP/1.1 body between the two TLS legs below mitmproxy's "
        "layers once the policy has nothing more to read in it (lean engine; off by "
        "default for one release, D560)",
    )
    run.add_argument(
        "--fast-path",
        action="store_true",
        help="take a plain kept-alive HTTP/1.1 GET or HEAD to its stream and upstream "
        "below mitmproxy's layers (lean engine; off by default, D610)",
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

    run.add_argument(
        "--upstream-connect-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="an upstream connection not made this long is a 504 upstream_timeout (0: the "
        "kernel's own, about two minutes)",
    )
    run.add_argument(
        "--upstream-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="an answer that has not begun this long after the request's end is a 504 "
        "upstream_timeout (0: none; mitmproxy's tcp_timeout still ends a connection silent "
        "for 600 s)",
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
    _usage_parser(sub)
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
    check.add_argument(
        "--resolve",
        action="store_true",
        help="also fetch every credential of credentials: once and report each by name "
        "(ok, or why it failed; never a value); exit 1 when one failed",
    )
    check.add_argument(
        "--upstream-ca",
        type=Path,
        metavar="FILE",
        help="with --resolve: extra CA for token endpoints, APIs and vaults (as run's)",
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
    ca.add_argument(
        "--intermediate-of",
        type=Path,
        metavar="ROOT_DIR",
        help="issue (or replace) a node's intermediate CA in --certs, signed by the root CA "
        "in ROOT_DIR; the root key stays there (docs/operations.md#node-intermediates)",
    )
    ca.add_argument("--name", metavar="NODE", help="the node of --intermediate-of")
    ca.add_argument("--days", type=int, help="validity of --intermediate-of (default: 30)")
    ca.add_argument(
        "--permit",
        action="append",
        default=[],
        metavar="DOMAIN",
        help="name-constrain --intermediate-of to DOMAIN and its subdomains (repeatable)",
    )

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
    approvalscli.add_parser(sub, _endpoint)
    return parser


def _usage_parser(sub: Any) -> None:
    usage = sub.add_parser(
        "usage", help="print each sandbox's model API spending and what is left (llm: budgets)"
    )
    usage.add_argument("--config", required=True, help="the configuration (its state: section)")
    usage.add_argument("--sandbox", metavar="ID", help="only this sandbox (or client-ADDRESS)")
    approvalscli.add_admin_arguments(usage, _endpoint)  # the memory backend: ask the proxy


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


def _endpoint(text: str) -> tuple[str, int]:
    """`HOST:PORT` for argparse: its message, not "invalid parse_hostport value"."""
    try:
        return parse_hostport(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (for example 127.0.0.1:8080 or :8080)") from None


def _otlp_url(text: str) -> str:
    """`--otlp-endpoint`: an http(s) URL with a host (checked before anything starts)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError("expected http(s)://HOST:PORT[/PATH]")
    return text


def _otlp_header(text: str) -> tuple[str, str]:
    """`--otlp-header NAME=VALUE` (runtime.otlp.header_option), argparse's way."""
    from sandbox_egress.runtime.otlp import header_option

    try:
        return header_option(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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


def _key_type_option(parser: argparse.ArgumentParser, flag: str) -> None:
    parser.add_argument(
        flag,
        type=KeyType,
        choices=list(KeyType),
        default=KeyType.ECDSA,
        help="key of a CA created now: ecdsa (P-256, cheaper handshakes) or rsa (2048 bits); "
        "an existing CA is never replaced",
    )
