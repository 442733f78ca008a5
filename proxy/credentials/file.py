"""`file`: a credential read from a file (`{file: /run/secrets/token}`), one trailing
newline stripped, like `${file:...}` (docs/configuration.md#placeholders).

Re-read on every fetch, and fetched again once its `ttl` (default 30 s here) has passed:
a file Kubernetes rotates reaches requests within the ttl, and a failed re-read keeps
serving the last value (`max_stale`), as a failed `${file:}` re-read does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox_egress.proxy.credentials.base import CacheSettings, CredentialError, Fetched
from sandbox_egress.proxy.credentials.block import Block, Report
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.values.secret import Secret

DEFAULT_FILE_TTL_S = 30.0
MAX_FILE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class FileSource:
    path: str
    settings: CacheSettings = CacheSettings(ttl=DEFAULT_FILE_TTL_S)

    def source(self, https: Https) -> FileSource:
        return self

    def fetch(self) -> Fetched:
        return Fetched(Secret(read_secret_file(self.path)))


def read_secret_file(path: str) -> str:
    """The file's text without one trailing newline; CredentialError naming the path."""
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise CredentialError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise CredentialError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CredentialError(f"{path} is not UTF-8 text") from None
    return text[:-1] if text.endswith("\n") else text


def parse(
    raw: Any, where: str, report: Report, environ: Mapping[str, str] | None
) -> FileSource | None:
    """`file: /path`, or `file: {path: /path, ttl: ...}`."""
    block = Block.of({"path": raw} if isinstance(raw, str) else raw, where, report, environ)
    if block is None:
        return None
    path = block.absolute_path("path")
    settings = block.settings(ttl=DEFAULT_FILE_TTL_S)
    block.unknown()
    return FileSource(path, settings) if block.ok else None
