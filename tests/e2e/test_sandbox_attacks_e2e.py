"""End to end, a sandbox file written to hurt the node or the other sandboxes (D425-D427):
the real node proxy, real sockets.

* A YAML alias bomb (a small file whose aliases expand to billions of values) is refused
  quickly: the node starts, the other sandboxes are served, /status lists it.
* A sandbox file's placeholders and secret values never apply to another sandbox's
  traffic: a file binding a placeholder (or a literal value) that every client sends
  (`application/json`) does not refuse the other sandboxes' requests.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.expect import Observed, header_values
from tests.e2e.conftest import PrivateProxy
from tests.e2e.sandbox_node import basic, node_proxy, node_with_secrets, request_as

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]

GOOD_TOKEN, EVIL_TOKEN = "good-proxy-token-0123456789", "evil-proxy-token-9876543210"

GOOD = f"""\
token: "{GOOD_TOKEN}"
network:
  allowlist:
    - domain: api.allowed.test
      secrets:
        - placeholder: good-placeholder-0001
          value: good-sandbox-secret-value
    - domain: 198.18.1.0/24
"""


def alias_bomb(levels: int) -> str:
    """A valid-looking sandbox file whose allowlist expands to 9**levels entries."""
    lines = [f'token: "{EVIL_TOKEN}"', 'x0: &x0 ["api.allowed.test"]']
    for level in range(1, levels):
        lines.append(f"x{level}: &x{level} [" + ", ".join([f"*x{level - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\nnetwork:\n  allowlist: *x{levels - 1}\n"


def test_an_alias_bomb_is_refused_and_the_node_serves_the_others(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    started = time.monotonic()
    p, _ = node_proxy(private_proxy, tmp_path, "proxy_auth", good=GOOD, bomb=alias_bomb(10))
    assert time.monotonic() - started < 30
    response = request_as(
        p.view, basic("good", GOOD_TOKEN), "api.allowed.test", [("X-Key", "good-placeholder-0001")]
    )
    assert response.status == 200
    assert header_values(obs.only_request(), "X-Key") == ["good-sandbox-secret-value"]
    status = p.process.status()["sandboxes"]
    assert status["ids"] == ["good"]
    [refused] = status["refused"]
    assert refused["sandbox"] == "bomb"
    assert any("aliases" in problem for problem in refused["problems"]), refused
    assert EVIL_TOKEN not in str(status)
    response = request_as(p.view, basic("bomb", EVIL_TOKEN), "api.allowed.test", [])
    assert response.status == 407  # a refused new sandbox has no egress


EVIL = f"""\
token: "{EVIL_TOKEN}"
network:
  allowlist:
    - domain: api.allowed.test
      secrets:
        - placeholder: application
          value: evil-own-secret-value
    - domain: other.allowed.test
      transform:
        X-Evil: "application/json"
    - domain: 198.18.1.0/24
