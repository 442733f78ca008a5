"""`check` and `import` called in-process (`runtime.cli.main`): the same lines as the console
script's (tests/proxy/test_config_cli.py), measured by coverage."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_egress.proxy.config.lint import warnings
from sandbox_egress.runtime import cli

KEY = "sk-ant-api03-" + "Zx9" * 12


def test_a_literal_credential_is_warned_and_a_reference_is_not(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(
        "environment:\n"
        "  network:\n"
        "    allowlist:\n"
        "      - github.com\n"
        "      - domain: api.example\n"
        "        transform:\n"
        f"          X-Key: {KEY}\n"
        "          X-Ref: Bearer ${TOKEN}\n"
        "          X-Number: 5\n"
    )
    assert [str(w) for w in warnings(path)] == [
        f"{path}:7:11: network.allowlist[1].transform.X-Key: a literal openai-or-anthropic-key "
        "credential: the file is now a secret; put it in the environment or a file and write "
        "${NAME} or ${file:/path}"
    ]


def test_a_literal_credential_in_a_secret_value_is_warned(tmp_path: Path) -> None:
    """The placeholder is not secret; the value it is swapped for is (issue 35)."""
    path = tmp_path / "env.yaml"
    path.write_text(
        "network:\n"
        "  allowlist:\n"
        "    - domain: api.example\n"
        "      secrets:\n"
        "        - placeholder: sk-egress-placeholder\n"
        f"          value: {KEY}\n"
        "        - placeholder: sk-egress-placeholder-2\n"
        "          value: ${TOKEN}\n"
    )
    assert [str(w) for w in warnings(path)] == [
        f"{path}:6:11: network.allowlist[0].secrets[0].value: a literal openai-or-anthropic-key "
        "credential: the file is now a secret; put it in the environment or a file and write "
        "${NAME} or ${file:/path}"
    ]


@pytest.mark.parametrize("text", ["network: [\n", "- a\n"])
def test_no_warning_for_a_file_the_loader_refuses(tmp_path: Path, text: str) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(text)
    assert warnings(path) == [] and warnings(tmp_path / "missing.yaml") == []


def test_check_and_import_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "srt.json"
    source.write_text('{"network": {"allowedDomains": ["github.com"]}}')
    assert cli.main(["check", str(source)]) == 1
    assert "egress-proxy import --from sandbox-runtime" in capsys.readouterr().err
    assert cli.main(["import", "--from", "sandbox-runtime", str(source)]) == 0
    env = tmp_path / "env.yaml"
    env.write_text(capsys.readouterr().out)
    assert cli.main(["check", "--no-secrets", str(env)]) == 0
    assert capsys.readouterr().out == (
        f"{env}: ok, 1 allowlist entries (references not looked up: --no-secrets)\n"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read file"),
        ("{", "line 1, column 2: not valid JSON"),
    ],
)
def test_import_refusals_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    source = tmp_path / "srt.json"
    if content is not None:
        source.write_text(content)
    assert cli.main(["import", "--from", "sandbox-runtime", str(source)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {source}: {message}")
