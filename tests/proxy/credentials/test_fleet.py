"""One replica at a time refreshes a rotating refresh token (issue 34, D232): two replica
processes share a real Redis (Debian's redis-server, testbed.redisserver) and a real
token endpoint over TLS that rotates refresh tokens and answers `invalid_grant` to a spent
one (testbed/forge_server.py, which counts both)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from testbed.redisserver import RedisServer, start_redis
from tests.proxy.credentials.forge import REPO, Forge, forge

EXPIRES_S = 2  # the forge's tokens live 2 s; the replicas refresh at expiry
ROUNDS = 3


@contextmanager
def running(directory: Path) -> Iterator[tuple[Forge, RedisServer]]:
    with forge(directory, "--expires-in", str(EXPIRES_S)) as server:
        store = start_redis(directory)
        try:
            yield server, store
        finally:
            store.stop()


@contextmanager
def replicas(
    server: Forge, store: RedisServer, directory: Path, *extra: str
) -> Iterator[list[subprocess.Popen[str]]]:
    children = [
        subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "proxy" / "credentials" / "fleet_replica.py")]
            + ["--forge", server.url, "--ca", str(server.pki.ca_cert), "--redis", store.url]
            + ["--state-file", str(directory / f"replica-{n}.json"), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )  # fmt: skip
        for n in range(2)
    ]
    try:
        yield children
    finally:
        for child in children:
            child.kill()  # by its own handle: this test's processes only
            child.wait()


def fetch_at_once(children: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    """Both replicas asked at the same moment; each answers with its API call's outcome."""
    for child in children:
        assert child.stdin is not None
        child.stdin.write("fetch\n")
        child.stdin.flush()
    answers = []
    for child in children:
        assert child.stdout is not None
        answers.append(json.loads(child.stdout.readline()))
    return answers


def test_two_replicas_refresh_once_per_expiry_and_both_use_the_current_token(
    tmp_path: Path,
) -> None:
    with running(tmp_path) as (server, store), replicas(server, store, tmp_path) as children:
        for _ in range(ROUNDS):
            answers = fetch_at_once(children)
            assert answers == [{"status": 200, "error": ""}] * 2  # the forge's current token
            time.sleep(EXPIRES_S + 0.2)  # the token expires: the next fetch refreshes
        stats = server.stats()
    assert (stats["mints"], stats["invalid_grants"]) == (ROUNDS, 0)


def test_without_the_lock_two_replicas_spend_one_refresh_token_twice(tmp_path: Path) -> None:
    with (
        running(tmp_path) as (server, store),
        replicas(server, store, tmp_path, "--alone") as children,
    ):
        answers = fetch_at_once(children)
        stats = server.stats()
    assert sorted(a["status"] for a in answers) == [0, 200]  # one replica broke
    assert [a["error"] for a in answers if a["status"] == 0] == ["127.0.0.1/token answered 400"]
    assert (stats["mints"], stats["invalid_grants"]) == (1, 1)
