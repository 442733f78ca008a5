"""The destinations a Claude Code tool input names (issue 47, D501): a table of named
cases, and properties over URL spellings (case, ports, userinfo, IDNA, quoting)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.hookrunner.bridge.hosts import (
    MAX_DESTINATIONS,
    Destination,
    destination,
    destinations,
)
from sandbox_egress.hookrunner.handlerhost import handler_host

D = Destination

CASES = [
    ("webfetch https", "WebFetch", {"url": "https://Docs.Example.COM/a?b"}, [D("docs.example.com", 443)]),
    ("webfetch port", "WebFetch", {"url": "http://x.example:8080/"}, [D("x.example", 8080)]),
    ("webfetch unicode", "WebFetch", {"url": "https://straße.example/"}, [D("xn--strae-oqa.example", 443)]),
    ("webfetch no url", "WebFetch", {"prompt": "x"}, []),
    ("webfetch ftp", "WebFetch", {"url": "ftp://x.example/"}, []),
    ("bash curl", "Bash", {"command": "curl -s https://api.new.example/v1 | jq ."}, [D("api.new.example", 443)]),
    ("bash quoted", "Bash", {"command": "curl 'http://a.example:81/x' \"https://b.example\""},
     [D("a.example", 81), D("b.example", 443)]),
    ("bash userinfo", "Bash", {"command": "git clone https://u:p@git.example/r.git"}, [D("git.example", 443)]),
    ("bash repeated", "Bash", {"command": "curl http://a.example/1 http://A.example/2"}, [D("a.example", 80)]),
    ("bash ipv4 reading", "Bash", {"command": "curl http://0x7f.1/"}, [D("127.0.0.1", 80)]),
    ("bash ipv6", "Bash", {"command": "curl http://[2001:db8::1]:8080/"}, [D("2001:db8::1", 8080)]),
    ("bash websocket", "Bash", {"command": "websocat wss://ws.example/s"}, [D("ws.example", 443)]),
    ("bash subshell", "Bash", {"command": "(curl https://s.example);echo"}, [D("s.example", 443)]),
    ("bash no url", "Bash", {"command": "ls -la"}, []),
    ("bash bad port", "Bash", {"command": "curl http://a.example:99999/"}, []),
    ("bash not a string", "Bash", {"command": ["curl", "http://a.example"]}, []),
    ("read is no fetch", "Read", {"file_path": "http://a.example/"}, []),
]  # fmt: skip


@pytest.mark.parametrize(
    ("tool", "tool_input", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_destinations(
    tool: str, tool_input: dict[str, object], expected: list[Destination]
) -> None:
    assert list(destinations(tool, tool_input)) == expected


def test_at_most_max_destinations_in_order() -> None:
    command = " ".join(f"curl https://h{i}.example/" for i in range(10))
    found = destinations("Bash", {"command": command})
    assert [d.host for d in found] == [f"h{i}.example" for i in range(MAX_DESTINATIONS)]


LABEL = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12)
TLD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=6)  # not an IPv4 reading


@settings(max_examples=300, deadline=None)
@given(
    labels=st.lists(LABEL, min_size=1, max_size=3),
    tld=TLD,
    upper=st.lists(st.booleans(), min_size=1, max_size=60),
    scheme=st.sampled_from(["http", "https", "HTTPS", "ws", "wss"]),
    port=st.one_of(st.none(), st.integers(1, 65535)),
    userinfo=st.sampled_from(["", "u@", "u:p@", "%41:b@"]),
    path=st.sampled_from(["", "/", "/a/b?c=d", "#f", "/x%20y"]),
    quote=st.sampled_from(["", "'", '"']),
)
def test_every_spelling_of_a_url_names_the_proxys_host(
    labels: list[str], tld: str, upper: list[bool], scheme: str, port: int | None,
    userinfo: str, path: str, quote: str,
) -> None:  # fmt: skip
    """However the URL is cased, ported, credentialed or quoted in a command, the host is
    the one the proxy would judge (``handler_host``), the port the client would use."""
    name = ".".join([*labels, tld])
    spelled = "".join(c.upper() if upper[i % len(upper)] else c for i, c in enumerate(name))
    url = f"{scheme}://{userinfo}{spelled}{f':{port}' if port else ''}{path}"
    default = 443 if scheme.lower() in ("https", "wss") else 80
    expected = D(handler_host(urlsplit(url)), port or default)
    assert expected.host == name
    assert destination(url) == expected
    assert destinations("Bash", {"command": f"curl -s {quote}{url}{quote} && echo ok"}) == (
        expected,
    )
    assert destinations("WebFetch", {"url": url}) == (expected,)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_command_text_is_read_without_error(text: str) -> None:
    found = destinations("Bash", {"command": text})
    assert len(found) <= MAX_DESTINATIONS
    assert all(0 < d.port < 65536 and d.host for d in found)
