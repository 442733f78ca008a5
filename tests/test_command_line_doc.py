"""README.md's command-line block and the commands' `--help` name the same options.

Every `--option` the block writes for a command exists in that command's parser, and every
option of the parser (but `-h`/`--help` and hidden ones) is in the block, so neither drifts.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_egress.hookrunner import cli as hookrunner_cli
from sandbox_egress.runtime import cmdline as proxy_cmdline

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PARSERS = {"egress-proxy": proxy_cmdline.parser, "hookrunner": hookrunner_cli._parser}


def documented() -> dict[tuple[str, str], set[str]]:
    """(program, subcommand or "") -> the options the README's block writes for it."""
    text = (REPO / "README.md").read_text()
    block = text.split("## Command line\n\n```\n", 1)[1].split("```", 1)[0]
    found: dict[tuple[str, str], set[str]] = {}
    key = ("", "")
    for line in block.splitlines():
        line = line.split("#", 1)[0]
        words = line.split()
        if words and words[0] in PARSERS:
            program = words[0]
            bare = re.sub(r"\[[^\]]*\]", "", line).split()[1:]  # without [--option ...]
            command = next((w for w in bare if not w.startswith("-")), "")
            key = (program, command)
            found.setdefault(key, set())
            if command and "[--log-format" in line.split(command)[0]:
                found.setdefault((program, ""), set()).add("--log-format")
            line = line.split(command, 1)[1] if command else line.split(program, 1)[1]
        found[key] |= set(re.findall(r"--[a-z0-9-]+", line))
    return found


def parsed(program: str) -> dict[tuple[str, str], set[str]]:
    parser = PARSERS[program]()
    options: dict[tuple[str, str], set[str]] = {(program, ""): _options(parser)}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                options[(program, name)] = _options(sub)
    return options


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {
        option
        for action in parser._actions
        if action.help is not argparse.SUPPRESS
        and not isinstance(action, argparse._HelpAction)
        and not isinstance(action, argparse._SubParsersAction)
        for option in action.option_strings
    }


@pytest.mark.parametrize("program", sorted(PARSERS))
def test_the_readme_block_names_every_option_and_no_other(program: str) -> None:
    readme = {k: v for k, v in documented().items() if k[0] == program}
    assert readme == parsed(program)


@pytest.mark.parametrize(
    "argv",
    [
        ["egress-proxy", "--help"],
        ["egress-proxy", "run", "--help"],
        ["hookrunner", "--help"],
        ["hookrunner", "exec", "--help"],
    ],
)
def test_help_is_printed_and_shows_defaults(argv: list[str]) -> None:
    result = subprocess.run(
        [str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith(f"usage: {' '.join(argv[:-1])}")


def test_every_proxy_run_option_with_a_value_shows_its_default() -> None:
    result = subprocess.run(
        [str(BIN / "egress-proxy"), "run", "--help"], capture_output=True, text=True, timeout=60
    )
    text = " ".join(result.stdout.split())
    for expected in (
        "proxy address, HOST:PORT (default: 127.0.0.1:8080)",
        "address of /metrics and /healthz, HOST:PORT (default: 127.0.0.1:9464)",
        "(iptables/nftables, docs/operations.md) (default: regular)",
        "(default: certs)",
    ):
        assert expected in text


@pytest.mark.parametrize(
    ("argv", "first_line"),
    [
        (["egress-proxy", "--version"], "egress-proxy "),
        ([sys.executable, "-m", "sandbox_egress", "--version"], "egress-proxy "),
        (["hookrunner", "--version"], "hookrunner "),
        ([sys.executable, "-m", "sandbox_egress.hookrunner", "--version"], "hookrunner "),
        ([sys.executable, "-m", "sandbox_egress.hookrunner.cli", "--version"], "hookrunner "),
    ],
)
def test_version_on_both_commands_and_their_modules(argv: list[str], first_line: str) -> None:
    command = argv if argv[0] == sys.executable else [str(BIN / argv[0]), *argv[1:]]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[0].startswith(first_line)
    assert [line.split(":")[0] for line in lines[1:]] == (
        ["mitmproxy", "Python", "OpenSSL", "Platform"]
        if first_line == "egress-proxy "
        else ["Python", "OpenSSL", "Platform"]
    )


def test_python_m_hookrunner_cli_help_prints_the_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sandbox_egress.hookrunner.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 0
    assert result.stdout.startswith("usage: hookrunner ")


@pytest.mark.parametrize("program", sorted(PARSERS))
def test_every_argument_has_help(program: str) -> None:
    parser = PARSERS[program]()
    parsers = [("", parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers += list(action.choices.items())
    missing = [
        f"{name} {action.option_strings or action.dest}"
        for name, sub in parsers
        for action in sub._actions
        if action.help is None
    ]
    assert missing == []
