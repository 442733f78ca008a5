"""Shell completion (common/completion.py): the real console scripts, run the way bash's
completion function runs them (`register-python-argcomplete`), offer exactly these words."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_egress.common import completion

BIN = Path(sys.executable).parent
IFS = "\013"  # argcomplete's separator between completions


def completions(line: str, tmp_path: Path) -> list[str]:
    """What the console script named first in `line` offers for the end of `line`."""
    out = tmp_path / "completions"
    env = {
        "PATH": "/usr/bin:/bin",
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_SHELL": "bash",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "COMP_TYPE": "9",  # TAB
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
    }
    script = BIN / line.split()[0]
    done = subprocess.run([script], env=env, capture_output=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, b""), done.stderr
    return out.read_text().split(IFS)


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        pytest.param("egress-proxy ch", ["check "], id="egress-proxy-subcommand"),
        pytest.param(
            "egress-proxy run --met",
            ["--metrics", "--metrics-connections"],
            id="egress-proxy-run-options",
        ),
        pytest.param("egress-proxy check --no", ["--no-secrets "], id="egress-proxy-check-option"),
        pytest.param("hookrunner ex", ["exec "], id="hookrunner-subcommand"),
        pytest.param("hookrunner --log", ["--log-format "], id="hookrunner-option"),
        pytest.param("hookrunner run --full", ["--full-env "], id="hookrunner-run-option"),
    ],
)
def test_the_console_scripts_complete_subcommands_and_options(
    line: str, offered: list[str], tmp_path: Path
) -> None:
    assert completions(line, tmp_path) == offered


def test_every_subcommand_is_offered_after_the_command_name(tmp_path: Path) -> None:
    words = completions("egress-proxy ", tmp_path)
    assert [w for w in words if not w.startswith("-")] == [
        "run",
        "dns",
        "propose",
        "usage",
        "check",
        "import",
        "ca",
        "health",
        "approvals",
    ]


def test_the_readme_line_registers_both_commands_in_bash(tmp_path: Path) -> None:
    """README.md#command-line's line, then bash's own completion call for `egress-proxy ch`."""
    script = (
        'eval "$(register-python-argcomplete egress-proxy hookrunner)"\n'
        "complete -p egress-proxy hookrunner\n"
        'COMP_LINE="egress-proxy ch"; COMP_POINT=${#COMP_LINE}; COMP_TYPE=9\n'
        "COMP_WORDS=(egress-proxy ch); COMP_CWORD=1\n"
        "_python_argcomplete egress-proxy ch egress-proxy\n"
        'printf "[%s]\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script],
        env={"PATH": f"{BIN}:/usr/bin:/bin"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.splitlines() == [
        "complete -o bashdefault -o default -o nospace -F _python_argcomplete egress-proxy",
        "complete -o bashdefault -o default -o nospace -F _python_argcomplete hookrunner",
        "[check ]",
    ]


def test_a_normal_start_does_not_import_argcomplete() -> None:
    program = (
        "import sys\n"
        "from sandbox_egress.common.completion import offer_completions\n"
        "from sandbox_egress.runtime.cmdline import parser\n"
        "offer_completions(parser())\n"
        "print('argcomplete' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout == "False\n"


def test_under_completion_the_parser_is_handed_to_argcomplete(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import argcomplete

    given: list[argparse.ArgumentParser] = []
    monkeypatch.setenv("_ARGCOMPLETE", "1")
    monkeypatch.setattr(argcomplete, "autocomplete", given.append)
    parser = argparse.ArgumentParser(prog="p")
    completion.offer_completions(parser)
    assert given == [parser]
