"""A test forge (testbed/forge_server.py) on loopback over TLS with a test CA, for the
minters' tests: a real HTTPS token endpoint and GitHub-App-style API."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from testbed import procs
from testbed.testca import Pki, make_test_pki

REPO = Path(__file__).resolve().parents[3]


@dataclass
class Forge:
    url: str
    pki: Pki
    app_key_pem: str
    child: procs.Child

    stats_file: Path
    git_root: Path | None = None

    def stats(self) -> dict[str, Any]:
        """What the forge minted and refused (its --stats file: readable from any namespace)."""
        return json.loads(self.stats_file.read_text())  # type: ignore[no-any-return]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def app_key(directory: Path) -> tuple[str, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    public = directory / "app-public.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


@contextmanager
def forge(directory: Path, *extra: str, prefix: list[str] | None = None,
          host: str = "127.0.0.1", port: int | None = None,
          pki: Pki | None = None) -> Iterator[Forge]:  # fmt: skip
    pki = pki or make_test_pki(directory, ["localhost", "forge.test"], [host])
    private, public = app_key(directory)
    port = port or free_port()
    ready = directory / "forge-ready"
    child = procs.start(
        "forge",
        [*(prefix or []), sys.executable, str(REPO / "testbed" / "forge_server.py")]
        + ["--listen", f"{host}:{port}", "--cert", str(pki.server_cert)]
        + ["--key", str(pki.server_key), "--ready", str(ready), "--app-key", str(public)]
        + ["--stats", str(directory / "forge-stats.json")]
        + list(extra),
        directory,
    )
    try:
        procs.wait_until("forge ready", ready.exists, timeout=20, child=child)
        git_root = Path(extra[extra.index("--git-root") + 1]) if "--git-root" in extra else None
        stats = directory / "forge-stats.json"
        yield Forge(f"https://{host}:{port}", pki, private, child, stats, git_root)
    finally:
        child.stop()
