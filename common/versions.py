"""`--version` of both commands: this project's version and what it runs on (as `mitmdump
--version` prints it), read from the installed metadata, so nothing heavy is imported.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

from sandbox_egress.common.serve import version


def describe(program: str, *, mitmproxy: bool) -> str:
    """Lines for `PROGRAM --version`: version, mitmproxy (the proxy), Python, OpenSSL."""
    lines = [f"{program} {version()}"]
    if mitmproxy:
        lines.append(f"mitmproxy: {metadata.version('mitmproxy')}")  # a dependency
    lines.append(f"Python:    {platform.python_version()}")
    lines.append(f"OpenSSL:   {_openssl()}")
    lines.append(f"Platform:  {platform.platform()}")
    return "\n".join(lines)


def _openssl() -> str:
    """The OpenSSL that does the proxy's TLS: cryptography's (a dependency; mitmproxy's)."""
    from cryptography.hazmat.backends.openssl.backend import backend

    return str(backend.openssl_version_text())


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless it has none (None, False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if default is None or default is False or default in ("", argparse.SUPPRESS):
            return text
        if "%(default)" in text:
            return text
        if not action.option_strings or "(default" in text:
            return text
        return f"{text} (default: %(default)s)"


class _Version(argparse.Action):
    """Builds the text only when asked: reading OpenSSL's version imports cryptography
    (~20 ms), which every other command would pay for nothing (D248)."""

    def __init__(
        self, option_strings: Sequence[str], dest: str, program: str, mitmproxy: bool
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the versions and exit")
        self.program = program
        self.mitmproxy = mitmproxy

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        text = describe(self.program, mitmproxy=self.mitmproxy)
        sys.stdout.write(text + "\n")  # as is: argparse's version action reflows lines
        parser.exit()


def add_version_option(parser: argparse.ArgumentParser, program: str, *, mitmproxy: bool) -> None:
    parser.add_argument("--version", action=_Version, program=program, mitmproxy=mitmproxy)
