"""The JSON Schemas in schemas/ agree with the validators they describe (issue 14).

Each schema describes a file's structure, and the loaders check that structure with it
(common/problems.py); they also make domain checks no schema can express (IDNA, loopback
entries, `${VAR}` references, RE2 matchers). So: every document the loader accepts, the
schema accepts; every structural mistake, both refuse;
the domain checks are listed as what the schema accepts and only the loader refuses.
The examples shipped in the repository validate.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from sandbox_egress.hookrunner.ax.schema import validate_ax_document
from sandbox_egress.hookrunner.schema import validate_document
from sandbox_egress.proxy.config.loader import ConfigError, parse

REPO = Path(__file__).resolve().parents[1]
SCHEMAS = REPO / "schemas"


def schema(name: str) -> jsonschema.Draft202012Validator:
    document = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(document)
    return jsonschema.Draft202012Validator(document)


def proxy_accepts(document: Any) -> bool:
    try:
        parse(document, "env.yaml", {"TOKEN": "t0ken-value"})
    except ConfigError:
        return False
    return True


def entry(**fields: Any) -> dict[str, Any]:
    return {"network": {"allowlist": [fields]}}


CONFIG_BOTH_ACCEPT = {
    "no allowlist": {"network": {}},
    "exact": entry(domain="api.example.com"),
    "wildcard with ports": entry(domain="*.pypi.org", ports=[443, 8443]),
    "any": entry(domain="*"),
    "cidr": entry(domain="203.0.113.0/24"),
    "transform": entry(domain="t.example.com", transform={"Authorization": "Bearer ${TOKEN}"}),
    "flags": entry(domain="a.example.com", allow_plaintext=True, passthrough=False),
    "pasted environment": {"environment": {"network": {"allowlist": [{"domain": "x.test"}]}}},
}
CONFIG_BOTH_REFUSE = {
    "empty file": None,
    "no network section": {"netwrok": {"allowlist": []}},
    "pasted environment without network": {"environment": {}},
    "unknown entry key": entry(domain="a.example.com", comment="x"),
    "unknown network key": {"network": {"allowlst": []}},
    "missing domain": entry(ports=[443]),
    "empty domain": entry(domain=""),
    "domain not a string": entry(domain=5),
    "glob in a label": entry(domain="*foo.com"),
    "double star": entry(domain="**"),
    "wildcard in the middle": entry(domain="a.*.com"),
    "port zero": entry(domain="a.example.com", ports=[0]),
    "port as string": entry(domain="a.example.com", ports=["443"]),
    "no ports": entry(domain="a.example.com", ports=[]),
    "plaintext not a bool": entry(domain="a.example.com", allow_plaintext="yes"),
    "empty transform": entry(domain="a.example.com", transform={}),
    "header name with space": entry(domain="a.example.com", transform={"X Bad": "v"}),
    "value with CR LF": entry(domain="a.example.com", transform={"X-A": "v\r\nHost: evil"}),
    "allowlist not a list": {"network": {"allowlist": {"domain": "a"}}},
}
CONFIG_ONLY_THE_LOADER_REFUSES = {  # domain checks a schema cannot express
    "loopback entry": entry(domain="127.0.0.1"),
    "localhost": entry(domain="localhost"),
    "unset variable": entry(domain="t.example.com", transform={"X-A": "${UNSET_VARIABLE}"}),
    "transform on *": entry(domain="*", transform={"X-A": "v"}),
    "non-strict cidr": entry(domain="203.0.113.1/24"),
    "host framing header": entry(domain="a.example.com", transform={"Host": "x"}),
}


@pytest.mark.parametrize("case", sorted(CONFIG_BOTH_ACCEPT))
def test_config_accepted_by_both(case: str) -> None:
    document = CONFIG_BOTH_ACCEPT[case]
    assert list(schema("egress-config").iter_errors(document)) == []
    assert proxy_accepts(document)


@pytest.mark.parametrize("case", sorted(CONFIG_BOTH_REFUSE))
def test_config_refused_by_both(case: str) -> None:
    document = CONFIG_BOTH_REFUSE[case]
    assert list(schema("egress-config").iter_errors(document)) != []
    assert not proxy_accepts(document)


@pytest.mark.parametrize("case", sorted(CONFIG_ONLY_THE_LOADER_REFUSES))
def test_config_domain_checks_are_the_loaders(case: str) -> None:
    document = CONFIG_ONLY_THE_LOADER_REFUSES[case]
    assert list(schema("egress-config").iter_errors(document)) == []
    assert not proxy_accepts(document)


@pytest.mark.parametrize(
    "path", ["config/default.yaml", "config/agent-rules.yaml", "deploy/compose/env.yaml"]
)
def test_shipped_configurations_validate(path: str) -> None:
    document = yaml.safe_load((REPO / path).read_text())
    assert list(schema("egress-config").iter_errors(document)) == []


def hooks_accepts(document: Any) -> bool:
    return validate_document(document, "hooks.json")[1] == []


def handler(**fields: Any) -> dict[str, Any]:
    return {"g": {"pre_tool_execution": [{"matcher": "code_execution", "hooks": [fields]}]}}


HOOKS_BOTH_ACCEPT = {
    "command": handler(type="command", command="true", timeout=5),
    "http": handler(type="http", url="https://telemetry.example.com/x", headers={"X-A": "b"}),
    "disabled group": {"g": {"enabled": False, "post_tool_execution": []}},
    "empty file": {},
}
HOOKS_BOTH_REFUSE = {
    "unknown group key": {"g": {"pre": []}},
    "timeout zero": handler(type="command", command="true", timeout=0),
    "timeout string": handler(type="command", command="true", timeout="10"),
    "timeout float": handler(type="command", command="true", timeout=1.5),
    "no command": handler(type="command"),
    "unknown type": handler(type="grpc", command="x"),
    "http url": handler(type="http", url="http://telemetry.example.com/x"),
    "rule without hooks": {"g": {"pre_tool_execution": [{"matcher": "x"}]}},
    "group not an object": {"g": []},
}


@pytest.mark.parametrize("case", sorted(HOOKS_BOTH_ACCEPT))
def test_hooks_accepted_by_both(case: str) -> None:
    assert list(schema("hooks").iter_errors(HOOKS_BOTH_ACCEPT[case])) == []
    assert hooks_accepts(HOOKS_BOTH_ACCEPT[case])


@pytest.mark.parametrize("case", sorted(HOOKS_BOTH_REFUSE))
def test_hooks_refused_by_both(case: str) -> None:
    assert list(schema("hooks").iter_errors(HOOKS_BOTH_REFUSE[case])) != []
    assert not hooks_accepts(HOOKS_BOTH_REFUSE[case])


def test_shipped_hooks_validate() -> None:
    document = json.loads((REPO / "deploy/compose/agents/hooks.json").read_text())
    assert list(schema("hooks").iter_errors(document)) == []
    assert hooks_accepts(document)


def ax_accepts(document: Any) -> bool:
    return validate_ax_document(document, ".ax-code/hooks.json")[1] == []


def docs_ax_example() -> Any:
    """The example of docs/hooks.md's AX file format section."""
    text = (REPO / "docs" / "hooks.md").read_text()
    section = text[text.index("### File format", text.index("AX Code / Claude Code dialect")) :]
    block = re.search(r"```json\n(.*?)\n```", section, re.S)
    assert block is not None
    return json.loads(block.group(1))


