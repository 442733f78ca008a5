"""Configuration loading: every validation rule has a named case, and secrets never leak."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import pytest

from sandbox_egress.common.invariant import InvariantError
from sandbox_egress.proxy.config.loader import ConfigError, PatternKind, load, parse
from sandbox_egress.proxy.values.secret import Unresolved

SECRET = "tok-3f9a1c-never-print-me"
ENV = {"TOKEN": SECRET, "OTHER": "x", "EMPTY": ""}


def entries(*allowlist: object) -> object:
    return {"network": {"allowlist": list(allowlist)}}


def problems_of(document: object, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse(document, "env.yaml", ENV if environ is None else environ)
    return [str(p) for p in info.value.problems]


INVALID = [
    ("not-a-mapping", ["a", "b"], "env.yaml: the file must be a mapping with a 'network' section"),
    ("network-not-mapping", {"network": []}, "env.yaml: network: must be a mapping"),
    (
        "allowlist-not-list",
        {"network": {"allowlist": {"domain": "a.com"}}},
        "network.allowlist: must be a list",
    ),
    (
        "unknown-network-key",
        {"network": {"allowlist": [], "denylist": []}},
        "network.denylist: unknown key",
    ),
    (
        "entry-not-mapping",
        entries(5),
        "network.allowlist[0]: an entry must be a domain or a mapping with a 'domain' key",
    ),
    ("missing-domain", entries({"ports": [443]}), "network.allowlist[0].domain: required"),
    ("empty-domain", entries({"domain": "  "}), "network.allowlist[0].domain: required"),
    ("domain-not-string", entries({"domain": 42}), "network.allowlist[0].domain: required"),
    (
        "unknown-key",
        entries({"domain": "a.com", "transfrom": {}}),
        "network.allowlist[0]: unknown key 'transfrom'",
    ),
    (
        "glob-not-label",
        entries({"domain": "*foo.com"}),
        "network.allowlist[0].domain: a wildcard may only be",
    ),
    (
        "double-star",
        entries({"domain": "**"}),
        "network.allowlist[0].domain: a wildcard may only be",
    ),
    (
        "star-dot-star",
        entries({"domain": "*.*.com"}),
        "network.allowlist[0].domain: a wildcard may only be",
    ),
    (
        "wildcard-middle",
        entries({"domain": "a.*.com"}),
        "network.allowlist[0].domain: a wildcard may only be",
    ),
    ("empty-label", entries({"domain": "a..com"}), "network.allowlist[0].domain: invalid host"),
    ("bad-cidr", entries({"domain": "10.0.0.1/8"}), "network.allowlist[0].domain: invalid CIDR"),
    (
        "pasted-url",
        entries({"domain": "https://api.github.com/repos/acme"}),
        "network.allowlist[0].domain: a host name, not a URL: write 'api.github.com'",
    ),
    (
        "host-with-path",
        entries({"domain": "github.com/acme/web"}),
        "network.allowlist[0].domain: a host name, not a URL or a path: write 'github.com'",
    ),
    (
        "loopback-ip",
        entries({"domain": "127.0.0.1"}),
        "loopback and unspecified addresses can never be opened",
    ),
    (
        "loopback-cidr",
        entries({"domain": "127.0.0.0/8"}),
        "loopback and unspecified addresses can never be opened",
    ),
    (
        "loopback-v6",
        entries({"domain": "::1"}),
        "loopback and unspecified addresses can never be opened",
    ),
    (
        "loopback-decimal",
        entries({"domain": "2130706433"}),
        "loopback and unspecified addresses can never be opened",
    ),
    ("localhost", entries({"domain": "localhost"}), "loopback names can never be opened"),
    ("localhost-sub", entries({"domain": "a.localhost"}), "loopback names can never be opened"),
    (
        "localhost-wildcard",
        entries({"domain": "*.localhost"}),
        "loopback names can never be opened",
    ),
    (
        "ports-not-list",
        entries({"domain": "a.com", "ports": 443}),
        "network.allowlist[0].ports: must be a non-empty list",
    ),
    (
        "ports-empty",
        entries({"domain": "a.com", "ports": []}),
        "network.allowlist[0].ports: must be a non-empty list",
    ),
    (
        "port-zero",
        entries({"domain": "a.com", "ports": [0]}),
        "network.allowlist[0].ports[0]: port must be an integer",
    ),
    (
        "port-too-big",
        entries({"domain": "a.com", "ports": [443, 70000]}),
        "network.allowlist[0].ports[1]: port must be",
    ),
    (
        "port-bool",
        entries({"domain": "a.com", "ports": [True]}),
        "network.allowlist[0].ports[0]: port must be",
    ),
    (
        "port-whole-float",  # JSON Schema calls 443.0 an integer; the loader does not
        entries({"domain": "a.com", "ports": [443.0]}),
        "network.allowlist[0].ports[0]: port must be an integer in 1-65535",
    ),
    (
        "plaintext-not-bool",
        entries({"domain": "a.com", "allow_plaintext": "yes"}),
        "network.allowlist[0].allow_plaintext: must be true or false",
    ),
    (
        "transform-not-map",
        entries({"domain": "a.com", "transform": ["Authorization"]}),
        "network.allowlist[0].transform: must be a non-empty mapping",
    ),
    (
        "header-name-space",
        entries({"domain": "a.com", "transform": {"Bad Name": "v"}}),
        "invalid header name 'Bad Name'",
    ),
    (
        "header-name-crlf",
        entries({"domain": "a.com", "transform": {"X-A\r\nX-B": "v"}}),
        "invalid header name",
    ),
    (
        "header-host",
        entries({"domain": "a.com", "transform": {"Host": "b.com"}}),
        "transform.Host: this header frames or routes",
    ),
    (
        "header-twice",
        entries({"domain": "a.com", "transform": {"X-K": "1", "x-k": "2"}}),
        "transform.x-k: header given twice",
    ),
    (
        "value-not-string",
        entries({"domain": "a.com", "transform": {"X-K": 5}}),
        "transform.X-K: value must be a string",
    ),
    (
        "value-crlf",
        entries({"domain": "a.com", "transform": {"X-K": "a\r\nInjected: 1"}}),
        "transform.X-K: value contains CR, LF or NUL",
    ),
    (
        "value-nul",
        entries({"domain": "a.com", "transform": {"X-K": "a\0b"}}),
        "transform.X-K: value contains CR, LF or NUL",
    ),
    (
        "unset-var",
        entries({"domain": "a.com", "transform": {"Authorization": "Bearer ${MISSING}"}}),
        "transform.Authorization: environment variable MISSING is not set",
    ),
    (
        "bad-reference",
        entries({"domain": "a.com", "transform": {"X-K": "${not a name}"}}),
        "invalid reference ${not a name}",
    ),
    (
        "empty-var",
        entries({"domain": "a.com", "transform": {"Authorization": "Bearer ${EMPTY}"}}),
        "transform.Authorization: environment variable EMPTY is empty",
    ),
    (
        "missing-file",
        entries({"domain": "a.com", "transform": {"X-K": "${file:/nonexistent/tok}"}}),
        "cannot read ${file:/nonexistent/tok}",
    ),
    (
        "transform-on-star",
        entries({"domain": "*", "transform": {"X-K": "${TOKEN}"}}),
        "a transform on '*' would send the credential to every host",
    ),
    (
        "duplicate",
        entries({"domain": "A.com"}, {"domain": "a.com."}),
        "network.allowlist[1]: duplicate of network.allowlist[0] (a.com)",
    ),
]


@pytest.mark.parametrize(
    ("document", "expected"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_configuration_names_the_location(document: object, expected: str) -> None:
    problems = problems_of(document)
    assert any(expected in p for p in problems), problems
    assert all(p.startswith("env.yaml") for p in problems)


def test_every_problem_is_reported_not_only_the_first() -> None:
    problems = problems_of(entries({"domain": "*foo.com"}, {"domain": "ok.com", "ports": [0]}, 3))
    assert [p.split(":")[1].strip() for p in problems] == [
        "network.allowlist[0].domain",
        "network.allowlist[1].ports[0]",
        "network.allowlist[2]",
    ]


def test_a_value_with_crlf_from_the_environment_is_refused_without_printing_it() -> None:
    problems = problems_of(
        entries({"domain": "a.com", "transform": {"Authorization": "Bearer ${TOKEN}"}}),
        {"TOKEN": SECRET + "\r\nX-Evil: 1"},
    )
    assert problems == [
        "env.yaml: network.allowlist[0].transform.Authorization: "
        "value contains CR, LF or NUL (after resolving references)"
    ]


def test_secrets_never_appear_in_problems_or_reprs() -> None:
    document = entries(
        {"domain": "a.com", "transform": {"Authorization": f"Bearer {SECRET}", "X-Ok": "${TOKEN}"}},
        {"domain": "b.com", "transform": {"X-K": "${TOKEN}\n"}},
        {"domain": "*", "transform": {"X-K": "${TOKEN}"}},
    )
    with pytest.raises(ConfigError) as info:
        parse(document, "env.yaml", ENV)
    assert SECRET not in str(info.value)
    good = parse(entries({"domain": "a.com", "transform": {"X-K": "${TOKEN}"}}), "env.yaml", ENV)
    assert SECRET not in repr(good)
    assert SECRET not in str(good.allowlist[0].transform)
    assert good.allowlist[0].redactions.secrets == (
        SECRET.encode(),
    )  # the value is the reference alone
    assert SECRET not in repr(good.allowlist[0].transform)


KINDS = [
    ("exact", "API.Example.COM.", PatternKind.EXACT, "api.example.com", "api.example.com"),
    ("idn", "Bücher.example", PatternKind.EXACT, "xn--bcher-kva.example", "xn--bcher-kva.example"),
    ("wildcard", "*.Example.com", PatternKind.WILDCARD, "*.example.com", "example.com"),
    ("any", "*", PatternKind.ANY, "*", None),
    ("ipv4", "203.0.113.7", PatternKind.ADDRESS, "203.0.113.7", None),
    ("ipv6", "2001:DB8::1", PatternKind.ADDRESS, "2001:db8::1", None),
    ("cidr", "10.20.0.0/16", PatternKind.ADDRESS, "10.20.0.0/16", None),
    ("wide-cidr", "0.0.0.0/0", PatternKind.ADDRESS, "0.0.0.0/0", None),
]


@pytest.mark.parametrize(
    ("domain", "kind", "pattern", "name"), [c[1:] for c in KINDS], ids=[c[0] for c in KINDS]
)
def test_domain_forms(domain: str, kind: PatternKind, pattern: str, name: str | None) -> None:
    (entry,) = parse(entries({"domain": domain}), "env.yaml", ENV).allowlist
    assert (entry.kind, entry.pattern, entry.name) == (kind, pattern, name)


def test_full_entry_is_parsed_into_typed_values(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    config_file = tmp_path / "env.yaml"
    config_file.write_text(
        "network:\n"
        "  allowlist:\n"
        "    - domain: telemetry.example.com\n"
        "      ports: [443, 8443]\n"
        "      allow_plaintext: true\n"
        "      transform:\n"
        '        Authorization: "Bearer ${TOKEN}"\n'
        '        X-From-File: "${file:' + str(token_file) + '}"\n'
        '        X-Literal: "literal$value"\n'
    )
    network = load(config_file, ENV)
    (entry,) = network.allowlist
    assert entry.ports == frozenset({443, 8443})
    assert entry.allow_plaintext is True
    assert [(t.header, t.value.reveal()) for t in entry.transform] == [
        ("Authorization", f"Bearer {SECRET}"),
        ("X-From-File", "from-file"),
        ("X-Literal", "literal$value"),
    ]
    assert network.source == str(config_file)


def test_json_and_pasted_environment_objects_load(tmp_path: Path) -> None:
    path = tmp_path / "env.json"
    path.write_text(
        '{"type": "remote", "environment": {"network": {"allowlist": [{"domain": "*"}]}}}'
    )
    assert [e.pattern for e in load(path, ENV).allowlist] == ["*"]


@pytest.mark.parametrize("text", ["network:\n", "network:\n  allowlist: []\n"])
def test_an_empty_allowlist_is_valid_and_denies_everything(tmp_path: Path, text: str) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(text)
    assert load(path, ENV).allowlist == ()


NO_NETWORK_SECTION = "no 'network' section (write `network: {allowlist: []}` to refuse everything)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", f"the file is empty: {NO_NETWORK_SECTION}"),
        ("other: 1\n", f":1:1: {NO_NETWORK_SECTION}"),
        ("environment: {}\n", f":1:1: {NO_NETWORK_SECTION}"),
        ("Network: {}\n", ":1:1: no 'network' section; did you mean 'network' (not 'Network')?"),
    ],
)
def test_a_file_without_a_network_section_is_refused(
    tmp_path: Path, text: str, expected: str
) -> None:
    """Read as an empty allowlist, a misspelt key would silently refuse everything."""
    path = tmp_path / "env.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(path, ENV)
    separator = "" if expected.startswith(":") else ": "
    assert [str(p) for p in info.value.problems] == [f"{path}{separator}{expected}"]


def test_yaml_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text("network:\n  allowlist:\n    - domain: [a\n")
    with pytest.raises(ConfigError) as info:
        load(path, ENV)
    (problem,) = info.value.problems
    assert str(problem) == (
        f"{path}: line 4, column 1: not valid YAML: expected ',' or ']', but got '<stream end>'"
    )


def test_unreadable_file() -> None:
    with pytest.raises(ConfigError, match=r"/nonexistent/env.yaml: cannot read file"):
        load("/nonexistent/env.yaml", ENV)


def test_address_entries_are_networks() -> None:
    (entry,) = parse(entries({"domain": "198.18.1.0/24"}), "env.yaml", ENV).allowlist
    assert entry.network == ipaddress.ip_network("198.18.1.0/24")


def test_a_reference_to_an_empty_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    transform = {"Authorization": f"Bearer ${{file:{empty}}}"}
    problems = problems_of(entries({"domain": "a.com", "transform": transform}))
    assert problems == [
        f"env.yaml: network.allowlist[0].transform.Authorization: ${{file:{empty}}} is empty"
    ]


SECRET_CARRYING = {  # a bad entry or field that holds a secret-looking value
    "literal value with CR LF": entries(
        {"domain": "a.com", "transform": {"Authorization": f"Bearer {SECRET}\r\nX-A: 1"}}
    ),
    "literal value with NUL": entries({"domain": "a.com", "transform": {"X-K": f"{SECRET}\0"}}),
    "value a list": entries({"domain": "a.com", "transform": {"X-K": [SECRET]}}),
    "transform a list": entries({"domain": "a.com", "transform": [SECRET]}),
    "entry with an unknown key": entries({"domain": "a.com", "token": SECRET}),
    "entry a string": entries(f"Bearer {SECRET}"),  # a bare domain string: it is not one
    "port a string": entries({"domain": "a.com", "ports": [SECRET]}),
    "ports a string": entries({"domain": "a.com", "ports": SECRET}),
    "flag a string": entries({"domain": "a.com", "passthrough": SECRET}),
    "unknown network key": {"network": {"token": SECRET}},
    "allowlist a string": {"network": {"allowlist": SECRET}},
    "network a string": {"network": SECRET},
    "pass-through with a transform": entries(
        {"domain": "a.com", "passthrough": True, "transform": {"X-K": SECRET}}
    ),
}


@pytest.mark.parametrize("case", sorted(SECRET_CARRYING))
def test_a_refused_value_is_never_printed(case: str) -> None:
    problems = problems_of(SECRET_CARRYING[case])
    assert problems != []
    assert [p for p in problems if SECRET[4:] in p] == []


# The problems only a reference's value can show: `secrets=False` accepts these (D83).
NEEDS_A_VALUE = {"unset-var", "empty-var", "missing-file"}


class NoEnvironment(dict[str, str]):
    """An environment that fails the test if anything reads it."""

    def __getitem__(self, key: str) -> str:
        raise AssertionError(f"read {key}")

    def __contains__(self, key: object) -> bool:
        raise AssertionError(f"looked up {key}")

    def get(self, key: str, default: object = None) -> str:  # type: ignore[override]
        raise AssertionError(f"read {key}")


@pytest.mark.parametrize(
    ("document", "expected"),
    [pytest.param(d, e, id=i) for i, d, e in INVALID if i not in NEEDS_A_VALUE],
)
def test_without_secrets_every_other_check_still_runs(document: object, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(document, "env.yaml", NoEnvironment(), resolve_secrets=False)
    with pytest.raises(ConfigError) as resolved:
        parse(document, "env.yaml", ENV)
    assert [str(p) for p in info.value.problems] == [str(p) for p in resolved.value.problems]


@pytest.mark.parametrize("case", sorted(NEEDS_A_VALUE))
def test_without_secrets_references_are_not_looked_up(case: str) -> None:
    document = next(d for i, d, _ in INVALID if i == case)
    config = parse(document, "env.yaml", NoEnvironment(), resolve_secrets=False)
    (entry,) = config.allowlist
    (transform,) = entry.transform
    assert config.secrets_resolved is False
    assert (type(transform.value), repr(transform.value)) == (Unresolved, "Unresolved()")
    assert transform.value.reveal_all() == ()
    with pytest.raises(InvariantError, match="cannot be injected"):
        transform.value.reveal()


def test_load_without_secrets_opens_no_referenced_file(tmp_path: Path) -> None:
    fifo = tmp_path / "token"
    os.mkfifo(fifo)  # opening it to read would block this test forever
    path = tmp_path / "env.yaml"
    path.write_text(
        "network:\n  allowlist:\n    - domain: a.com\n"
        f"      transform:\n        X-V: '${{UNSET_HERE}}'\n        X-K: '${{file:{fifo}}}'\n"
    )
    config = load(path, NoEnvironment(), secrets=False)
    assert [t.header for t in config.allowlist[0].transform] == ["X-V", "X-K"]


def test_the_proxy_refuses_a_configuration_without_secrets() -> None:
    from sandbox_egress.runtime.launcher import _require_secrets

    unresolved = parse(entries({"domain": "a.com"}), "env.yaml", {}, resolve_secrets=False)
    with pytest.raises(InvariantError, match="without its secrets"):
        _require_secrets(unresolved)
    _require_secrets(parse(entries({"domain": "a.com"}), "env.yaml", {}))
