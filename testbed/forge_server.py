"""A test forge over HTTPS: an OAuth2 token endpoint, a GitHub-App-style API and the
services that accept only what they minted last (issue 32's end-to-end upstream).

    python testbed/forge_server.py --listen IP:PORT --cert C --key K --ready FILE
        [--git-root DIR] [--app-key PUB.pem] [--expires-in S]

* `POST /token`: OAuth2 (RFC 6749). `client_credentials` with HTTP Basic
  `client-1:client-secret-1`; `refresh_token` with the current refresh token, which it
  rotates. Mints `at-N-ttt...`, `expires_in` from --expires-in.
* `POST /app/installations/678/access_tokens`: the app JWT (RS256, `iss` 12345) checked
  against --app-key; mints `ghs_N`, one hour; the request body is logged.
* `GET /api/...`: 200 only with `Authorization: Bearer <last at-N>`; echoes the header.
* `/OWNER/REPO.git/...`: `git http-backend` under --git-root (testbed/git_server.py), only with
  `Basic x-access-token:<last ghs_N>`; 401 with a `WWW-Authenticate` challenge otherwise.
* `GET /stats`, and the file --stats rewritten on each change: `{"mints": N,
  "app_mints": M, "refused": R, "app_bodies": [...]}`.
"""

from __future__ import annotations

import argparse
import base64
import http.server
import json
import ssl
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import git_server  # noqa: E402  (run as a script beside it)

CLIENT = ("client-1", "client-secret-1")


class State:
    lock = threading.RLock()
    mints = 0
    app_mints = 0
    refused = 0
    invalid_grants = 0
    access = ""
    refresh = "refresh-0"
    installation = ""
    expires_in = 3600
    app_key: rsa.RSAPublicKey | None = None
    app_bodies: list[Any] = []
    stats_file = ""

    @classmethod
    def stats(cls) -> dict[str, Any]:
        return {"mints": cls.mints, "app_mints": cls.app_mints, "refused": cls.refused,
                "invalid_grants": cls.invalid_grants,
                "app_bodies": cls.app_bodies}  # fmt: skip

    @classmethod
    def changed(cls) -> None:
        if cls.stats_file:
            temporary = Path(f"{cls.stats_file}.tmp")
            temporary.write_text(json.dumps(cls.stats()))
            temporary.replace(cls.stats_file)


class Handler(git_server.Handler):
    path: str

    def do_GET(self) -> None:
        self.route()

    def do_POST(self) -> None:
        self.route()

    def route(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        if path == "/stats":
            self.json(200, State.stats())
        elif path == "/token" and self.command == "POST":
            self.token()
        elif path == "/app/installations/678/access_tokens" and self.command == "POST":
            self.installation_token()
        elif path.startswith("/api/"):
            if self.headers.get("Authorization") != f"Bearer {State.access}" or not State.access:
                self.refuse()
            else:
                self.json(200, {"authorization": self.headers.get("Authorization")})
        elif self.root and ".git" in path:
            expected = base64.b64encode(f"x-access-token:{State.installation}".encode())
            if (
                not State.installation
                or self.headers.get("Authorization") != f"Basic {expected.decode()}"
            ):
                self.refuse(challenge=True)
            else:
                self.cgi()
        else:
            self.json(404, {"error": "not found"})

    def body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def token(self) -> None:
        form = dict(urllib.parse.parse_qsl(self.body().decode()))
        grant = form.get("grant_type")
        with State.lock:
            if grant == "client_credentials":
                expected = base64.b64encode(":".join(CLIENT).encode()).decode()
                if self.headers.get("Authorization") != f"Basic {expected}":
                    return self.refuse()
            elif grant == "refresh_token":
                if form.get("refresh_token") != State.refresh:
                    State.invalid_grants += 1
                    State.changed()
                    return self.json(400, {"error": "invalid_grant"})
                State.refresh = f"refresh-{State.mints + 1}"
            else:
                return self.json(400, {"error": "unsupported_grant_type"})
            State.mints += 1
            State.access = f"at-{State.mints}-{'t' * 24}"
            State.changed()
            answer = {"access_token": State.access, "token_type": "Bearer",
                      "expires_in": State.expires_in}  # fmt: skip
            if grant == "refresh_token":
                answer["refresh_token"] = State.refresh
        self.json(200, answer)

    def installation_token(self) -> None:
        auth = self.headers.get("Authorization", "")
        body = self.body()
        if not auth.startswith("Bearer ") or not self.valid_jwt(auth[7:]):
            return self.refuse()
        with State.lock:
            State.app_mints += 1
            State.installation = f"ghs_{State.app_mints}x{'a' * 30}"
            State.app_bodies.append(json.loads(body or b"{}"))
            State.changed()
            expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
            answer = {"token": State.installation, "expires_at": expires}
        self.json(201, answer)

    def valid_jwt(self, token: str) -> bool:
        try:
            head, claims, signature = token.split(".")
            pad = lambda s: base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))  # noqa: E731
            assert State.app_key is not None
            State.app_key.verify(pad(signature), f"{head}.{claims}".encode(),
                                 padding.PKCS1v15(), hashes.SHA256())  # fmt: skip
            body = json.loads(pad(claims))
            now = time.time()
            return body["iss"] == "12345" and body["iat"] <= now < body["exp"]
        except Exception:  # noqa: BLE001 - any malformed token is refused
            return False

    def refuse(self, challenge: bool = False) -> None:
        with State.lock:
            State.refused += 1
            State.changed()
        self.send_response(401)
        if challenge:
            self.send_header("WWW-Authenticate", 'Basic realm="forge"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def json(self, status: int, value: Any) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 128
    daemon_threads = True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--git-root", default="")
    parser.add_argument("--app-key", default="")
    parser.add_argument("--expires-in", type=int, default=3600)
    parser.add_argument("--stats", default="")
    args = parser.parse_args()
    State.stats_file = args.stats
    State.changed()
    Handler.root = args.git_root
    State.expires_in = args.expires_in
    if args.app_key:
        key = serialization.load_pem_public_key(Path(args.app_key).read_bytes())
        assert isinstance(key, rsa.RSAPublicKey)
        State.app_key = key
    host, port = args.listen.rsplit(":", 1)
    server = Server((host, int(port)), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    # The handshake runs in each connection's thread (first read), not in accept():
    # twenty clients at once must not queue behind one another's handshakes.
    server.socket = context.wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False
    )
    Path(args.ready).write_text("ready\n")
    server.serve_forever()


if __name__ == "__main__":
    main()
