"""Secret files re-read when they change (runtime/lifecycle.py, D115): a rotated value is
applied without a restart; a failed re-read keeps the last value and is reported."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from sandbox_egress.proxy.config import loader as configuration
from sandbox_egress.runtime.lifecycle import Reloader, watch_file

PH = "sk-egress-placeholder-rotation"


def value_of(config: configuration.NetworkConfig) -> tuple[str, str]:
    entry = config.allowlist[0]
    return entry.secrets[0].value.reveal(), entry.transform[0].value.reveal()


async def until(results: list[bool], count: int) -> None:
    async with asyncio.timeout(10):
        while len(results) < count:
            await asyncio.sleep(0.01)


def test_a_rotated_secret_file_is_reloaded_and_a_failed_read_keeps_the_last(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key, token = tmp_path / "key", tmp_path / "token"
    key.write_text("key-v1\n")
    token.write_text("token-v1\n")
    path = tmp_path / "env.yaml"
    path.write_text(
        "network:\n  allowlist:\n    - domain: api.test\n"
        f"      transform: {{X-Token: '${{file:{token}}}'}}\n"
        f"      secrets: [{{placeholder: {PH}, value: '${{file:{key}}}'}}]\n"
    )
    running = [configuration.load(path)]
    results: list[bool] = []
    reload = Reloader(str(path), running.append, results.append, running[0].secret_files)
    assert reload.files == (str(token), str(key))

    async def scenario() -> None:
        watcher = asyncio.create_task(watch_file(reload, interval=0.01))
        await asyncio.sleep(0)  # the watcher takes its first fingerprints
        try:
            fresh = key.with_name("key.new")  # what kubelet and editors do: write, rename
            fresh.write_text("key-v2\n")
            os.replace(fresh, key)
            await until(results, 1)
            key.unlink()  # a rotation caught half-way: the file is gone
            await until(results, 2)
            token.write_text("token-v2\n")  # still gone: refused again
            await until(results, 3)
            key.write_text("key-v3\n")
            await until(results, 4)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    with caplog.at_level(logging.ERROR, logger="egress"):
        asyncio.run(scenario())
    assert results == [True, False, False, True]
    assert [value_of(c) for c in running] == [
        ("key-v1", "token-v1"),
        ("key-v2", "token-v1"),
        ("key-v3", "token-v2"),
    ]
    refused = [r.getMessage() for r in caplog.records]
    assert len(refused) == 2
    assert all(f"cannot read ${{file:{key}}}" in m for m in refused)
    assert not any("key-v" in m or "token-v" in m for m in refused)
