"""The sandbox's own credential never travels (proxy/values/swap.py `require`,
proxy/values/swap.py `secret_elsewhere`), through `decide_request`: tables of named cases.

`require: true`: every `Authorization` field, and every field of a name the entry's
placeholder was found in, must carry one of the entry's placeholders. `secret_elsewhere`:
a resolved value (raw, in a `Basic` credential, percent-encoded) in any header value or
request-target is refused, whichever host the request is for.
"""

from __future__ import annotations

import asyncio
import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import IPAddress, canonical_host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.stages import ConnectionFacts, RequestAsk, decide_request
from sandbox_egress.proxy.targets import RequestNames

KEY = "sk-egress-placeholder-api"
QKEY = "q-egress-placeholder-maps"
REAL_KEY = "sk-real-api-0123456789"
REAL_MAPS = "real maps/key&=+"
REAL_TOKEN = "tok_real_transform_0123"
ENV = {"KEY": REAL_KEY, "MAPS": REAL_MAPS, "TOKEN": REAL_TOKEN}

POLICY = Policy(
    parse(
        {
            "network": {
                "allowlist": [
                    {
                        "domain": "api.test",
                        "secrets": [{"placeholder": KEY, "value": "${KEY}", "require": True}],
                    },
                    {
                        "domain": "maps.test",
                        "secrets": [
                            {
                                "placeholder": QKEY,
                                "value": "${MAPS}",
                                "in": ["query"],
                                "require": True,
                            }
                        ],
                    },  # fmt: skip
                    {"domain": "tr.test", "transform": {"Authorization": "Bearer ${TOKEN}"}},
                    {"domain": "other.test"},
                ]
            }
        },
        "env.yaml",
        ENV,
    )
)


async def resolve(name: str, port: int) -> list[IPAddress]:
    return [canonical_host("93.184.216.34").ip] if name.endswith(".test") else []  # type: ignore[list-item]


def basic(user: str, password: str) -> bytes:
    return b"Basic " + base64.b64encode(f"{user}:{password}".encode())


def ask(host: str, path: str = "/", *fields: tuple[bytes, bytes]) -> RequestAsk:
    return RequestAsk(
        method=b"GET",
        fields=((b"Host", host.encode()), *fields),
        names=RequestNames(
            transparent=False,
            host=host,
            port=443,
            host_header=host,
            sni=None,
            client_tls=True,
            target=None,
            path=path,
        ),
        https=True,
    )


def decided(request: RequestAsk) -> Reason:
    return asyncio.run(decide_request(POLICY, resolve, ConnectionFacts(), request)).decision.reason


BEARER = (b"Authorization", f"Bearer {KEY}".encode())
OWN = (b"Authorization", b"Bearer sk-own-key-of-the-sandbox")

REQUIRE = [
    ("placeholder in the Authorization", ask("api.test", "/", BEARER), Reason.ALLOWLISTED),
    ("placeholder in another field, no Authorization",
     ask("api.test", "/", (b"X-Api-Key", KEY.encode())), Reason.ALLOWLISTED),
    ("placeholder inside a Basic credential", ask("api.test", "/", (b"Authorization",
                                                                    basic("x", KEY))),
     Reason.ALLOWLISTED),
    ("an unrelated field beside the placeholder",
     ask("api.test", "/", BEARER, (b"X-Trace", b"abc")), Reason.ALLOWLISTED),
    ("own Authorization beside the placeholder in another field",
     ask("api.test", "/", (b"X-Api-Key", KEY.encode()), OWN), Reason.CREDENTIAL_REQUIRED),
    ("a second Authorization beside the placeholder's",
     ask("api.test", "/", BEARER, OWN), Reason.CREDENTIAL_REQUIRED),
    ("a second Authorization in another case",
     ask("api.test", "/", BEARER, (b"AUTHORIZATION", b"Basic b3duOmtleQ==")),
     Reason.CREDENTIAL_REQUIRED),
    ("the placeholder's field sent twice, once with an own key",
     ask("api.test", "/", (b"X-Api-Key", KEY.encode()), (b"x-api-key", b"own-key-123")),
     Reason.CREDENTIAL_REQUIRED),
    ("an empty second Authorization", ask("api.test", "/", BEARER, (b"Authorization", b"")),
     Reason.CREDENTIAL_REQUIRED),
    ("query placeholder, own Authorization beside it",
     ask("maps.test", f"/geo?key={QKEY}", OWN), Reason.CREDENTIAL_REQUIRED),
    ("query placeholder's parameter sent twice",
     ask("maps.test", f"/geo?key={QKEY}&key=own-maps-key"), Reason.CREDENTIAL_REQUIRED),
    ("query placeholder alone", ask("maps.test", f"/geo?key={QKEY}&q=x"), Reason.ALLOWLISTED),
]  # fmt: skip


