"""The bridge's calls and their answers, without root: a loopback stand-in answering as
the proxy's documented API does (the real proxy: test_proxyapi_e2e.py, netns) — what is
sent (the absolute-form request to egress.invalid, the proxy credentials, the bearer
token) and how each answer is read (issue 47, D502, D504)."""

from __future__ import annotations

import base64
import io
import json
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.hookrunner.bridge import grant
from sandbox_egress.hookrunner.bridge.hosts import Destination
from sandbox_egress.hookrunner.bridge.judge import BridgeWord, judge
from sandbox_egress.hookrunner.bridge.proxyapi import Granted, Held, allow_once, ask_ahead
from sandbox_egress.hookrunner.bridge.settings import BridgeSettings
from tests.hookrunner.bridge.conftest import Answer, StandIn

ASK = ("POST", "/v1/access-requests")


def test_ask_ahead_posts_to_egress_invalid_through_the_sandboxs_proxy(stand_in: StandIn) -> None:
    stand_in.script[ASK] = [(202, {"id": "ap-0123456789abcdef", "state": "pending"})]
    env = {"HTTP_PROXY": f"http://sbx-1:s%40cret@127.0.0.1:{stand_in.port}"}
    assert ask_ahead("new.example", 443, "why" * 100, env) == Held("ap-0123456789abcdef")
    (seen,) = stand_in.seen
    assert (seen["method"], seen["target"]) == ("POST", "http://egress.invalid/v1/access-requests")
    assert seen["headers"]["Host"] == "egress.invalid"
    assert (
        seen["headers"]["Proxy-Authorization"]
        == "Basic " + base64.b64encode(b"sbx-1:s@cret").decode()
    )
    assert seen["body"] == {"host": "new.example", "port": 443, "reason": ("why" * 100)[:200]}


@pytest.mark.parametrize(
    "answer",
    [(400, {"error": "not_holdable"}), (404, {"error": "approvals_off"}),
     (429, {"error": "approval_limit"}), (403, {"error": "egress_denied"}),
     (202, {"state": "pending"}), (202, ["ap-1"])],
)  # fmt: skip
def test_every_other_answer_is_nothing_to_ask(stand_in: StandIn, answer: Answer) -> None:
    stand_in.script[ASK] = [answer]
    assert ask_ahead("new.example", 443, "r", {"http_proxy": stand_in.url}) is None


def test_no_usable_proxy_setting_is_nothing_to_ask() -> None:
    for env in ({}, {"https_proxy": "socks5://127.0.0.1:1"}, {"http_proxy": "http://h:bad/"},
                {"http_proxy": "http://127.0.0.1:9"}):  # fmt: skip
        assert ask_ahead("new.example", 443, "r", env) is None


def test_allow_once_decides_the_approval_with_the_bearer_token(stand_in: StandIn) -> None:
    stand_in.script[("POST", "/approvals/ap-1")] = [(200, {"id": "ap-1", "state": "allowed"})]
    assert allow_once(stand_in.url, "t" * 32, "ap-1", "yes") == Granted("decided")
    (seen,) = stand_in.seen
    assert seen["headers"]["Authorization"] == "Bearer " + "t" * 32
    assert seen["body"] == {"decision": "allow", "scope": "once", "reason": "yes"}


def listing(state: str) -> Answer:
    approval = {
        "id": "ap-1",
        "sandbox": "sbx-1",
        "host": "new.example",
        "port": 443,
        "state": state,
    }
    return 200, {"approvals": [approval], "grants": []}


