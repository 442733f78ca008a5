"""Scenario 10: a replayed agent session, timed end to end per contender (issue 36).

What an agent waits for, each part served by a real server in the upstream namespace
on `BULK_HOST` (a plain entry of every contender's policy; the staged policy of
bench/staged.py for the product) and run by the real client in the client namespace:

* `git`: `git clone` of a ~100 MiB repository over smart HTTP (git http-backend via
  fcgiwrap behind nginx, TLS 1.3 on `SESSION_PORT`); the repository is generated once,
  deterministically (incompressible blobs, `COMMITS` commits, fixed dates), into the
  cache directory and reused between runs;
* `pip`: `pip download` of `WHEELS` generated wheels from a PEP 503 simple index that
  the same nginx serves as files;
* `chat`: `CHATS` chat completions with the OpenAI Python SDK (streamed: SSE) against
  bench/chatserver.py, TLS on `CHAT_PORT`;
* `download`: the 1 GiB file of the upstream nginx (`/big` on 443) with curl.

Each part is timed by the wall clock around its client process; the total is their sum.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import netns, procs, upstream
from bench.allowlist import BULK_HOST

SESSION_PORT = 9443
CHAT_PORT = 9444
COMMITS = 300
BLOB_BYTES = 340 * 1024  # x COMMITS: about 100 MiB of incompressible blobs
WHEELS = 40
WHEEL_BYTES = 256 * 1024
CHATS = 300
PARTS = ("git", "pip", "chat", "download")
CHAT_SCRIPT = Path(__file__).with_name("chatserver.py")
FCGIWRAP = "/usr/sbin/fcgiwrap"
HTTP_BACKEND = "/usr/lib/git-core/git-http-backend"
CA_VARIABLES = (
    "GIT_SSL_CAINFO",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
)

NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 2;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nodelay on;
    client_max_body_size 64m;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen {ip}:{port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.3;
        location /simple/ {{
            root {cache};
            index index.html;
        }}
        location /wheels/ {{
            root {cache};
        }}
        location ~ ^/git(/.*)$ {{
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME {backend};
            fastcgi_param GIT_PROJECT_ROOT {cache}/git;
            fastcgi_param GIT_HTTP_EXPORT_ALL "";
            fastcgi_param PATH_INFO $1;
            fastcgi_buffering off;
            fastcgi_pass unix:{socket};
        }}
    }}
}}
"""


def _git(*args: str, cwd: Path, stdin: bytes | None = None) -> None:
    subprocess.run(["git", *args], cwd=cwd, input=stdin, check=True, capture_output=True)


def _fast_import(rng: random.Random) -> bytes:
    """A fast-import stream: COMMITS commits, each adding one incompressible blob."""
    out = io.BytesIO()
    for n in range(COMMITS):
        blob = rng.randbytes(BLOB_BYTES)
        stamp = 1_700_000_000 + n * 60
        message = f"commit {n}\n".encode()
        out.write(b"commit refs/heads/main\n")
        out.write(f"committer Bench <bench@bench.test> {stamp} +0000\n".encode())
        out.write(f"data {len(message)}\n".encode() + message)
        out.write(f"M 644 inline data/{n // 50:02d}/blob-{n:04d}.bin\n".encode())
        out.write(f"data {len(blob)}\n".encode() + blob + b"\n")
    return out.getvalue()


def _wheel(name: str, rng: random.Random) -> bytes:
    """A valid wheel of `name` 1.0 holding WHEEL_BYTES of incompressible data."""
    files = {
        f"{name}/__init__.py": b"",
        f"{name}/data.bin": rng.randbytes(WHEEL_BYTES),
        f"{name}-1.0.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()
        ),
        f"{name}-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(
        f"{path},sha256={hashlib.sha256(data).hexdigest()},{len(data)}\n"
        for path, data in files.items()
    )
    record += f"{name}-1.0.dist-info/RECORD,,\n"
    files[f"{name}-1.0.dist-info/RECORD"] = record.encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
            archive.writestr(info, data)
    return out.getvalue()