@pytest.mark.parametrize(
    ("request_ask", "reason"), [r[1:] for r in REQUIRE], ids=[r[0] for r in REQUIRE]
)
def test_require_means_no_own_credential_travels(request_ask: RequestAsk, reason: Reason) -> None:
    assert decided(request_ask) is reason


ELSEWHERE = [
    ("raw value to another host", ask("other.test", "/", (b"X-K", REAL_KEY.encode())),
     Reason.SECRET_ELSEWHERE),
    ("raw value to its own host", ask("api.test", "/", (b"Authorization",
                                                        f"Bearer {REAL_KEY}".encode())),
     Reason.SECRET_ELSEWHERE),
    ("inside a Basic credential", ask("other.test", "/", (b"Authorization",
                                                          basic("user", REAL_KEY))),
     Reason.SECRET_ELSEWHERE),
    ("percent-encoded in the target", ask("other.test", "/?k=real%20maps%2Fkey%26%3D%2B"),
     Reason.SECRET_ELSEWHERE),
    ("fully percent-encoded in the path",
     ask("other.test", "/" + "".join(f"%{b:02X}" for b in REAL_KEY.encode())),
     Reason.SECRET_ELSEWHERE),
    ("percent-encoded in a header", ask("other.test", "/", (b"Referer",
                                                            b"https://x/?k=real%20maps%2Fkey")),
     Reason.ALLOWLISTED),  # a prefix of the value is not the value
    ("a transform's resolved value", ask("other.test", f"/?t={REAL_TOKEN}"),
     Reason.SECRET_ELSEWHERE),
    ("to a host no entry allows", ask("evil.test", "/", (b"X", REAL_TOKEN.encode())),
     Reason.SECRET_ELSEWHERE),
    ("loopback keeps its reason", ask("localhost", "/", (b"X", REAL_TOKEN.encode())),
     Reason.LOOPBACK),
    ("nothing of value", ask("other.test", "/?q=sk-real", (b"X", b"tok_real")),
     Reason.ALLOWLISTED),
]  # fmt: skip


@pytest.mark.parametrize(
    ("request_ask", "reason"), [r[1:] for r in ELSEWHERE], ids=[r[0] for r in ELSEWHERE]
)
def test_a_resolved_value_in_a_request_is_refused(request_ask: RequestAsk, reason: Reason) -> None:
    assert decided(request_ask) is reason


def _answer(request: RequestAsk):  # type: ignore[no-untyped-def]
    return asyncio.run(decide_request(POLICY, resolve, ConnectionFacts(), request))