def test_a_timed_out_approval_is_granted_ahead_for_the_same_destination(stand_in: StandIn) -> None:
    stand_in.script[("POST", "/approvals/ap-1")] = [(409, {"error": "already_decided"})]
    stand_in.script[("GET", "/approvals")] = [listing("timed_out")]
    stand_in.script[("POST", "/approvals")] = [(200, {"id": "ap-2", "state": "allowed"})]
    assert allow_once(stand_in.url, "t" * 32, "ap-1", "yes") == Granted("ahead")
    assert stand_in.seen[-1]["body"] == {
        "sandbox": "sbx-1", "host": "new.example", "port": 443,
        "decision": "allow", "scope": "once", "reason": "yes",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("script", "why"),
    [
        ({("POST", "/approvals/ap-1"): [(409, {})], ("GET", "/approvals"): [listing("denied")]},
         "the approval is already denied"),
        ({("POST", "/approvals/ap-1"): [(409, {})], ("GET", "/approvals"): [(200, {"approvals": []})]},
         "the approval is already unknown"),
        ({("POST", "/approvals/ap-1"): [(401, {"error": "unauthorized"})]}, "the admin API answered 401"),
        ({("POST", "/approvals/ap-1"): [(409, {})], ("GET", "/approvals"): [listing("timed_out")],
          ("POST", "/approvals"): [(400, {"error": "not_holdable"})]}, "answered 400"),
    ],
)  # fmt: skip
def test_what_allow_once_refuses(
    stand_in: StandIn, script: dict[Any, list[Answer]], why: str
) -> None:
    stand_in.script.update(script)
    assert allow_once(stand_in.url, "t" * 32, "ap-1", "yes") == Granted("refused", why)


def test_an_unreachable_or_unusable_admin_address_is_refused() -> None:
    assert allow_once("http://127.0.0.1:9", "t" * 32, "ap-1", "yes") == Granted(
        "refused", "the admin API cannot be reached (ConnectionRefusedError)"
    )
    assert (
        allow_once("https://x", "t" * 32, "ap-1", "y").why
        == "the admin address is not http://HOST:PORT"
    )


def test_the_grant_step_says_what_it_did_and_never_fails_the_command(
    stand_in: StandIn, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("s" * 40 + "\n")
    stand_in.script[("POST", "/approvals/ap-1")] = [(200, {}), (409, {})]
    stand_in.script[("GET", "/approvals")] = [listing("allowed")]
    argv = ["--admin", stand_in.url, "--token-file", str(token), "--approval", "ap-1",
            "--destination", "new.example:443"]  # fmt: skip
    said = []
    for args in (argv, argv, argv[:-2]):
        with redirect_stderr(io.StringIO()) as err:
            assert grant.main(args) == 0
        said.append(err.getvalue())
    assert said == [
        "hookrunner bridge: new.example:443 allowed once (ap-1)\n",
        "hookrunner bridge: new.example:443 not granted: the approval is already allowed\n",
        "hookrunner bridge: usage: grant --admin URL --token-file FILE --approval ID --destination HOST:PORT\n",
    ]
    assert stand_in.seen[0]["headers"]["Authorization"] == "Bearer " + "s" * 40
    assert all("s" * 40 not in json.dumps(seen["body"]) for seen in stand_in.seen)


def test_judge_asks_for_each_held_destination_and_only_bash_under_a_boundary_grants(
    stand_in: StandIn, tmp_path: Path
) -> None:
    settings = BridgeSettings("http://127.0.0.1:9", str(tmp_path / "token"))
    env, cwd = {"http_proxy": stand_in.url}, str(tmp_path)
    held = {"id": "ap-1", "state": "pending"}
    stand_in.script[ASK] = [(202, held), (400, {"error": "not_holdable"}), (202, held), (202, held)]
    command = {"command": "curl https://new.example/ https://allowed.example/"}
    word = judge("Bash", command, settings, env, cwd, no_grant=None)
    assert word == BridgeWord(
        "ask",
        "This command reaches new.example:443, which the egress proxy does not allow for this "
        "sandbox. Yes lets it through once, for this sandbox only (approval ap-1).",
        ((Destination("new.example", 443), "ap-1"),),
    )
    fetch = judge("WebFetch", {"url": "https://new.example/x"}, settings, env, cwd, no_grant=None)
    assert (
        fetch is not None and fetch.held == () and "WebFetch cannot carry your yes" in fetch.reason
    )
    unbounded = judge(
        "Bash", {"command": "curl https://new.example/"}, settings, env, cwd, no_grant="no boundary"
    )
    assert unbounded is not None and unbounded.held == ()
    assert unbounded.reason.endswith("for an operator's approval (ap-1); no boundary.")
    assert judge("Bash", {"command": "ls"}, settings, env, cwd, no_grant=None) is None
    assert [s["body"]["host"] for s in stand_in.seen] == [
        "new.example",
        "allowed.example",
        "new.example",
        "new.example",
    ]