def prepare(cache: Path) -> Path:
    """The repository, the wheels and the index under `cache` (made once; returned)."""
    cache = cache.resolve()
    done = cache / "ready-v1"
    if done.exists():
        return cache
    shutil.rmtree(cache, ignore_errors=True)
    repo = cache / "git" / "repo.git"
    repo.mkdir(parents=True)
    _git("init", "--bare", "-q", "-b", "main", str(repo), cwd=cache)
    _git("fast-import", "--quiet", cwd=repo, stdin=_fast_import(random.Random(36)))
    _git("config", "http.uploadpack", "true", cwd=repo)
    rng = random.Random(3636)
    (cache / "wheels").mkdir()
    simple = cache / "simple"
    simple.mkdir()
    links = []
    for n in range(WHEELS):
        name = f"benchpkg{n:02d}"
        wheel = _wheel(name, rng)
        filename = f"{name}-1.0-py3-none-any.whl"
        (cache / "wheels" / filename).write_bytes(wheel)
        digest = hashlib.sha256(wheel).hexdigest()
        (simple / name).mkdir()
        (simple / name / "index.html").write_text(
            f'<!DOCTYPE html><html><body><a href="/wheels/{filename}#sha256={digest}">'
            f"{filename}</a></body></html>\n"
        )
        links.append(f'<a href="/simple/{name}/">{name}</a>')
    (simple / "index.html").write_text("<html><body>" + "".join(links) + "</body></html>\n")
    for path in [cache, *cache.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    done.touch()
    return cache


def packages() -> list[str]:
    return [f"benchpkg{n:02d}" for n in range(WHEELS)]


def start_servers(
    ns: netns.Namespaces, cert: Path, key: Path, cache: Path, work: Path, log_dir: Path
) -> list[procs.Child]:
    """fcgiwrap, nginx and the chat server in the upstream namespace, once accepting."""
    root = work / "session"
    root.mkdir()
    root.chmod(0o755)
    socket = root / "fcgi.sock"
    # One process (`-c 1`): with more, it forks workers that outlive its SIGTERM.
    fcgi = procs.start(
        "fcgiwrap",
        [*ns.exec_prefix(ns.upstream), FCGIWRAP, "-c", "1", "-s", f"unix:{socket}"],
        log_dir,
    )
    procs.wait_until("fcgiwrap's socket", socket.exists, timeout=20, child=fcgi)
    socket.chmod(0o666)  # nginx's workers are unprivileged
    conf = root / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            dir=root,
            ip=netns.UPSTREAM_IP,
            port=SESSION_PORT,
            cert=cert,
            key=key,
            cache=cache,
            backend=HTTP_BACKEND,
            socket=socket,
        )
    )
    error_log = str(root / "nginx-error.log")
    nginx = procs.start(
        "session-nginx",
        [*ns.exec_prefix(ns.upstream), "nginx", "-c", str(conf), "-e", error_log],
        log_dir,
    )
    chat = procs.start(
        "chatserver",
        [
            *ns.exec_prefix(ns.upstream),
            sys.executable,
            str(CHAT_SCRIPT),
            "--listen",
            f"{netns.UPSTREAM_IP}:{CHAT_PORT}",
            "--cert",
            str(cert),
            "--key",
            str(key),
        ],
        log_dir,
    )
    children = [fcgi, nginx, chat]
    for child, port in ((nginx, SESSION_PORT), (chat, CHAT_PORT)):

        def accepting(port: int = port) -> bool:
            return netns.port_open(ns.client, netns.UPSTREAM_IP, port)

        procs.wait_until(f"{child.name} on port {port}", accepting, timeout=20, child=child)
    return children


def _commands(proxy: str | None, cafile: str, scratch: Path) -> dict[str, list[str]]:
    """Each part's client command line (`proxy`: http://127.0.0.1:PORT, None: direct)."""
    base = f"https://{BULK_HOST}"
    git = ["git", "-c", f"http.sslCAInfo={cafile}"]
    if proxy:
        git += ["-c", f"http.proxy={proxy}"]
    git += ["clone", "-q", f"{base}:{SESSION_PORT}/git/repo.git", str(scratch / "repo")]
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir"]
    pip += ["--disable-pip-version-check", "--cert", cafile, "-d", str(scratch / "wheels")]
    pip += ["--index-url", f"{base}:{SESSION_PORT}/simple/", *packages()]
    if proxy:
        pip += ["--proxy", proxy]
    chat = [sys.executable, "-m", "bench.chatclient", "--base-url", f"{base}:{CHAT_PORT}/v1"]
    chat += ["--cafile", cafile, "--calls", str(CHATS)]
    if proxy:
        chat += ["--proxy", proxy]
    curl = ["curl", "-sS", "--fail", "-o", "/dev/null", "--cacert", cafile]
    if proxy:
        curl += ["--proxy", proxy]
    curl += [f"{base}:{upstream.HTTPS_PORT}/big"]
    return {"git": git, "pip": pip, "chat": chat, "download": curl}


