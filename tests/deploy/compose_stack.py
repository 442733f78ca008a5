"""The real compose.yaml, built and started with a real Compose implementation.

Used by test_compose_up.py and test_compose_fleet.py. A `Stack` is one Compose project
with its own name, its profiles (and, when given, only some services with their
dependencies), its own secret file (owner 10001, mode 0400, as scripts/compose-secret writes it)
and its own host port for Prometheus; `Stack.down()` removes its containers,
networks and volumes and is safe to call after a failed `up`.

Invariants:
* Every command is bounded in time; a failing command raises with its output
  (and, for `up`, the services' logs), so a test failure says what went wrong.
* Nothing here contacts an address outside the stack: the images are built
  from the local base image and the wheelhouse (scripts/base-image,
  scripts/wheelhouse), and probes name only the stack's own addresses or
  198.18.0.0/15 test addresses.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The Compose implementation: Debian's docker-compose 1.29 unless told otherwise
# (EGRESS_COMPOSE="docker compose" for Compose v2).
COMPOSE = shlex.split(os.environ.get("EGRESS_COMPOSE", "docker-compose"))
PROFILES = ("transparent",)  # test_compose_up.py's; test_compose_fleet.py names its own


class StackError(AssertionError):
    """A Compose or Docker command failed; the message holds its output."""


def run(argv: list[str], *, timeout: float, input: str | None = None, **kw: Any) -> str:
    """Run a command to completion (bounded); return stdout, raise StackError on failure."""
    try:
        done = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False, **kw
        )
    except subprocess.TimeoutExpired as exc:
        raise StackError(f"{shlex.join(argv)}: no result within {timeout}s") from exc
    if done.returncode != 0:
        raise StackError(
            f"{shlex.join(argv)}: exit {done.returncode}\n{done.stdout[-4000:]}{done.stderr[-4000:]}"
        )
    return done.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prepare_images() -> None:
    """A Docker engine that answers, the base image and the wheelhouse; both scripts are
    cached and cheap when done."""
    try:
        run(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=30)
    except (StackError, FileNotFoundError) as exc:
        raise StackError(
            "no Docker engine answers: run scripts/container-engine start "
            "(docs/operations.md, 'Containers without a registry')"
        ) from exc
    run([str(ROOT / "scripts/base-image")], timeout=900)
    run([str(ROOT / "scripts/wheelhouse"), sys.executable], timeout=600)


@dataclass
class Stack:
    project: str
    secret: Path
    token: str
    prometheus_port: int = field(default_factory=free_port)
    profiles: tuple[str, ...] = PROFILES
    services: tuple[str, ...] = ()  # `up` starts these and their dependencies; () for all

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
        env.update(
            COMPOSE_PROJECT_NAME=self.project,
            TELEMETRY_TOKEN_FILE=str(self.secret),
            PROMETHEUS_PORT=str(self.prometheus_port),
        )
        return env

    def compose(self, *args: str, timeout: float = 120, input: str | None = None) -> str:
        profiles = [arg for name in self.profiles for arg in ("--profile", name)]
        argv = [*COMPOSE, "-f", str(ROOT / "compose.yaml"), "-p", self.project, *profiles, *args]
        return run(argv, timeout=timeout, input=input, env=self.env, cwd=ROOT)

    def write_secret(self) -> None:
        self.secret.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.secret.write_text(self.token, encoding="utf-8")
        os.chown(self.secret, 10001, 10001)
        self.secret.chmod(0o400)

    def up(self) -> None:
        self.write_secret()
        self.compose("build", *self.services, timeout=900)
        try:
            self.compose("up", "-d", *self.services, timeout=300)
        except StackError as exc:
            raise StackError(f"{exc}\n--- logs ---\n{self.logs()}") from exc

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", "--timeout", "5", timeout=180)

    def logs(self, *services: str) -> str:
        try:
            return self.compose("logs", "--no-color", *services, timeout=60)
        except StackError as exc:
            return str(exc)

    def container(self, service: str) -> str:
        """The id of a service's container (names differ between Compose versions)."""
        (container,) = self.compose("ps", "-q", service, timeout=30).split()
        return container

    def exec(self, service: str, *argv: str, input: str | None = None) -> str:
        return self.compose("exec", "-T", service, *argv, input=input, timeout=120)

    def python(self, service: str, script: str) -> Any:
        """Run a Python script in a service; it prints one JSON document, returned parsed."""
        return json.loads(self.exec(service, "python", "-", input=script))

    def session(self, service: str, environment_id: str, *requests: dict[str, Any]) -> list[Any]:
        """One `hookrunner session` in a sandbox service (its environment, its network)."""
        lines = "".join(json.dumps(r) + "\n" for r in requests)
        out = self.exec(
            service,
            "hookrunner",
            "session",
            "--workspace",
            "/workspace",
            "--environment-id",
            environment_id,
            "--ca-file",
            "/etc/egress-ca/mitmproxy-ca-cert.pem",
            input=lines,
        )
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def prometheus(self, path: str) -> Any:
        """GET Prometheus's API through its published port on the host's loopback."""
        url = f"http://127.0.0.1:{self.prometheus_port}{path}"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=10) as response:
            return json.load(response)

    def audit(self, service: str) -> list[dict[str, Any]]:
        """The proxy's audit lines (JSON on stdout) in a service's logs."""
        lines = []
        for line in self.logs(service).splitlines():
            _, sep, text = line.partition("| ")
            if sep and text.startswith("{"):
                lines.append(json.loads(text))
        return lines


# A probe's `tcp(host, port)`: how a direct TCP connect ends, "connected", "timeout" or an
# errno name (the scripts that use it add what they print).
TCP_CONNECT = """
import errno, json, socket
def tcp(host, port):
    try:
        socket.create_connection((host, port), timeout=2).close()
        return "connected"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc))
"""


def probe(stack: Stack, service: str, script: str, **values: Any) -> Any:
    """Run `script` in `service` with `values` bound as its first lines (JSON literals)."""
    header = "".join(f"{name} = {json.dumps(value)}\n" for name, value in values.items())
    return stack.python(service, header + textwrap.dedent(script))


def wait_for(what: str, probe: Any, *, attempts: int = 60, interval: float = 1.0) -> Any:
    """Call `probe` until it returns a true value (bounded in count); return that value."""
    last: Any = None
    for _ in range(attempts):
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not reached after {attempts} attempts (last: {last!r})")
