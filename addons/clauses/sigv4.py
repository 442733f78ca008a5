"""SigV4 re-signing, the last request stage
(docs/configuration.md#sigv4-re-signing-as-sigv4; D206-D209): a request the pure stage
judged re-signable (`RequestAnswer.sigv4`, after rules, git and budgets) gets the entry's
aws keys from the credential cache and is signed by `proxy.sigv4.sign` with the proxy's
clock.

* `UNSIGNED-PAYLOAD` / `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: signed in `requestheaders`,
  the body streams.
* a hex `x-amz-content-sha256`, or none (most non-S3 APIs): the body is HELD (announced
  size up to `SIGNED_BODY_LIMIT`, mitmproxy's own buffering bound) and, in the `request`
  hook, verified against the declared hash, or hashed, before signing; no byte goes
  upstream before. A body that cannot be held is `sigv4_unsupported`; one whose bytes do
  not match its declared hash is `bad_request`.

Keys that cannot be had refuse the request 502 `credential_unavailable`.
"""

from __future__ import annotations

import datetime

from mitmproxy import http

from sandbox_egress.addons.clauses.base import Adapter, Turn
from sandbox_egress.addons.shared import FlowState, Shared
from sandbox_egress.proxy.clauses.sigv4 import STREAMED, AwsKeys, Held, Signing, payload_hash, sign
from sandbox_egress.proxy.credentials.aws import SECRET_ACCESS_KEY, SESSION_TOKEN
from sandbox_egress.proxy.credentials.base import CredentialError
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.values.redact import Redactor

SIGNED_BODY_LIMIT = 1024 * 1024  # = limits.STREAM_BODIES_OVER: held whole, never streamed


async def start(
    shared: Shared,
    flow: http.HTTPFlow,
    state: FlowState,
    decision: Decision,
    signing: Signing,
    size: int | None,
) -> Decision | Held | None:
    """Sign the request `decision` allowed now (None), hold its body (`Held`), or the
    refusal. `size` is the body's announced size (0 without a body, None unknown)."""
    binding = decision.entry.credential if decision.entry is not None else None
    if binding is None:
        return Decision.deny(Reason.CREDENTIAL_UNAVAILABLE, decision.entry)
    state.credentials = (*state.credentials, binding.name)  # the audit line names it
    try:
        fetched = await shared.credentials.get(binding.name)
        keys = AwsKeys(
            fetched.value.reveal(),
            fetched.extra[SECRET_ACCESS_KEY],
            fetched.extra.get(SESSION_TOKEN),
        )
    except (CredentialError, KeyError):
        return Decision.deny(Reason.CREDENTIAL_UNAVAILABLE, decision.entry)
    written = ["Authorization"] + (["X-Amz-Security-Token"] if keys.session_token else [])
    state.injected = tuple(dict.fromkeys((*state.injected, *written)))
    secrets = [s for s in (keys.secret_access_key, keys.session_token) if s is not None]
    if keys.session_token is not None:  # the one key that travels: redacted if echoed
        spelled = tuple(s.reveal().encode() for s in secrets)
        state.redactions = Redactor.build((*state.redactions.secrets, *spelled))
    if signing.payload in STREAMED:
        _sign(flow.request, signing, keys, None)
        return None
    if size == 0:  # nothing to hold: the empty body's hash
        verdict = finish(flow, Held(signing, keys), decision)
        return None if verdict.allowed else verdict
    if size is None or size > SIGNED_BODY_LIMIT:
        return Decision.deny(Reason.SIGV4_UNSUPPORTED, decision.entry)
    flow.request.stream = False
    return Held(signing, keys)


def finish(flow: http.HTTPFlow, held: Held, decision: Decision) -> Decision:
    """The held body: verified against its declared hash (or hashed), then signed."""
    body = flow.request.raw_content or b""
    digest = payload_hash(body)
    if held.signing.payload is not None and held.signing.payload != digest:
        return Decision.deny(Reason.BAD_REQUEST, decision.entry)
    _sign(flow.request, held.signing, held.keys, digest)
    return decision


def _sign(request: http.Request, signing: Signing, keys: AwsKeys, digest: str | None) -> None:
    now = datetime.datetime.now(datetime.UTC)
    request.headers.fields = sign(
        signing,
        keys,
        request.method,
        request.path,
        request.headers.fields,
        request.host_header or request.pretty_host,
        now,
        digest,
    )


class SigV4Adapter(Adapter):
    """The `sigv4` clause: signed last once written (or its body held, then hashed and
    signed in `judge`, before any other clause judges the held body, D424)."""

    clause = "sigv4"

    async def write(self, turn: Turn) -> Decision | None:
        answer, state = turn.answer, turn.state
        if answer.sigv4 is None or not answer.decision.allowed:
            return None
        signed = await start(
            turn.shared, turn.flow, state, answer.decision, answer.sigv4, turn.body
        )
        state.sigv4 = signed if isinstance(signed, Held) else None
        return signed if isinstance(signed, Decision) else None

    def hold(self, turn: Turn) -> Decision | bool:
        return turn.state.sigv4 is not None

    def holds(self, turn: Turn) -> bool:
        return turn.state.sigv4 is not None

    def judge(self, turn: Turn, decided: Decision) -> Decision:
        flow, state = turn.flow, turn.state
        held, state.sigv4 = state.sigv4, None
        if held is None:
            raise ValueError("judge without a held SigV4 body")
        decision = finish(flow, held, decided)
        if decision.allowed:
            state.bytes_sent = len(flow.request.raw_content or b"")  # held, not streamed
        return decision
