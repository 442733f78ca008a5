"""The upstreams, in the upstream namespace: nginx (HTTP and HTTPS) and the upload sink.

nginx answers `/` with a 3-byte body and an `X-Bench-Auth` header saying whether
the request carried the injected `Authorization` (`injected`), none (`none`) or
another one (`other`) — the probe reads it; the load does not. `/hook` answers a
hook runner's POST with `{"decision": "allow"}`; `/big` is a sparse 1 GiB file.
TLS 1.3 only, HTTP/1.1 only (no ALPN h2), no access log.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from bench import netns, procs
from bench.pki import UpstreamPki

HTTP_PORT = 80
HTTPS_PORT = 443
SINK_PORT = 8443
BIG_BYTES = 1 << 30
SINK_SCRIPT = Path(__file__).with_name("sink.py")

NGINX_CONF = """\
daemon off;
master_process on;
worker_processes auto;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 10000000;
    keepalive_timeout 300s;
    client_max_body_size 1m;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    map $http_authorization $bench_auth {{
        "{authorization}" injected;
        "" none;
        default other;
    }}
    server {{
        listen {ip}:{http_port} reuseport backlog=4096;
        listen {ip}:{https_port} ssl http2 reuseport backlog=4096;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.3;
        location = / {{
            add_header X-Bench-Auth $bench_auth always;
            return 200 "ok\\n";
        }}
        location = /hook {{
            default_type application/json;
            return 200 '{{"decision": "allow"}}';
        }}
        location = /big {{
            alias {dir}/big.bin;
        }}
    }}
}}
"""


@dataclass
class Upstreams:
    nginx: procs.Child
    sink: procs.Child


def start(
    ns: netns.Namespaces, pki: UpstreamPki, work: Path, authorization: str, log_dir: Path
) -> Upstreams:
    """Start nginx and the sink in the upstream namespace; return once both accept."""
    root = work / "nginx"
    root.mkdir()
    root.chmod(0o755)  # workers (www-data) read big.bin; the master reads the key as root
    with open(root / "big.bin", "wb") as big:
        big.truncate(BIG_BYTES)  # sparse: takes no disk space
    (root / "big.bin").chmod(0o644)
    conf = root / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            dir=root,
            ip=netns.UPSTREAM_IP,
            http_port=HTTP_PORT,
            https_port=HTTPS_PORT,
            cert=pki.server_cert,
            key=pki.server_key,
            authorization=authorization,
        )
    )
    error_log = str(root / "nginx-error.log")
    nginx = procs.start(
        "nginx", [*ns.exec_prefix(ns.upstream), "nginx", "-c", str(conf), "-e", error_log], log_dir
    )
    sink = procs.start(
        "sink",
        [
            *ns.exec_prefix(ns.upstream),
            sys.executable,
            str(SINK_SCRIPT),
            "--listen",
            f"{netns.UPSTREAM_IP}:{SINK_PORT}",
            "--cert",
            str(pki.server_cert),
            "--key",
            str(pki.server_key),
        ],
        log_dir,
    )
    for child, port in ((nginx, HTTPS_PORT), (nginx, HTTP_PORT), (sink, SINK_PORT)):

        def accepting(port: int = port) -> bool:
            return netns.port_open(ns.client, netns.UPSTREAM_IP, port)

        procs.wait_until(f"{child.name} on port {port}", accepting, timeout=20, child=child)
    return Upstreams(nginx, sink)
