"""`egress-proxy import`: other sandboxes' allowlists become an environment file that
`check` accepts; a bare domain string is shorthand for `{domain: ...}`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_egress.proxy.config.loader import ConfigError, PatternKind, parse
from sandbox_egress.proxy.learn.importers import (
    STARTER,
    Imported,
    ImportRefused,
    as_environment_file,
    read,
)

EGRESS_PROXY = Path(sys.executable).parent / "egress-proxy"

SANDBOX_RUNTIME = """{
  "network": {
    "allowedDomains": ["github.com", "*.npmjs.org", "Registry.npmjs.org", "evil.example"],
    "deniedDomains": ["evil.example", "bad.npmjs.org"]
  },
  "filesystem": {"denyRead": ["~/.ssh"]}
}"""
CODEX = """
default_permissions = "dev"

[permissions.dev.network]
enabled = true

[permissions.dev.network.domains]
"pypi.org" = "allow"
"*.pythonhosted.org" = "allow"
"tracker.example" = "deny"

[permissions.other.network.domains]
"never.example" = "allow"

[shell_environment_policy.set]
OPENAI_API_KEY = "sk-proj-not-copied"
"""

READ_CASES = {
    "sandbox-runtime": (
        "sandbox-runtime",
        SANDBOX_RUNTIME,
        Imported(
            ("github.com", "*.npmjs.org", "registry.npmjs.org"),
            (
                "denied evil.example: left out",
                "denied bad.npmjs.org: not expressible (the allowlist has no deny entry); "
                "check that no wildcard above allows it",
            ),
        ),
    ),
    "codex default profile": (
        "codex",
        CODEX,
        Imported(
            ("pypi.org", "*.pythonhosted.org"),
            (
                "denied tracker.example: not expressible (the allowlist has no deny entry); "
                "check that no wildcard above allows it",
            ),
        ),
    ),
    "codex every profile": (
        "codex",
        '[permissions.a.network.domains]\n"a.example" = "allow"\n'
        '[permissions.b.network.domains]\n"b.example" = "allow"\n',
        Imported(("a.example", "b.example")),
    ),
    "sandbox-runtime loopback and local sockets": (
        "sandbox-runtime",
        '{"network": {"allowedDomains": ["localhost", "127.0.0.1", "api.localhost", "[::1]",'
        ' "github.com"], "allowUnixSockets": ["/var/run/docker.sock"], "allowLocalBinding": true}}',
        Imported(
            ("github.com",),
            (
                "localhost: left out: loopback names can never be opened (a "
                "service the sandbox needs on loopback runs inside the sandbox)",
                "127.0.0.1: left out: loopback and unspecified addresses can never be opened (a "
                "service the sandbox needs on loopback runs inside the sandbox)",
                "api.localhost: left out: loopback names can never be opened (a "
                "service the sandbox needs on loopback runs inside the sandbox)",
                "[::1]: left out: loopback and unspecified addresses can never be opened (a "
                "service the sandbox needs on loopback runs inside the sandbox)",
                "allowUnixSockets ['/var/run/docker.sock']: a local socket never passes the "
                "egress proxy; nothing to import (the sandbox's mounts decide what it can reach)",
                "allowLocalBinding: listening on a local port is the sandbox's own business, "
                "not the egress proxy's; nothing to import",
            ),
        ),
    ),
    "codex legacy full network": (
        "codex",
        'sandbox_mode = "workspace-write"\n[sandbox_workspace_write]\nnetwork_access = true\n',
        Imported(
            STARTER,
            (
                "this config.toml gives the sandbox the full network (sandbox_mode "
                "'workspace-write' with network_access = true): nothing to import. Below is a "
                "starting allowlist: prune it, and learn the rest with report-only and "
                "`egress-proxy propose`",
            ),
        ),
    ),
    "codex legacy full access": (
        "codex",
        'sandbox_mode = "danger-full-access"\n',
        Imported(
            STARTER,
            (
                "this config.toml gives the sandbox the full network (sandbox_mode "
                "'danger-full-access'): nothing to import. Below is a starting allowlist: prune "
                "it, and learn the rest with report-only and `egress-proxy propose`",
            ),
        ),
    ),
    "codex legacy no network": (
        "codex",
        'sandbox_mode = "workspace-write"\n',
        Imported(
            (),
            (
                "this config.toml gives the sandbox no network (sandbox_mode "
                "'workspace-write' without network_access): an empty allowlist",
            ),
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(READ_CASES))
def test_read(case: str) -> None:
    kind, text, expected = READ_CASES[case]
    assert read(kind, text) == expected


REFUSED = {
    "claude settings as sandbox-runtime": (
        "sandbox-runtime",
        '{"permissions": {}}',
        "no network.allowedDomains: not a sandbox-runtime settings file",
    ),
    "allowed not a list": (
        "sandbox-runtime",
        '{"network": {"allowedDomains": "github.com"}}',
        "network.allowedDomains must be a list of domain strings",
    ),
    "not json": ("sandbox-runtime", "{", "line 1, column 2: not valid JSON"),
    "codex without profiles": (
        "codex",
        'model = "o3"\n',
        "no [permissions.NAME.network.domains]: not a Codex config.toml",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused(case: str) -> None:
    kind, text, message = REFUSED[case]
    with pytest.raises(ImportRefused) as info:
        read(kind, text)
    assert str(info.value) == message


def test_the_output_is_an_environment_file_check_accepts(tmp_path: Path) -> None:
    source = tmp_path / "config.toml"
    source.write_text(CODEX)
    imported = subprocess.run(
        [str(EGRESS_PROXY), "import", "--from", "codex", str(source)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (imported.returncode, imported.stderr) == (0, "")
    assert "sk-proj" not in imported.stdout
    assert imported.stdout == (
        f"# Imported from {source} (codex) by `egress-proxy import`.\n"
        "# denied tracker.example: not expressible (the allowlist has no deny entry); check "
        "that no wildcard above allows it\n"
        "network:\n"
        "  allowlist:\n"
        '    - "pypi.org"\n'
        '    - "*.pythonhosted.org"\n'
    )
    env = tmp_path / "env.yaml"
    env.write_text(imported.stdout)
    checked = subprocess.run(
        [str(EGRESS_PROXY), "check", str(env)], capture_output=True, text=True, timeout=60
    )
    assert (checked.returncode, checked.stdout) == (0, f"{env}: ok, 2 allowlist entries\n")


def test_check_names_the_importer_for_a_sandbox_runtime_file(tmp_path: Path) -> None:
    path = tmp_path / "srt-settings.json"
    path.write_text(SANDBOX_RUNTIME)
    result = subprocess.run(
        [str(EGRESS_PROXY), "check", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (
        f"error: {path}:3:5: network.allowedDomains: unknown key (expected: allowlist, "
        "report_only); a sandbox-runtime settings file? `egress-proxy import --from "
        "sandbox-runtime`"
    )


def test_an_empty_import_is_a_deny_all_file_on_purpose() -> None:
    text = as_environment_file(Imported(()), "s.json", "sandbox-runtime")
    assert text.endswith("network:\n  allowlist: []\n")


def test_a_bare_domain_string_is_shorthand_for_an_entry() -> None:
    document = {"network": {"allowlist": ["github.com", "*.npmjs.org", {"domain": "a.example"}]}}
    config = parse(document, "env.yaml", {})
    assert [(e.index, e.pattern, e.kind) for e in config.allowlist] == [
        (0, "github.com", PatternKind.EXACT),
        (1, "*.npmjs.org", PatternKind.WILDCARD),
        (2, "a.example", PatternKind.EXACT),
    ]


def test_a_bad_bare_domain_names_its_entry() -> None:
    with pytest.raises(ConfigError) as info:
        parse({"network": {"allowlist": ["ok.example", "a.*.com", 5]}}, "env.yaml", {})
    assert [str(p) for p in info.value.problems] == [
        "env.yaml: network.allowlist[1].domain: a wildcard may only be a single leading '*.' "
        "label, or '*' alone (got 'a.*.com')",
        "env.yaml: network.allowlist[2]: an entry must be a domain or a mapping with a "
        "'domain' key",
    ]
