"""Scenario 5: the cost of redacting echoed secrets (pure Python, no network).

Body: the streaming matcher the addon puts on an identity-encoded response to a
request that carried an injection (`Redactor.body()`, wrapped like the addon wraps
it around its byte counter), against the plain pass-through counter every other
response gets, both fed the same 16 MiB body in 16 KiB chunks (mitmproxy's usual
read size) with no secret in it (the common case: a matcher that finds nothing).
Reported: MB/s of body scanned for each, and their ratio, measured alternately in
the same run (median of the rounds). Also with one secret in every chunk, split
across the boundary, for the worst realistic case.

Header: `Redactor.header` on one ordinary response header value, the per-header
cost of matching every spelling (regex) of the entry's secrets.

The secrets are those of a real transform entry parsed by the real loader
(`Bearer ${TOKEN}` and the token alone), so their lengths are realistic.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.values.redact import Redactor

BODY_BYTES = 16 << 20
CHUNK_BYTES = 16 << 10
TOKEN = "bench-" + "k7Qx" * 10  # 46 bytes, the size of a typical API token
HEADER = b"application/json; charset=utf-8"


def _redactor() -> Redactor:
    document = {"network": {"allowlist": [{"domain": "api.bench.test", "transform": {
        "Authorization": "Bearer ${TOKEN}"}}]}}  # fmt: skip
    config = parse(document, "bench-redact", {"TOKEN": TOKEN})
    return config.allowlist[0].redactions


def _chunks(with_secret: bool) -> list[bytes]:
    filler = bytes(range(32, 127)) * (CHUNK_BYTES // 95 + 1)
    chunk = filler[:CHUNK_BYTES]
    if with_secret:  # the token straddles the chunk boundary
        half = len(TOKEN) // 2
        chunk = TOKEN[half:].encode() + chunk[len(TOKEN) :] + TOKEN[:half].encode()
    return [chunk] * (BODY_BYTES // CHUNK_BYTES)


def _pass_through() -> Callable[[bytes], Iterable[bytes] | bytes]:
    """The addon's `_counter`: counts and returns the chunk."""
    counted = [0]

    def count(chunk: bytes) -> bytes:
        counted[0] += len(chunk)
        return chunk

    return count


def _matcher(redactor: Redactor) -> Callable[[bytes], Iterable[bytes] | bytes]:
    """The addon's `_scrubbed(_counter, redactor.body())`."""
    count, scrub = _pass_through(), redactor.body()

    def scrubbed(chunk: bytes) -> Iterable[bytes] | bytes:
        counted = count(chunk)
        assert isinstance(counted, bytes)
        return scrub(counted)

    return scrubbed


def _sent(out: Iterable[bytes] | bytes) -> int:
    return len(out) if isinstance(out, bytes) else sum(len(p) for p in out)


def _time_body(stream: Callable[[bytes], Iterable[bytes] | bytes], chunks: list[bytes]) -> float:
    """MB/s (10**6 bytes) of body through one stream callable, called as mitmproxy does
    (each chunk, then `b""` at the end)."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        started = time.perf_counter()
        sent = sum(_sent(stream(chunk)) for chunk in chunks) + _sent(stream(b""))
        elapsed = time.perf_counter() - started
    finally:
        if gc_was_enabled:
            gc.enable()
    if sent != BODY_BYTES:
        raise RuntimeError(f"stream changed the body length: {sent} != {BODY_BYTES}")
    return BODY_BYTES / elapsed / 1e6


def _time_header(redactor: Redactor, loops: int = 200_000) -> float:
    started = time.perf_counter_ns()
    for _ in range(loops):
        redactor.header(HEADER)
    return (time.perf_counter_ns() - started) / loops


def measure(rounds: int = 5) -> dict[str, Any]:
    redactor = _redactor()
    results: dict[str, Any] = {
        "body_bytes": BODY_BYTES,
        "chunk_bytes": CHUNK_BYTES,
        "secret_bytes": [len(s) for s in redactor.secrets],
        "rounds": rounds,
        "body": {},
    }
    for case, with_secret in (("no secret in the body", False), ("a secret every chunk", True)):
        chunks = _chunks(with_secret)
        plain: list[float] = []
        scanned: list[float] = []
        for _ in range(rounds):  # alternate, so drift on a shared machine hits both
            plain.append(_time_body(_pass_through(), chunks))
            scanned.append(_time_body(_matcher(redactor), chunks))
        results["body"][case] = {
            "pass_through_mb_s": statistics.median(plain),
            "matcher_mb_s": statistics.median(scanned),
            "ratio": statistics.median(plain) / statistics.median(scanned),
            "matcher_range_mb_s": [min(scanned), max(scanned)],
        }
    results["header_ns"] = statistics.median(_time_header(redactor) for _ in range(rounds))
    return results
