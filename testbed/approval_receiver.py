"""A webhook approver's receiver for the approvals tests (docs/configuration.md#approvals):
it checks `X-Egress-Signature` (HMAC-SHA256 of the exact body with the shared secret),
writes one JSON line per POST to `--log` (the approval and whether the signature held),
answers 202, and — when the signature held — answers the approval through the proxy's
admin API (`POST /approvals/{id}`) with `--decision` and `--scope`.

    python -m testbed.approval_receiver --listen 127.0.0.1:PORT --secret-file F --log L \\
        --ready R --admin HOST:PORT --token-file T [--decision allow] [--scope once]
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--listen", "--secret-file", "--log", "--ready", "--admin", "--token-file"):
        parser.add_argument(name, required=True)
    parser.add_argument("--decision", default="allow")
    parser.add_argument("--scope", default="once")
    args = parser.parse_args()
    secret = Path(args.secret_file).read_text().strip().encode()
    token = Path(args.token_file).read_text().strip()
    admin_host, admin_port = args.admin.rsplit(":", 1)
    log = Path(args.log)
    lock = threading.Lock()

    def answer(approval: str) -> None:
        connection = http.client.HTTPConnection(admin_host, int(admin_port), timeout=10)
        body = json.dumps({"decision": args.decision, "scope": args.scope}).encode()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        try:
            connection.request("POST", f"/approvals/{approval}", body, headers)
            connection.getresponse().read()
        finally:
            connection.close()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
            given = self.headers.get("X-Egress-Signature", "")
            valid = hmac.compare_digest(expected, given)
            approval = json.loads(body)
            with lock, log.open("a") as out:
                out.write(json.dumps({"approval": approval, "signature_valid": valid}) + "\n")
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            if valid:
                threading.Thread(target=answer, args=(approval["id"],), daemon=True).start()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    host, port = args.listen.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), Handler)
    Path(args.ready).write_text("ready\n")
    server.serve_forever()


if __name__ == "__main__":
    main()
