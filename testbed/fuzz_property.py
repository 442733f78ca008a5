"""The property the protocol fuzzer asserts on every example (issue 10, "Test like an attacker").

Either the proxy refused (a response with exactly one `X-Egress-Denied: <reason>` and a
JSON body naming the same reason, or a protocol-level refusal: mitmproxy's own error
response, a reset stream, a closed connection) and NOTHING reached the upstream
namespace — not a request, not even a TCP connect — or every request the recording
upstream received is well formed:

* its head parses under the strict grammar of RFC 9112 (request-line, field lines
  `token ":" OWS value OWS`), with no bare CR or LF, no NUL or other control byte
  except HTAB in a value, no obs-fold, and an origin-form target (`*` for OPTIONS);
* every authority names the decided host: the one Host field (`host` or `host:port`,
  any case), the SNI the upstream saw (over TLS), and the listener it reached;
* each transform header is there exactly once, with the configured value.

The upstream's `head_b64` (base64, testbed/echo_server.py) is the ground truth.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any

from testbed.harness import REASONS

TCHAR_RE = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
REQUEST_LINE = re.compile(rb"(" + TCHAR_RE + rb") (\S+) HTTP/1\.1")
FIELD_LINE = re.compile(rb"(" + TCHAR_RE + rb"):[ \t]*(.*?)[ \t]*")
# A field value: VCHAR, obs-text, SP and HTAB only (RFC 9110 5.5); no CTL, no DEL.
FIELD_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
# Origin-form: "/" then no CTL, no SP, no DEL, no "#" (RFC 9112 3.2.1; docs/decisions.md D36).
ORIGIN_FORM = re.compile(rb"/[\x21\x22\x24-\x7e\x80-\xff]*")


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def denied_reason(headers: list[tuple[str, str]], body: bytes, has_body: bool = True) -> str | None:
    """The reason code of a proper refusal, None if the response is not one (asserts shape).

    `has_body` is False for the answer to a HEAD request, which has none."""
    values = [v for n, v in headers if n.lower() == "x-egress-denied"]
    if not values:
        return None
    assert len(values) == 1, f"X-Egress-Denied repeated: {values}"
    assert values[0] in REASONS, f"unknown reason {values[0]!r}"
    if has_body:
        payload = json.loads(body)
        assert payload["reason"] == values[0], payload
    return values[0]


@dataclass(frozen=True)
class Expected:
    """What the proxy decided for one example: the host, where it lives, what it injects."""

    host: str
    port: int
    tls: bool
    transforms: dict[str, str]
    listener: str


def check_upstream_request(record: dict[str, Any], expected: Expected) -> None:
    """Assert that one request the upstream received satisfies the property."""
    decided, transforms = expected.host, expected.transforms
    raw = base64.b64decode(record["head_b64"])
    masked = raw
    for secret in transforms.values():  # assertion messages never carry the secret
        masked = masked.replace(secret.encode(), b"<transform value>")
    shown = f"upstream received {masked!r}"
    assert record["listener"] == expected.listener, shown
    assert record["tls"] == expected.tls, shown
    if expected.tls:  # RFC 6066 3: an address literal is never sent as SNI
        want = None if is_address(decided) else decided
        got = record["sni"].lower() if record["sni"] else None
        assert got == want, f"SNI {record['sni']!r}; {shown}"
    assert raw.endswith(b"\r\n\r\n"), shown
    request_line, *lines = raw[:-4].split(b"\r\n")
    match = REQUEST_LINE.fullmatch(request_line)
    assert match is not None, f"malformed request-line; {shown}"
    method, target = match.group(1), match.group(2)
    assert ORIGIN_FORM.fullmatch(target) or (target == b"*" and method == b"OPTIONS"), (
        f"target {target!r} is not origin-form; {shown}"
    )
    fields: list[tuple[bytes, bytes]] = []
    for line in lines:
        assert line[:1] not in (b" ", b"\t"), f"obs-fold line {line!r}; {shown}"
        parsed = FIELD_LINE.fullmatch(line)
        assert parsed is not None, f"malformed field line {line!r}; {shown}"
        name, value = parsed.group(1), parsed.group(2)
        assert FIELD_VALUE.fullmatch(value), f"forbidden byte in {line!r}; {shown}"
        fields.append((name.lower(), value))
    hosts = [v for n, v in fields if n == b"host"]
    allowed_hosts = {decided.encode(), f"{decided}:{expected.port}".encode()}
    assert len(hosts) == 1, f"Host {hosts}; {shown}"
    assert hosts[0].lower() in allowed_hosts, f"Host {hosts}; {shown}"
    for name, value in transforms.items():
        got = [v for n, v in fields if n == name.lower().encode()]
        assert got == [value.encode()], f"{name} sent {len(got)} times; {shown}"