ECHOES = [
    ("the raw value", ask("api.test", "/", BEARER), REAL_KEY.encode()),
    ("the Basic base64 of user:value the proxy wrote",
     ask("api.test", "/", (b"Authorization", basic("someone", KEY))),
     base64.b64encode(f"someone:{REAL_KEY}".encode())),
    ("the percent-encoded value the proxy wrote into the query",
     ask("maps.test", f"/geo?key={QKEY}"), b"real%20maps%2Fkey%26%3D%2B"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("request_ask", "spelling"), [e[1:] for e in ECHOES], ids=[e[0] for e in ECHOES]
)
def test_echo_redaction_masks_every_spelling_the_proxy_wrote(
    request_ask: RequestAsk, spelling: bytes
) -> None:
    redactions = _answer(request_ask).redactions
    echoed = b'{"echo": "' + spelling + b'"}'
    body = redactions.body()
    masked = body.feed(echoed[:13]) + body.feed(echoed[13:]) + body.feed(b"")
    assert spelling not in masked and len(masked) == len(echoed)
    assert spelling not in redactions.header(echoed)


def test_a_credential_written_as_basic_is_masked_as_its_base64_too() -> None:
    """The `basic` binding (proxy/credentials/writing.py) writes base64(user:value): an
    upstream echoing that base64 alone, in a body, is masked too."""
    from sandbox_egress.proxy.credentials.base import Fetched
    from sandbox_egress.proxy.credentials.writing import write
    from sandbox_egress.proxy.values.secret import Secret

    policy = Policy(
        parse(
            {
                "credentials": {"gh": {"env": "GH"}},
                "network": {
                    "allowlist": [
                        {
                            "domain": "git.test",
                            "credential": {"name": "gh", "as": "basic", "username": "x"},
                        }
                    ]
                },
            },
            "env.yaml",
            {},
        )
    )
    decision = policy.decide(canonical_host("git.test"), 443, tls=True)
    token = "ghs_minted_installation_token_0123"
    plan = write(decision, ((b"Host", b"git.test"),), "/", {"gh": Fetched(Secret(token))})
    encoded = base64.b64encode(f"x:{token}".encode())
    assert (b"Authorization", b"Basic " + encoded) in plan.fields
    body = plan.redactions.body()
    echoed = b'{"auth": "' + encoded + b'"}'
    masked = body.feed(echoed[:9]) + body.feed(echoed[9:]) + body.feed(b"")
    assert encoded not in masked and len(masked) == len(echoed)


def test_a_value_the_cache_fetched_is_secret_elsewhere_in_any_request() -> None:
    """Values fetched at run time (proxy/credentials/cache.py `held`) are searched like the
    configuration's own: raw, in a Basic credential, percent-encoded; refusals that are not
    about the allowlist keep their reason."""
    from dataclasses import dataclass as frozen

    from sandbox_egress.proxy.credentials.base import CacheSettings, Fetched
    from sandbox_egress.proxy.credentials.cache import Credentials
    from sandbox_egress.proxy.decision import Decision
    from sandbox_egress.proxy.values.secret import Secret
    from sandbox_egress.proxy.values.swap import secret_elsewhere

    @frozen(frozen=True)
    class Minted:  # a stand-in for a minter: the value is what matters here
        settings: CacheSettings = CacheSettings()

        def fetch(self) -> Fetched:
            return Fetched(Secret("AKIAREALREALREAL0001"), extra={"k": Secret("real/secret key")})

    cache = Credentials({"aws": Minted()})
    assert cache.held() is None  # nothing fetched yet: nothing to find
    asyncio.run(cache.get("aws"))
    held, allowed = cache.held(), POLICY.decide(canonical_host("other.test"), 443, tls=True)
    cases = [
        ([(b"X-Id", b"AKIAREALREALREAL0001")], "/", allowed, True),
        ([(b"X-AKIAREALREALREAL0001", b"1")], "/", allowed, True),  # a name (D521)
        ([(b"Authorization", basic("me", "real/secret key"))], "/", allowed, True),
        ([], "/?k=real%2Fsecret%20key", allowed, True),
        ([(b"X", b"AKIAEGRESSPLACEHOLDR")], "/", allowed, False),
        ([(b"X", b"AKIAREALREALREAL0001")], "/", Decision.deny(Reason.LOOPBACK), False),
        ([(b"X", b"AKIAREALREALREAL0001")], "/", Decision.deny(Reason.NOT_ALLOWLISTED), True),
        ([(b"X", b"AKIAREALREALREAL0001")], "/", Decision.deny(Reason.CREDENTIAL_REQUIRED), True),
    ]
    for fields, path, decision, refused in cases:
        assert secret_elsewhere(held, decision, tuple(fields), path) is refused, (fields, path)


_NAMES = st.sampled_from(["Authorization", "authorization", "AUTHORIZATION", "X-Api-Key",
                          "x-api-key", "X-Other"])  # fmt: skip
_VALUES = st.sampled_from([f"Bearer {KEY}", KEY, "Bearer sk-own-0123", basic("u", KEY).decode(),
                           basic("u", "own-key-99").decode(), ""])  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(fields=st.lists(st.tuples(_NAMES, _VALUES), max_size=5))
def test_require_admits_exactly_the_requests_whose_credential_fields_all_carry_it(
    fields: list[tuple[str, str]],
) -> None:
    """The rule, as an oracle over generated header lists (duplicates, any letter case)."""

    def carries(value: str) -> bool:
        if value.lower().startswith("basic "):
            return KEY in base64.b64decode(value[6:]).decode()
        return KEY in value

    marked = {"authorization"} | {n.lower() for n, v in fields if carries(v)}
    admitted = any(carries(v) for _, v in fields) and all(
        carries(v) for n, v in fields if n.lower() in marked
    )
    request = ask("api.test", "/", *((n.encode(), v.encode()) for n, v in fields))
    expected = Reason.ALLOWLISTED if admitted else Reason.CREDENTIAL_REQUIRED
    assert decided(request) is expected
