"""Loading `secrets:` (proxy/values/placeholders.py through proxy/config/loader.py): every rule a named
case with its located message; a value is never printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_egress.proxy.config.loader import ConfigError, load, parse
from sandbox_egress.proxy.values.placeholders import Place
from sandbox_egress.proxy.values.secret import Unresolved

SECRET = "tok-3f9a1c-never-print-me"
ENV = {"TOKEN": SECRET, "EMPTY": ""}
PH = "sk-egress-placeholder"


def entry(*secrets: object, domain: str = "api.test", **more: object) -> object:
    return {"network": {"allowlist": [{"domain": domain, "secrets": list(secrets), **more}]}}


def problems_of(document: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse(document, "env.yaml", ENV)
    return [str(p) for p in info.value.problems]


INVALID = [
    ("empty-list", entry(), "network.allowlist[0].secrets: must be a non-empty list of placeholder"),
    ("not-a-mapping", entry("x"), "network.allowlist[0].secrets[0]: a secret must be a mapping"),
    ("no-value", entry({"placeholder": PH}), "network.allowlist[0].secrets[0].value: required, the real"),
    ("unknown-key", entry({"placeholder": PH, "value": "v", "where": 1}),
     "network.allowlist[0].secrets[0]: unknown key 'where'"),
    ("short-placeholder", entry({"placeholder": "sk-1", "value": "${TOKEN}"}),
     "network.allowlist[0].secrets[0].placeholder: a placeholder is 8 or more"),
    ("placeholder-with-space", entry({"placeholder": "sk egress placeholder", "value": "v"}),
     "network.allowlist[0].secrets[0].placeholder: a placeholder is 8 or more"),
    ("placeholder-reference", entry({"placeholder": "${TOKEN}xxxxxxx", "value": "v"}),
     "network.allowlist[0].secrets[0].placeholder: a placeholder is 8 or more"),
    ("unknown-place", entry({"placeholder": PH, "value": "v", "in": ["body"]}),
     "network.allowlist[0].secrets[0].in[0]: must be 'headers' or 'query'"),
    ("require-not-bool", entry({"placeholder": PH, "value": "v", "require": "yes"}),
     "network.allowlist[0].secrets[0].require: must be true or false"),
    ("unset-variable", entry({"placeholder": PH, "value": "${NOPE}"}),
     "network.allowlist[0].secrets[0].value: environment variable NOPE is not set"),
    ("empty-variable", entry({"placeholder": PH, "value": "${EMPTY}"}),
     "network.allowlist[0].secrets[0].value: environment variable EMPTY is empty"),
    ("value-holds-placeholder", entry({"placeholder": PH, "value": f"x{PH}"}),
     "network.allowlist[0].secrets[0].value: the value contains its own placeholder"),
    ("on-star", entry({"placeholder": PH, "value": "v"}, domain="*"),
     "network.allowlist[0].secrets: a secret on '*' would go to every host"),
    ("on-passthrough", entry({"placeholder": PH, "value": "v"}, passthrough=True),
     "network.allowlist[0].passthrough: a pass-through entry is not intercepted, so it cannot"),
    ("used-twice", {"network": {"allowlist": [
        {"domain": "a.test", "secrets": [{"placeholder": PH, "value": "v"}]},
        {"domain": "b.test", "secrets": [{"placeholder": PH, "value": "w"}]}]}},
     "network.allowlist[1].secrets[0].placeholder: placeholder already used at "
     "network.allowlist[0].secrets[0].placeholder"),
    ("inside-another", {"network": {"allowlist": [
        {"domain": "a.test", "secrets": [{"placeholder": PH, "value": "v"}]},
        {"domain": "b.test", "secrets": [{"placeholder": f"{PH}-2", "value": "w"}]}]}},
     "network.allowlist[1].secrets[0].placeholder: placeholder contains the one at "
     "network.allowlist[0].secrets[0].placeholder"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("document", "expected"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_secrets_name_their_location(document: object, expected: str) -> None:
    problems = problems_of(document)
    assert any(p.startswith("env.yaml: ") and expected in p for p in problems), problems
    assert not any(SECRET in p for p in problems)


def test_secrets_are_parsed_into_typed_values(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("from-a-file\n")
    config = parse(
        entry(
            {"placeholder": PH, "value": "${TOKEN}", "in": ["query", "headers"], "require": True},
            {"placeholder": "file-egress-placeholder", "value": f"${{file:{key}}}"},
        ),
        "env.yaml",
        ENV,
    )
    first, second = config.allowlist[0].secrets
    assert (first.placeholder, first.value.reveal(), first.places, first.require) == (
        PH, SECRET, frozenset({Place.QUERY, Place.HEADERS}), True,
    )  # fmt: skip
    assert (second.value.reveal(), second.places, second.require) == (
        "from-a-file", frozenset({Place.HEADERS}), False,
    )  # fmt: skip
    assert SECRET not in repr(config)
    assert config.secret_files == (str(key),)
    assert config.placeholders.owners_in(f"a {PH} b".encode()) == {("env.yaml", 0)}
    assert config.allowlist[0].redactions.header(SECRET.encode()) == b"[redacted]"


def test_without_secrets_values_are_not_looked_up(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(
        f"network:\n  allowlist:\n    - domain: a.test\n      secrets: [{{placeholder: {PH}, value: '${{UNSET_HERE}}'}}]\n"
    )
    config = load(path, secrets=False)
    assert isinstance(config.allowlist[0].secrets[0].value, Unresolved)
    with pytest.raises(ConfigError, match="UNSET_HERE is not set"):
        load(path, {})
