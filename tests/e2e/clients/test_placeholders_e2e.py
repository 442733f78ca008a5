"""Real clients holding only placeholders, through the real proxy (issue 23).

A proxy of this module's own swaps each placeholder for the session secret on the way to
its host: the OpenAI and Anthropic Python SDKs (which refuse to start without a key) to
the echo upstream, git with a placeholder inside its `Basic` credential and curl with a
placeholder in a query value (HTTP/2) to nginx. Each test reads what the upstream logged:
the real value arrived, the placeholder did not; the client never sees the real value.
The placeholder sent to another allowed host is refused `placeholder_elsewhere` and
nothing reaches any upstream.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed import procs
from testbed.proxyproc import reload_counts
from tests.e2e.clients.conftest import HTTPS_PORT, Clients
from tests.e2e.conftest import SECRET_ENV, PrivateProxy

pytestmark = pytest.mark.netns

SDK_CLIENT = Path(__file__).with_name("sdk_client.py")
OPENAI = "sk-egress-placeholder-openai"
ANTHROPIC = "sk-ant-egress-placeholder"
GIT = "ghp-egress-placeholder-git"
MAPS = "maps-egress-placeholder"

CONFIG = f"""\
network:
  allowlist:
    - domain: api.allowed.test
      secrets: [{{placeholder: {OPENAI}, value: "${{{SECRET_ENV}}}", require: true}}]
    - domain: x.wild.test
      secrets: [{{placeholder: {ANTHROPIC}, value: "${{{SECRET_ENV}}}", require: true}}]
    - domain: other.allowed.test
      secrets: [{{placeholder: {GIT}, value: "${{{SECRET_ENV}}}"}}]
    - domain: plain.allowed.test
      secrets: [{{placeholder: {MAPS}, value: "${{{SECRET_ENV}}}", in: [query]}}]
    - domain: ports.allowed.test
    - domain: 198.18.1.0/24               # opens the upstreams' range (198.18/15 is reserved)
