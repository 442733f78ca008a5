"""`--version` text and the help formatter both commands use (common/versions.py)."""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys

import pytest

from sandbox_egress.common.versions import DefaultsHelpFormatter, add_version_option, describe


def test_describe_names_what_the_program_runs_on() -> None:
    proxy = describe("egress-proxy", mitmproxy=True).splitlines()
    hooks = describe("hookrunner", mitmproxy=False).splitlines()
    assert proxy[0].startswith("egress-proxy ") and hooks[0].startswith("hookrunner ")
    assert [line.split(":")[0] for line in proxy[1:]] == [
        "mitmproxy",
        "Python",
        "OpenSSL",
        "Platform",
    ]
    assert hooks[1:] == proxy[2:]
    assert proxy[2] == f"Python:    {platform.python_version()}"
    assert proxy[3].startswith("OpenSSL:   OpenSSL ")


def test_the_version_option_prints_the_lines_as_they_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser(prog="x")
    add_version_option(parser, "x", mitmproxy=False)
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == describe("x", mitmproxy=False) + "\n"


def test_help_shows_a_default_only_where_there_is_one() -> None:
    parser = argparse.ArgumentParser(prog="x", formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--listen", default="127.0.0.1:8080", help="address")
    parser.add_argument("--count", type=int, default=0, help="how many")
    parser.add_argument("--ca-file", default=None, help="a CA")
    parser.add_argument("--flag", action="store_true", help="a switch")
    parser.add_argument("--id", default="", help="an id")
    parser.add_argument("--said", default="a", help="already says it (default: a)")
    parser.add_argument("--templated", default="b", help="b is %(default)s")
    parser.add_argument("file", nargs="?", default="f", help="a file")
    text = " ".join(parser.format_help().split())
    assert "address (default: 127.0.0.1:8080)" in text
    assert "how many (default: 0)" in text
    assert "a CA --flag" in text and "a switch --id" in text and "an id --said" in text
    assert "already says it (default: a) --templated" in text
    assert text.endswith("b is b") and "file a file options:" in text  # a positional: none


def test_building_the_option_imports_nothing_heavy() -> None:
    """The text is built on --version only: a parser that is built and used otherwise never
    imports cryptography (~20 ms of every hook call, D248). In a fresh interpreter, since
    this one may have imported it already."""
    code = (
        "import argparse, sys\n"
        "from sandbox_egress.common.versions import add_version_option\n"
        "parser = argparse.ArgumentParser(prog='x')\n"
        "add_version_option(parser, 'x', mitmproxy=True)\n"
        "parser.parse_args([])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'cryptography'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