"""


def test_a_sandbox_file_never_refuses_another_sandboxes_requests(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    p, _ = node_proxy(private_proxy, tmp_path, "proxy_auth", good=GOOD, evil=EVIL)
    good = basic("good", GOOD_TOKEN)
    headers = [("Accept", "application/json"), ("X-Key", "good-placeholder-0001")]
    response = request_as(p.view, good, "api.allowed.test", headers)
    assert response.status == 200, response.describe()
    record = obs.only_request()
    assert header_values(record, "Accept") == ["application/json"]
    assert header_values(record, "X-Key") == ["good-sandbox-secret-value"]
    # The evil file still holds its own placeholder for its own requests.
    evil = basic("evil", EVIL_TOKEN)
    response = request_as(p.view, evil, "api.allowed.test", [("X-Key", "application")])
    assert response.status == 200, response.describe()
    assert header_values(obs.requests()[-1], "X-Key") == ["evil-own-secret-value"]


def test_a_file_too_large_to_search_is_refused_alone_and_never_logged(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    """A sandbox whose own secret values are past RE2's limit (12 distinct 60 KiB files of
    its own) is refused on its own; the others are served; no byte of a value is logged."""
    secrets = tmp_path / "secrets"
    (secrets / "big").mkdir(parents=True)
    values = []
    for number in range(12):
        value = f"big-secret-{number:02d}-" + os.urandom(30 * 1024).hex()
        (secrets / "big" / f"s{number}").write_text(value)
        values.append(value)
    entries = "".join(
        f'        - {{placeholder: big-placeholder-{n:02d}, value: "${{file:{secrets}/big/s{n}}}"}}\n'
        for n in range(12)
    )
    big = f'token: "{EVIL_TOKEN}"\nnetwork:\n  allowlist:\n    - domain: api.allowed.test\n      secrets:\n{entries}'
    p, _ = node_with_secrets(private_proxy, tmp_path, good=GOOD, big=big)
    response = request_as(
        p.view, basic("good", GOOD_TOKEN), "api.allowed.test", [("X-Key", "good-placeholder-0001")]
    )
    assert response.status == 200, response.describe()
    assert header_values(obs.only_request(), "X-Key") == ["good-sandbox-secret-value"]
    status = p.process.status()["sandboxes"]
    assert status["ids"] == ["good"]
    assert [r["sandbox"] for r in status["refused"]] == ["big"]
    shown = json.dumps(status) + p.view.proxy_stderr.read_text() + p.view.proxy_stdout.read_text()
    for value in values:
        assert value[14:54] not in shown and value[-40:] not in shown  # the hex, unescaped


LINKED = f"""\
token: "{EVIL_TOKEN}"
network:
  allowlist:
    - domain: api.allowed.test
      secrets: [{{placeholder: linked-placeholder-01, value: "${{file:SECRETS/linked/key}}"}}]
    - domain: 198.18.1.0/24
"""


def test_a_hard_link_to_a_file_outside_its_secrets_is_not_read(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    """A hard link is no symlink: its path is inside the sandbox's directory, its content is
    a file of anyone's. A secret file with more than one link is refused (D426)."""
    node_secret = tmp_path / "node-secret"
    node_secret.write_text("the-node-secret-value-0123456789")
    (tmp_path / "secrets" / "linked").mkdir(parents=True)
    os.link(node_secret, tmp_path / "secrets" / "linked" / "key")
    p, _ = node_with_secrets(private_proxy, tmp_path, linked=LINKED, good=GOOD)
    status = p.process.status()["sandboxes"]
    assert status["ids"] == ["good"]
    [refused] = status["refused"]
    assert refused["sandbox"] == "linked"
    assert any("hard link" in problem for problem in refused["problems"]), refused
    response = request_as(
        p.view,
        basic("linked", EVIL_TOKEN),
        "api.allowed.test",
        [("X-Key", "linked-placeholder-01")],
    )
    assert response.status == 407
    assert obs.requests() == []
    assert "the-node-secret-value" not in json.dumps(status) + p.view.proxy_stderr.read_text()


def test_a_wide_alias_bomb_is_refused_without_the_nodes_memory(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    """A flat bomb: one 40 KB string aliased 5000 times (a 55 KB file standing for 200 MB
    of text) took ~4 s and ~800 MB at start; 200 KB x 20000 would take the node down. The
    characters an expansion stands for are bounded too (D426)."""
    wide = f's: &s "{"a" * 40_000}"\nnetwork:\n  allowlist: [' + ", ".join(["*s"] * 5000) + "]\n"
    p, _ = node_proxy(private_proxy, tmp_path, "proxy_auth", good=GOOD, wide=wide)
    assert p.process.status_kib("VmHWM") < 400 * 1024
    status = p.process.status()["sandboxes"]
    assert status["ids"] == ["good"]
    [refused] = status["refused"]
    assert any("aliases" in problem for problem in refused["problems"]), refused
    response = request_as(
        p.view, basic("good", GOOD_TOKEN), "api.allowed.test", [("X-Key", "good-placeholder-0001")]
    )
    assert response.status == 200
