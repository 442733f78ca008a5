"""The hook runner's error tree.

Library code returns results for everything a hook can do wrong (a hook's
failure is an outcome, see ``model.Outcome``) and raises only for mistakes of
its caller::

    HookRunnerError               base class, never raised itself
    ├── PayloadError              an event payload or tool arguments are malformed
    ├── WorkspaceError            the workspace directory cannot be used
    └── UsageError                a command-line option has an unusable value

Messages never contain environment values or other secrets. Only the
command-line entry points turn these into exit codes.
"""

from __future__ import annotations


class HookRunnerError(Exception):
    """Base class of every error the hook runner raises on purpose."""


class PayloadError(HookRunnerError):
    """The caller passed an event payload or tool arguments of the wrong shape."""


class WorkspaceError(HookRunnerError):
    """The workspace does not exist or is not a directory."""


class UsageError(HookRunnerError):
    """A command-line option has a value that cannot be used."""
