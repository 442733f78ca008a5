"""End to end, one replica at a time refreshes a rotating refresh token (issue 48, carried
from issue 34; D232): two real `egress-proxy` processes share one real Redis (`state:
backend: redis`) and one `oauth2` `refresh_token` credential against a token endpoint
that rotates refresh tokens and answers `invalid_grant` to a spent one
(testbed/forge_server.py in the upstream namespace, which counts both). A sandbox's
requests through both proxies at once, round after round, each round past the access
token's expiry: every request reaches the API with the current token, the endpoint mints
once per round and never sees a spent refresh token. tests/proxy/credentials/test_fleet.py
shows the same minter breaking without the lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from testbed.netns import UPSTREAM_IP, Topology
from testbed.redisserver import RedisServer, start_redis
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy
from tests.e2e.test_credentials_e2e import get
from tests.proxy.credentials.forge import Forge, forge

pytestmark = pytest.mark.netns

PORT = 9457  # 9455/9456: test_credentials_e2e's forges
EXPIRES_S = 3
ROUNDS = 3
URL = f"https://other.allowed.test:{PORT}/api/me"


@pytest.fixture
def rotating(topology: Topology, pki: Pki, tmp_path: Path) -> Iterator[Forge]:
    prefix = topology.exec_prefix(topology.ns_upstream)
    (tmp_path / "forge").mkdir()
    with forge(tmp_path / "forge", "--expires-in", str(EXPIRES_S), prefix=prefix,
               host=UPSTREAM_IP, port=PORT, pki=pki) as running:  # fmt: skip
        yield running


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    (tmp_path / "redis").mkdir()
    server = start_redis(tmp_path / "redis")
    try:
        yield server
    finally:
        server.stop()


def config(redis: RedisServer, state_file: Path) -> str:
    return f"""\
state:
  backend: redis
  url: "{redis.url}"
  key_prefix: e2e-refresh
  timeout: 2s
  on_error: deny
credentials:
  mail: {{oauth2: {{grant: refresh_token, token_url: "https://other.allowed.test:{PORT}/token",
                   client_id: client-1, client_secret: client-secret-1,
                   refresh_token: refresh-0, state_file: "{state_file}"}}}}
network:
  allowlist:
    - domain: other.allowed.test
      ports: [{PORT}]
      credential: {{name: mail, as: bearer}}
    - domain: 198.18.1.0/24
"""


def test_two_proxies_on_one_redis_refresh_a_rotating_token_once_per_expiry(
    private_proxy: Callable[..., PrivateProxy],
    rotating: Forge,
    redis: RedisServer,
    tmp_path: Path,
) -> None:
    proxies = [
        private_proxy(f"refresh-{name}", config(redis, tmp_path / f"{name}.json"))
        for name in ("a", "b")
    ]
    statuses = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        for _ in range(ROUNDS):
            answers = list(pool.map(lambda p: get(p, URL), proxies))
            statuses.append([(status, denied) for status, denied, _ in answers])
            time.sleep(EXPIRES_S + 0.3)  # the access token expires: the next round refreshes
    stats = rotating.stats()
    assert statuses == [[(200, ""), (200, "")]] * ROUNDS
    assert (stats["mints"], stats["invalid_grants"]) == (ROUNDS, 0)
    for p in proxies:  # the store answered every exchange: health from the last one (D401)
        assert "credential mail: fetch" not in p.process.child.stderr.read_text()