def run_once(
    prefix: list[str], proxy: str | None, cafile: str, scratch: Path, cwd: Path
) -> dict[str, float]:
    """One session through `proxy`: seconds per part."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    # The machine's own trust and proxy variables would override the command lines.
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update({name: cafile for name in CA_VARIABLES})
    seconds: dict[str, float] = {}
    for part, argv in _commands(proxy, cafile, scratch).items():
        started = time.perf_counter()
        done = subprocess.run(
            [*prefix, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
        )
        seconds[part] = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"session {part} via {proxy or 'direct'}: {done.stderr[-2000:]}")
    shutil.rmtree(scratch, ignore_errors=True)
    return seconds


def measure(
    prefix: list[str],
    contenders: list[tuple[str, str | None, str]],
    scratch: Path,
    cwd: Path,
    rounds: int,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Every contender (name, proxy URL or None, CA file) `rounds` times, interleaved;
    the median of each part and of the total."""
    found: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in contenders}
    for number in range(rounds):
        for name, proxy, cafile in contenders:
            seconds = run_once(prefix, proxy, cafile, scratch, cwd)
            seconds["total"] = sum(seconds[p] for p in PARTS)
            found[name].append(seconds)
            shown = ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items())
            progress(f"  round {number + 1} {name}: {shown}")
    result: dict[str, Any] = {
        "parts": {
            "git_commits": COMMITS,
            "git_mib": COMMITS * BLOB_BYTES / (1 << 20),
            "wheels": WHEELS,
            "chats": CHATS,
            "download_bytes": upstream.BIG_BYTES,
        },
        "rounds": rounds,
        "seconds": {},
    }
    result["spread"] = {}
    for name, runs in found.items():
        result["seconds"][name] = {
            key: sorted(r[key] for r in runs)[len(runs) // 2] for key in (*PARTS, "total")
        }
        # issue 49: with more than one round, each part's [min, max], so that the spread
        # of direct's own times is visible beside the ratios to its median
        result["spread"][name] = {
            key: [min(r[key] for r in runs), max(r[key] for r in runs)] for key in (*PARTS, "total")
        }
    return result


def lines(section: dict[str, Any], grid: Any) -> list[str]:
    """The report's table: seconds per part and in total, and each ÷ direct's."""
    seconds = section["seconds"]
    direct = seconds.get("direct")
    header = ["contender", *(f"{key} s (÷ direct)" for key in (*PARTS, "total"))]
    rows = []
    spread = section.get("spread", {}) if section["rounds"] > 1 else {}
    for name, parts in seconds.items():
        row = [name]
        for key in (*PARTS, "total"):
            ratio = f" ({parts[key] / direct[key]:.2f}×)" if direct and direct[key] else ""
            low, high = spread.get(name, {}).get(key, (None, None))
            span = f" [{low:.2f}-{high:.2f}]" if low is not None else ""
            row.append(f"{parts[key]:.2f}{span}{ratio}")
        rows.append(row)
    shape = section["parts"]
    return [
        f"Scenario 10: a replayed agent session (median [min-max] of {section['rounds']}): "
        "git clone "
        f"of {shape['git_mib']:.0f} MiB ({shape['git_commits']} commits), pip download of "
        f"{shape['wheels']} wheels, {shape['chats']} streamed chat completions (OpenAI SDK), "
        f"a {shape['download_bytes'] >> 20} MiB download (curl); "
        "targets: total ≤ 1.25× direct, download ≤ 1.5×, chat ≤ 1.3× (issue 49)",
        *grid(header, rows),
    ]