AX_BOTH_REFUSE = {
    "unknown event": {"hooks": [{"event": "BeforeTool", "command": "true"}]},
    "event in lower case": {"hooks": [{"event": "pretooluse", "command": "true"}]},
    "empty command": {"hooks": [{"event": "Stop", "command": ""}]},
    "unknown protocol": {"hooks": [{"event": "Stop", "command": "x", "protocol": "v2"}]},
    "block flag not bool": {"hooks": [{"event": "Stop", "command": "x", "blockOnFailure": 1}]},
    "unknown pack": {"packs": ["no-such-pack"]},
    "unknown key": {"hookz": []},
}


def test_the_documented_ax_example_validates() -> None:
    document = docs_ax_example()
    assert list(schema("ax-hooks").iter_errors(document)) == []
    assert ax_accepts(document)


@pytest.mark.parametrize("case", sorted(AX_BOTH_REFUSE))
def test_ax_refused_by_both(case: str) -> None:
    assert list(schema("ax-hooks").iter_errors(AX_BOTH_REFUSE[case])) != []
    assert not ax_accepts(AX_BOTH_REFUSE[case])


def test_the_loaders_read_the_schemas_of_this_folder() -> None:
    from sandbox_egress.common.problems import SCHEMAS as PACKAGED

    assert SCHEMAS.resolve() == PACKAGED
    assert sorted(p.name for p in PACKAGED.glob("*.json")) == [
        "ax-hooks.schema.json",
        "egress-config.schema.json",
        "egress-sandbox.schema.json",
        "hooks.schema.json",
    ]


def loader_messages(document: Any, kind: str) -> list[str]:
    if kind == "ax":
        return [p.message for p in validate_ax_document(document, ".ax-code/hooks.json")[1]]
    try:
        parse(document, "env.yaml", {"TOKEN": "t0ken-value"})
    except ConfigError as exc:
        return [p.message for p in exc.problems]
    return []


@pytest.mark.parametrize(
    ("kind", "case"),
    [("config", c) for c in sorted(CONFIG_BOTH_REFUSE)]
    + [("ax", c) for c in sorted(AX_BOTH_REFUSE)],
)
def test_every_schema_error_has_the_schemas_words(kind: str, case: str) -> None:
    """An error whose subschema has no `x-problem` reads "is invalid": none may."""
    document = (CONFIG_BOTH_REFUSE if kind == "config" else AX_BOTH_REFUSE)[case]
    messages = loader_messages(document, kind)
    assert messages != []
    assert [m for m in messages if "is invalid" in m] == []
