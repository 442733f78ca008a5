"""A real Redis per module (Debian's redis-server on a Unix socket, testbed.redisserver)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.redisserver import RedisServer, start_redis


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.stop()
