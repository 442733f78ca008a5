"""Shell completion of `egress-proxy` and `hookrunner` (README.md#command-line), by argcomplete.

The shell's completion function runs the command itself with `_ARGCOMPLETE` in its
environment (`eval "$(register-python-argcomplete egress-proxy hookrunner)"`); the command
then prints the subcommands and options that complete the line being typed and exits.

Invariant: a normal start pays nothing: without `_ARGCOMPLETE`, argcomplete is not even
imported.
"""

from __future__ import annotations

import argparse
import os


def offer_completions(parser: argparse.ArgumentParser) -> None:
    """Under the shell's completion, print the completions of its line and exit."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    argcomplete.autocomplete(parser)
