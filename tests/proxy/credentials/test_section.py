"""The `credentials:` section, `credential:` bindings and `${credential:NAME}` references
as the loader reads them (proxy/credentials/section.py, proxy/config/references.py): named cases
of what is accepted and of each refusal, located like every configuration problem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox_egress.proxy.config import loader as config
from sandbox_egress.proxy.credentials.command import CommandSource
from sandbox_egress.proxy.credentials.env import EnvSource
from sandbox_egress.proxy.credentials.file import FileSource
from sandbox_egress.proxy.credentials.section import As, Binding
from sandbox_egress.proxy.values.secret import Template, Unresolved

ENV = {"OPENAI_API_KEY": "sk-real-value-1", "PREFIX": "Token"}


def load(text: str, environ: dict[str, str] | None = None) -> config.NetworkConfig:
    return config.parse(yaml.safe_load(text), "env.yaml", ENV if environ is None else environ)


def problems(text: str) -> list[str]:
    with pytest.raises(config.ConfigError) as caught:
        load(text)
    return [f"{p.location}: {p.message}" for p in caught.value.problems]


BASE = """
credentials:
  openai: {env: OPENAI_API_KEY}
  gh: {file: {path: /run/secrets/gh, ttl: 10m}}
  jira: {command: {argv: ["/usr/local/bin/op", "read", "op://a/b"], timeout: 500ms, ttl: 1h}}
network:
  allowlist:
