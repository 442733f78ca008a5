"""`command`: a credential printed by a program (`op read`, a credential helper), run
without a shell (docs/configuration.md#credentials).

    jira: {command: {argv: ["/usr/local/bin/op", "read", "op://agents/jira"], timeout: 10s}}

The child is run by the shared process runner (`common.process.run_process`, the
one the hook runner runs its hooks with): its own session and process group (and cgroup
where the machine has one), killed whole at the deadline (SIGTERM, a short grace,
SIGKILL), stdout read while it runs and capped, reading stopped at the deadline even
when a grandchild holds the pipe open.

Invariants:
* `argv[0]` is an absolute path: no `PATH` lookup picks another program; no shell.
* A fetch fails when the program exits non-zero, is killed at `timeout`, prints more than
  `MAX_OUTPUT` bytes, or prints nothing; one trailing newline is stripped. Its stderr
  is never shown (it may echo the secret); the message names the program and the exit.
* The child gets the proxy's environment (a secret store's CLI reads its own token from
  it, D203), an empty stdin and `/` as its working directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sandbox_egress.proxy.credentials.base import CacheSettings, CredentialError, Fetched
from sandbox_egress.proxy.credentials.block import Block, Report
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.values.secret import Secret

MAX_OUTPUT = 64 * 1024
DEFAULT_COMMAND_TTL_S = 300.0


@dataclass(frozen=True, slots=True)
class CommandSource:
    argv: tuple[str, ...]
    settings: CacheSettings = CacheSettings()

    def source(self, https: Https) -> CommandSource:
        return self

    def fetch(self) -> Fetched:
        # Imported here: the proxy's start-up does not load the process runner's jails (D162).
        from sandbox_egress.common.process import run_process

        program = self.argv[0]
        # The cache's own deadline is the same `timeout`: the child is killed just before.
        result = run_process(
            self.argv,
            stdin=b"",
            cwd="/",
            env=dict(os.environ),
            timeout=self.settings.timeout * 0.9,
            cap=MAX_OUTPUT,
        )
        if result.spawn_error is not None:
            raise CredentialError(f"cannot run {program}: {result.spawn_error}")
        if result.timed_out:
            raise CredentialError(f"{program} did not finish within its timeout: killed")
        if result.returncode != 0:
            raise CredentialError(f"{program} exited with {result.returncode}")
        if result.stdout_truncated:
            raise CredentialError(f"{program} printed more than {MAX_OUTPUT} bytes")
        try:
            text = result.stdout.decode("utf-8")
        except UnicodeDecodeError:
            raise CredentialError(f"{program} printed something that is not UTF-8") from None
        text = text[:-1] if text.endswith("\n") else text
        if not text:
            raise CredentialError(f"{program} printed nothing")
        return Fetched(Secret(text))


def parse(
    raw: Any, where: str, report: Report, environ: Mapping[str, str] | None
) -> CommandSource | None:
    """`command: {argv: [/abs/program, args...], timeout: 10s, ttl: 15m}`."""
    block = Block.of(raw, where, report, environ)
    if block is None:
        return None
    argv = block.strings("argv", required=True)
    if argv and not argv[0].startswith("/"):
        block.refuse("argv", "argv[0] must be an absolute path (no PATH lookup, no shell)")
    settings = block.settings(ttl=DEFAULT_COMMAND_TTL_S)
    block.unknown()
    return CommandSource(argv, settings) if block.ok else None
