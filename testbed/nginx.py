"""nginx as a real upstream for the client suite: HTTPS with HTTP/2 and HTTP/1.1, static files.

Every request is one JSON line in `access.jsonl` (nginx's own `escape=json` log format),
written before nginx answers the next request on the connection: host, URI, protocol
(`HTTP/2.0` or `HTTP/1.1`), the ALPN and SNI of the TLS connection, the status, the
values of `Authorization` and `X-Api-Key`, and the connection's serial number (`conn`). nginx refuses a request that carries
`Authorization` twice (400, "client sent duplicate header line"), so a 200 with the
expected value in the log is exactly one such header. `POST /upload` keeps the request
body in a file of its own below nginx's work folder, named by the line's `body_file` (the
test removes it).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed import procs

# Every file nginx writes while it runs goes below the test's own directory (the defaults,
# under /var/lib/nginx, may not exist or be writable): an `http` block's lines.
TEMP_PATHS = """\
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
"""


def temp_paths(work: Path) -> str:
    """`TEMP_PATHS` below `work`, for an nginx.conf's `http` block."""
    return TEMP_PATHS.format(dir=work)


CONF = """\
daemon off;
master_process on;
worker_processes 1;
user root;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 512; }}
http {{
    log_format clients escape=json
        '{{"host":"$host","uri":"$request_uri","method":"$request_method",'
        '"proto":"$server_protocol","alpn":"$ssl_alpn_protocol","sni":"$ssl_server_name",'
        '"status":$status,"bytes":$body_bytes_sent,'
        '"auth":"$http_authorization","api_key":"$http_x_api_key","ua":"$http_user_agent",'
        '"body_file":"$request_body_file","conn":$connection}}';
    access_log {dir}/access.jsonl clients;
    types {{ text/html html; application/json json; application/octet-stream bin whl tgz; }}
    default_type application/octet-stream;
    sendfile on;
{temp_paths}    server {{
        listen {ip}:{https_port} ssl http2;
        listen {ip}:{http_port};
        ssl_certificate {cert};
        ssl_certificate_key {key};
        root {content};
        location = /headers {{
            default_type text/plain;
            return 200 "ok\\n";
        }}
        location = /npm/egress-demo {{
            default_type application/json;
            alias {content}/npm/egress-demo.json;
        }}
        location = /upload {{
            client_max_body_size 0;
            client_body_buffer_size 16m;
            client_body_in_file_only on;
            proxy_pass_request_body off;  # kept in the file; `/headers` answers the head
            proxy_set_header Content-Length "";
            proxy_pass http://{ip}:{http_port}/headers;
        }}
        location / {{ }}
    }}
{http11_server}}}
"""

# An HTTPS listener without HTTP/2 (start's `http11_port`): nginx refuses a ClientHello
# offering only `h2` (no_application_protocol), as an HTTP/1.1-only server does.
HTTP11_SERVER = """\
    server {{
        listen {ip}:{port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location = /proto {{
            default_type text/plain;
            return 200 "$server_protocol\\n";
        }}
    }}
"""


@dataclass
class Nginx:
    child: procs.Child
    access_log: Path

    def entries(self) -> list[dict[str, Any]]:
        text = self.access_log.read_text(encoding="utf-8") if self.access_log.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def mark(self) -> int:
        return len(self.entries())

    def since(self, mark: int) -> list[dict[str, Any]]:
        return self.entries()[mark:]

    def lines_for(
        self, mark: int, uri: str, count: int, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """The lines for `uri` since `mark` once there are `count` of them, or what there
        is after `timeout` (nginx writes a line once it finalized the request, which can
        be after its client already read the whole answer)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = [e for e in self.since(mark) if e["uri"] == uri]
            if len(lines) >= count or time.monotonic() > deadline:
                return lines
            time.sleep(0.05)


def start(
    exec_prefix: list[str],
    work: Path,
    content: Path,
    ip: str,
    ports: tuple[int, int],
    cert: Path,
    key: Path,
    log_dir: Path,
    accepting: Any,
    http11_port: int | None = None,
) -> Nginx:
    """Start nginx (HTTPS on ports[0], HTTP on ports[1], and HTTPS without HTTP/2 on
    `http11_port` if given) and wait until it accepts."""
    work.mkdir(parents=True, exist_ok=True)
    http11_server = ""
    if http11_port is not None:
        http11_server = HTTP11_SERVER.format(ip=ip, port=http11_port, cert=cert, key=key)
    conf = work / "nginx.conf"
    conf.write_text(
        CONF.format(
            dir=work,
            ip=ip,
            https_port=ports[0],
            http_port=ports[1],
            cert=cert,
            key=key,
            content=content,
            http11_server=http11_server,
            temp_paths=temp_paths(work),
        )  # fmt: skip
    )
    child = procs.start(
        "nginx", [*exec_prefix, "nginx", "-c", str(conf), "-e", str(work / "error.log")], log_dir
    )
    procs.wait_until("nginx accepting", accepting, timeout=20, child=child)
    return Nginx(child, work / "access.jsonl")