"""


def test_the_section_is_parsed_into_sources_with_their_settings() -> None:
    loaded = load(BASE + "    - domain: example.com\n")
    specs = loaded.credentials.specs
    assert specs["openai"] == EnvSource("OPENAI_API_KEY")
    assert specs["gh"] == FileSource("/run/secrets/gh", specs["gh"].settings)
    assert specs["gh"].settings.ttl == 600
    jira = specs["jira"]
    assert isinstance(jira, CommandSource)
    assert jira.argv == ("/usr/local/bin/op", "read", "op://a/b")
    assert (jira.settings.timeout, jira.settings.ttl) == (0.5, 3600)
    assert (jira.settings.refresh_before, jira.settings.max_stale) == (300, 3600)


def test_a_reference_in_a_transform_is_a_template_rendered_per_request() -> None:
    loaded = load(
        BASE
        + '    - domain: api.openai.com\n      transform: {Authorization: "${PREFIX} ${credential:openai}"}\n'
    )
    value = loaded.allowlist[0].transform[0].value
    assert isinstance(value, Template)
    assert value.names == ("openai",)
    assert value.render({"openai": "minted-1"}).reveal() == "Token minted-1"
    assert "minted" not in repr(value.render({"openai": "minted-1"}))


def test_a_reference_in_a_placeholder_value_and_a_binding() -> None:
    loaded = load(
        BASE
        + "    - domain: github.com\n"
        + "      credential: {name: gh, as: basic, username: x-access-token}\n"
        + '      secrets: [{placeholder: egress-placeholder-jira, value: "${credential:jira}"}]\n'
    )
    entry = loaded.allowlist[0]
    assert entry.credential == Binding("gh", As.BASIC, username="x-access-token")
    assert isinstance(entry.secrets[0].value, Template)


def test_unresolved_loading_checks_names_but_looks_nothing_up() -> None:
    text = BASE + '    - domain: a.example\n      transform: {X-K: "${credential:openai}"}\n'
    loaded = config.parse(yaml.safe_load(text), "env.yaml", {}, resolve_secrets=False)
    assert isinstance(loaded.allowlist[0].transform[0].value, Unresolved)


REFUSED: list[tuple[str, str, str]] = [
    (
        "unknown-reference",
        '    - domain: a.example\n      transform: {X-K: "${credential:nope}"}\n',
        "network.allowlist[0].transform.X-K: unknown credential 'nope' (not in credentials:)",
    ),
    (
        "unknown-binding",
        "    - domain: a.example\n      credential: {name: nope, as: bearer}\n",
        "network.allowlist[0].credential.name: unknown credential 'nope' (not in credentials:)",
    ),
    (
        "bad-as",
        "    - domain: a.example\n      credential: {name: gh, as: cookie}\n",
        "network.allowlist[0].credential.as: required, one of: bearer, basic, header, sigv4",
    ),
    (
        "basic-without-username",
        "    - domain: a.example\n      credential: {name: gh, as: basic}\n",
        "network.allowlist[0].credential.username: required with as: basic",
    ),
    (
        "header-framing",
        "    - domain: a.example\n      credential: {name: gh, as: header, header: Host}\n",
        "network.allowlist[0].credential.header: this header frames or routes",
    ),
    (
        "unknown-binding-key",
        "    - domain: a.example\n      credential: {name: gh, as: bearer, scope: x}\n",
        "network.allowlist[0].credential.scope: unknown key",
    ),
    (
        "on-star",
        '    - domain: "*"\n      credential: {name: gh, as: bearer}\n',
        "network.allowlist[0].credential: a credential on '*' would go to every host",
    ),
    (
        "twice-authorization",
        "    - domain: a.example\n      credential: {name: gh, as: bearer}\n"
        "      transform: {authorization: x}\n",
        "network.allowlist[0].credential: the transform already writes authorization",
    ),
    (
        "passthrough",
        "    - domain: a.example\n      passthrough: true\n      credential: {name: gh, as: bearer}\n",
        "network.allowlist[0].passthrough: a pass-through entry is not intercepted",
    ),
]


@pytest.mark.parametrize(("name", "entry", "expected"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_entries(name: str, entry: str, expected: str) -> None:
    assert any(p.startswith(expected) for p in problems(BASE + entry)), problems(BASE + entry)


SECTIONS: list[tuple[str, Any, str]] = [
    ("not-a-map", ["x"], "credentials: must be a mapping"),
    (
        "two-kinds",
        {"a": {"env": "A", "file": "/b"}},
        "credentials.a: must be a mapping with exactly one",
    ),
    ("unknown-kind", {"a": {"keyring": "x"}}, "credentials.a: unknown kind 'keyring'"),
    ("bad-name", {"a b": {"env": "A"}}, "credentials: invalid credential name"),
    (
        "relative-file",
        {"a": {"file": "run/x"}},
        "credentials.a.file.path: must be an absolute path",
    ),
    ("bad-env", {"a": {"env": "A-B"}}, "credentials.a.env.name: must be an environment variable"),
    ("relative-argv", {"a": {"command": {"argv": ["op"]}}}, "credentials.a.command.argv: argv[0]"),
    (
        "empty-argv",
        {"a": {"command": {"argv": []}}},
        "credentials.a.command.argv: must be a non-empty",
    ),
    (
        "bad-duration",
        {"a": {"command": {"argv": ["/x"], "ttl": "10 minutes"}}},
        "credentials.a.command.ttl: must be a duration",
    ),
    (
        "unknown-key",
        {"a": {"command": {"argv": ["/x"], "shell": True}}},
        "credentials.a.command.shell: unknown key",
    ),
]


@pytest.mark.parametrize(("name", "section", "expected"), SECTIONS, ids=[s[0] for s in SECTIONS])
def test_refused_sections(name: str, section: Any, expected: str) -> None:
    document = {"credentials": section, "network": {"allowlist": ["example.com"]}}
    with pytest.raises(config.ConfigError) as caught:
        config.parse(document, "env.yaml", ENV)
    found = [f"{p.location}: {p.message}" for p in caught.value.problems]
    assert any(p.startswith(expected) for p in found), found


def test_a_refused_section_does_not_double_its_names_problems() -> None:
    found = problems(
        "credentials: {a: {env: 'A-B'}}\nnetwork:\n  allowlist:\n"
        '    - domain: x.example\n      transform: {X-K: "${credential:a}"}\n'
    )
    assert found == ["credentials.a.env.name: must be an environment variable name"]


def test_a_file_reference_beside_a_credential_is_still_read() -> None:
    found = problems(
        "credentials:\n  a: {env: A}\nnetwork:\n  allowlist:\n    - domain: x.example\n"
        '      transform: {X-K: "${credential:a}x${file:/nonexistent/z}"}\n'
    )
    assert found == [
        "network.allowlist[0].transform.X-K: cannot read ${file:/nonexistent/z}: No such file or directory"
    ]


def test_a_reload_of_the_same_definitions_compares_equal_a_changed_one_does_not() -> None:
    """What the launcher's `Credentials.replace` compares: equal keeps the cached value."""
    first, again = (
        load(BASE + "    - domain: a.example\n"),
        load(BASE + "    - domain: b.example\n"),
    )
    assert first.credentials.specs == again.credentials.specs
    changed = load(BASE.replace("ttl: 10m", "ttl: 11m") + "    - domain: a.example\n")
    assert changed.credentials.specs["gh"] != first.credentials.specs["gh"]
    assert changed.credentials.specs["openai"] == first.credentials.specs["openai"]


def test_an_inline_pem_key_is_accepted_with_and_without_secrets(tmp_path: Path) -> None:
    from tests.proxy.credentials.forge import app_key

    pem, _ = app_key(tmp_path)
    document = {
        "credentials": {
            "app": {"github_app": {"app_id": 1, "installation_id": 2, "private_key": pem}}
        },
        "network": {"allowlist": ["example.com"]},
    }
    assert "app" in config.parse(document, "env.yaml", {}).credentials
    assert "app" in config.parse(document, "env.yaml", {}, resolve_secrets=False).credentials
    document["credentials"]["app"]["github_app"]["private_key"] = "not a key"
    with pytest.raises(config.ConfigError, match="must be an RSA private key in PEM"):
        config.parse(document, "env.yaml", {})


def test_files_referenced_by_credentials_are_watched(tmp_path: Path) -> None:
    secret = tmp_path / "client-secret"
    secret.write_text("s\n")
    document = {
        "credentials": {
            "g": {
                "oauth2": {
                    "grant": "client_credentials",
                    "token_url": "https://login.example/token",
                    "client_id": "${ID}",
                    "client_secret": f"${{file:{secret}}}",
                }
            }
        },
        "network": {"allowlist": ["example.com"]},
    }
    assert config.parse(document, "env.yaml", {"ID": "i"}).secret_files == (str(secret),)
