"""`egress-proxy approvals [--metrics HOST:PORT] [--admin-token-file FILE] list|allow ID
[--scope S]|deny ID`: the admin API of a running proxy, for humans
(docs/configuration.md#the-admin-api-on-the-metrics-address).

`list` prints one line per approval (id, state, sandbox, host:port, method and path, how
many wait); `allow`/`deny` print the approval as decided. Exit 0 on success, 1 with the
API's error (or why it could not be reached), 2 for a token that cannot be read.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
from pathlib import Path
from typing import Any

from sandbox_egress.common.endpoint import format_endpoint

TOKEN_ENV = "EGRESS_ADMIN_TOKEN_FILE"
TIMEOUT_S = 15.0
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def add_parser(sub: Any, endpoint: Any) -> None:
    approvals = sub.add_parser("approvals", help="list and answer held destinations (1.18)")
    add_admin_arguments(approvals, endpoint)
    approvals.add_argument("action", choices=("list", "allow", "deny"), help="what to do")
    approvals.add_argument("id", nargs="?", help="the approval (allow, deny): ap-...")
    approvals.add_argument(
        "--scope", default="once", help="allow: once, session or a duration (1h)"
    )


def add_admin_arguments(parser: Any, endpoint: Any) -> None:
    """`--metrics HOST:PORT` and `--admin-token-file FILE` (approvals, usage)."""
    parser.add_argument(
        "--metrics",
        default="127.0.0.1:9464",
        type=endpoint,
        metavar="HOST:PORT",
        help="the metrics address of `run`",
    )
    parser.add_argument(
        "--admin-token-file",
        type=Path,
        metavar="FILE",
        help=f"the file `run --admin-token-file` read (default: ${TOKEN_ENV})",
    )


def read_token(given: Path | None, command: str) -> str | None:
    """The token of `--admin-token-file` (or $EGRESS_ADMIN_TOKEN_FILE); None, said why."""
    path = given or (Path(os.environ[TOKEN_ENV]) if TOKEN_ENV in os.environ else None)
    if path is None:
        print(f"egress-proxy: {command} needs --admin-token-file FILE", file=sys.stderr)
        return None
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        print(f"egress-proxy: cannot read {path}", file=sys.stderr)
        return None


def run(args: argparse.Namespace) -> int:
    token = read_token(args.admin_token_file, "approvals")
    if token is None:
        return 2
    host, port = args.metrics
    if args.action != "list" and not args.id:
        print(f"egress-proxy: approvals {args.action} needs the approval's ID", file=sys.stderr)
        return 2
    if args.action == "list":
        status, document = call(host, port, token, "GET", "/approvals")
    else:
        body: dict[str, Any] = {"decision": args.action}
        if args.action == "allow":
            body["scope"] = args.scope
        status, document = call(host, port, token, "POST", f"/approvals/{args.id}", body)
    if status != 200:
        print(f"egress-proxy: approvals: {status} {document.get('error', '')}", file=sys.stderr)
        return 1
    if args.action == "list":
        for approval in document.get("approvals", []):
            print(line(approval))
    else:
        print(line(document))
    return 0


def line(approval: dict[str, Any]) -> str:
    where = f"{approval.get('host')}:{approval.get('port')}"
    what = " ".join(str(approval[k]) for k in ("method", "path") if approval.get(k))
    scope = f" scope={approval['scope']}" if approval.get("scope") else ""
    return (
        f"{approval.get('id')} {approval.get('state')}{scope} sandbox={approval.get('sandbox')} "
        f"{where} {what} waiting={approval.get('waiting')}"
    ).rstrip()


def call(
    host: str, port: int, token: str, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    """One admin API call: (status, JSON answer); status 0 when it could not be reached."""
    target = _WILDCARDS.get(host, host)
    connection = http.client.HTTPConnection(target, port, timeout=TIMEOUT_S)
    payload = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
    if payload is not None:
        headers["Content-Type"] = "application/json"
    try:
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        raw = response.read(1 << 22)
    except (OSError, http.client.HTTPException) as exc:
        shown = format_endpoint(target, port)
        return 0, {"error": f"http://{shown}{path}: {type(exc).__name__}"}
    finally:
        connection.close()
    try:
        document = json.loads(raw)
    except ValueError:
        document = {"error": raw[:200].decode("utf-8", "replace")}
    return response.status, document if isinstance(document, dict) else {}