"""


@pytest.fixture
def placeholders(
    clients: Clients, private_proxy: Callable[..., PrivateProxy]
) -> Iterator[tuple[Clients, PrivateProxy]]:
    p = private_proxy("placeholders", CONFIG)
    yield dataclasses.replace(clients, harness=p.view), p


def sdk(c: Clients, name: str, base_url: str, key: str) -> dict[str, object]:
    result = c.run(
        [sys.executable, str(SDK_CLIENT), name, base_url, key],
        c.proxy_env(SSL_CERT_FILE=c.ca),
    )
    assert result.returncode == 0, result.stdout
    assert c.secret not in result.stdout + result.stderr
    answer: dict[str, object] = json.loads(result.stdout)
    return answer


def header(request: dict[str, object], name: str) -> list[str]:
    fields = request["headers"]
    assert isinstance(fields, list)
    return [v for n, v in fields if n.lower() == name]


@pytest.mark.parametrize(
    ("name", "base_url", "key", "path"),
    [
        ("openai", "https://api.allowed.test/v1", OPENAI, "/v1/chat/completions"),
        ("anthropic", "https://x.wild.test", ANTHROPIC, "/v1/messages"),
    ],
)
def test_an_sdk_holding_only_the_placeholder_works(
    placeholders: tuple[Clients, PrivateProxy], name: str, base_url: str, key: str, path: str
) -> None:
    c, p = placeholders
    mark = c.harness.upstream_log.mark()
    answer = sdk(c, name, base_url, key)
    assert answer["status"] == 200
    assert key not in str(answer["body"])  # the upstream's echo: the value, masked
    requests = c.harness.upstream_requests_since(mark)
    assert [r["target"] for r in requests] == [path]
    assert header(requests[0], "authorization") == [f"Bearer {c.secret}"]
    assert key not in json.dumps(requests[0])
    line = p.view.audit_log.all()[-1]
    assert (line["decision"], [n.lower() for n in line["injected"]]) == ("allow", ["authorization"])


def test_an_sdk_with_a_key_of_its_own_is_refused(
    placeholders: tuple[Clients, PrivateProxy],
) -> None:
    c, _ = placeholders
    mark = c.harness.upstream_log.mark()
    answer = sdk(c, "openai", "https://api.allowed.test/v1", "sk-the-sandbox-own-key")
    assert answer["status"] == 403
    assert json.loads(str(answer["body"]))["reason"] == "credential_required"
    assert c.harness.upstream_requests_since(mark) == []


def test_git_with_a_placeholder_in_its_basic_credential(
    placeholders: tuple[Clients, PrivateProxy],
) -> None:
    c, _ = placeholders
    mark, dest = c.nginx.mark(), c.home / "git-placeholder"
    credential = base64.b64encode(f"x-access-token:{GIT}".encode()).decode()
    result = c.run(
        ["git", "-c", f"http.extraHeader=Authorization: Basic {credential}", "clone", "-q",
         f"https://other.allowed.test:{HTTPS_PORT}/git/demo.git", str(dest)],
        c.proxy_env(GIT_SSL_CAINFO=c.ca, GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    real = base64.b64encode(f"x-access-token:{c.secret}".encode()).decode()
    entries = c.nginx.since(mark)
    assert entries[0]["uri"] == "/git/demo.git/info/refs?service=git-upload-pack"
    assert {e["auth"] for e in entries} == {f"Basic {real}"}


def test_curl_with_a_placeholder_in_a_query_value_over_http2(
    placeholders: tuple[Clients, PrivateProxy],
) -> None:
    c, _ = placeholders
    mark = c.nginx.mark()
    result = c.run(
        ["curl", "-sS", "--http2", "-o", "/dev/null", "-w", "%{http_code} %{http_version}",
         f"https://plain.allowed.test:{HTTPS_PORT}/headers?q=1&key={MAPS}"],
        c.proxy_env(CURL_CA_BUNDLE=c.ca),
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (0, "200 2"), result.stderr
    entries = c.nginx.since(mark)
    assert [(e["uri"], e["proto"]) for e in entries] == [
        (f"/headers?q=1&key={c.secret}", "HTTP/2.0")
    ]


def test_the_placeholder_sent_to_another_allowed_host_is_refused(
    placeholders: tuple[Clients, PrivateProxy],
) -> None:
    c, p = placeholders
    mark, nginx_mark = c.harness.upstream_log.mark(), c.nginx.mark()
    result = c.run(
        ["curl", "-sS", "-D", "-", "-H", f"Authorization: Bearer {OPENAI}",
         "https://ports.allowed.test/collect"],
        c.proxy_env(CURL_CA_BUNDLE=c.ca),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "HTTP/1.1 403" in result.stdout
    assert "x-egress-denied: placeholder_elsewhere" in result.stdout.lower()
    assert c.harness.upstream_requests_since(mark) == []
    assert c.nginx.since(nginx_mark) == []
    line = p.view.audit_log.all()[-1]
    assert (line["host"], line["decision"], line["reason"]) == (
        "ports.allowed.test",
        "deny",
        "placeholder_elsewhere",
    )
    metrics = p.view.metrics_text()
    assert 'egress_requests_total{decision="deny",reason="placeholder_elsewhere"} 1.0' in metrics


def test_a_rotated_secret_file_is_used_without_a_restart(
    clients: Clients, private_proxy: Callable[..., PrivateProxy], tmp_path: Path
) -> None:
    """The value comes from a file; replacing the file changes what the upstream gets, and
    a file that vanishes keeps the last value (the reload is refused and counted)."""
    key = tmp_path / "github-token"
    key.write_text("rotated-token-v1\n")
    config = (
        "network:\n  allowlist:\n    - domain: other.allowed.test\n"
        f"      secrets: [{{placeholder: {GIT}, value: '${{file:{key}}}'}}]\n"
        "    - domain: 198.18.1.0/24\n"
    )
    p = private_proxy("rotation", config, "--watch-interval", "0.2")
    c = dataclasses.replace(clients, harness=p.view)

    def upstream_auth() -> str:
        mark = c.nginx.mark()
        result = c.run(
            ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H",
             f"Authorization: token {GIT}", f"https://other.allowed.test:{HTTPS_PORT}/headers"],
            c.proxy_env(CURL_CA_BUNDLE=c.ca),
        )  # fmt: skip
        assert (result.returncode, result.stdout) == (0, "200"), result.stderr
        [entry] = c.nginx.since(mark)
        return str(entry["auth"])

    def reloads(expected: dict[str, float]) -> None:
        procs.wait_until(
            f"reloads {expected}",
            lambda: reload_counts(p.process.scrape()) == expected,
            timeout=15,
            child=p.process.child,
        )

    assert upstream_auth() == "token rotated-token-v1"
    fresh = key.with_name("github-token.new")
    fresh.write_text("rotated-token-v2\n")
    os.replace(fresh, key)
    reloads({"ok": 1.0, "failed": 0.0})
    assert upstream_auth() == "token rotated-token-v2"
    key.unlink()
    reloads({"ok": 1.0, "failed": 1.0})
    assert upstream_auth() == "token rotated-token-v2"  # the last value keeps serving
    stderr = p.process.child.stderr.read_text()
    assert f"cannot read ${{file:{key}}}" in stderr
    assert "rotated-token" not in stderr
