"""Git over HTTPS (docs/configuration.md#git-over-https): which repositories may be
fetched, which refs pushed.

Pure: `smart_http` recognises a smart-HTTP request by its canonical path, `judge_git`
decides it by the entry's `git` section, `CommandReader` parses a receive-pack command
list (pkt-lines up to the first flush) from the body's first bytes as they arrive
(`read_commands` from a whole body), `judge_push` decides every command of a push, and
`report_status` is git's own answer refusing it (`unpack ok`, one `ng <ref> <reason>` per
ref, inside side-band 1 when the client asked for it), which the pushing `git` prints.

Invariants:
* A push is refused whole: when any command is refused, every ref gets an `ng` line and
  nothing goes upstream (the adapter holds the first bytes until the list is judged, then
  streams the pack on; addons/layers/pushgate.py).
* A command list that is malformed, compressed, over `COMMANDS_LIMIT`, or not ended by a
  flush within the body, is refused; nothing in it is guessed at. The answer depends on
  the body's bytes only, never on how they were split into chunks.
* `fetch` absent: any repository may be fetched; `push` absent: no push at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sandbox_egress.proxy.clauses.rules import Verdict, compile_path
from sandbox_egress.proxy.paths import canonical_path, split_target

Report = Callable[[str, str], None]

COMMANDS_LIMIT = 64 * 1024  # bytes of pkt-lines before the flush that ends the commands
ZERO_IDS = frozenset({"0" * 40, "0" * 64})
_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_PKT_LEN = re.compile(rb"[0-9a-fA-F]{4}")
_UNBOUNDED = "the command list does not end with a flush packet within the bound"
_UNENDED = "the command list does not end with a flush packet"
_SUFFIXES = (
    ("/info/refs", "advertise"),
    ("/git-upload-pack", "rpc"),
    ("/git-receive-pack", "rpc"),
)


@dataclass(frozen=True, slots=True)
class PushItem:
    repo: re.Pattern[str]
    refs: tuple[re.Pattern[str], ...]
    delete: bool = False


@dataclass(frozen=True, slots=True)
class GitPolicy:
    fetch: tuple[re.Pattern[str], ...] | None = None  # None: any repository
    push: tuple[PushItem, ...] = ()


@dataclass(frozen=True, slots=True)
class GitRequest:
    repo: str  # `acme/web` for `/acme/web.git/...`
    service: str  # "git-upload-pack" or "git-receive-pack"
    rpc: bool  # the POST (False: the info/refs advertisement)


@dataclass(frozen=True, slots=True)
class Command:
    old: str
    new: str
    ref: str

    @property
    def deletes(self) -> bool:
        return self.new in ZERO_IDS


@dataclass(frozen=True, slots=True)
class Commands:
    commands: tuple[Command, ...]
    capabilities: frozenset[str]


def smart_http(method: str, target: str) -> GitRequest | None:
    """The smart-HTTP request `target` is, or None (the entry's rules decide it)."""
    raw_path, query = split_target(target)
    path = canonical_path(raw_path)
    if path is None:
        return None
    for suffix, kind in _SUFFIXES:
        if not path.endswith(suffix) or len(path) == len(suffix):
            continue
        repo = path[1 : -len(suffix)].removesuffix(".git")
        if kind == "advertise":
            services = [p[8:] for p in query.split("&") if p.startswith("service=")]
            if method not in ("GET", "HEAD") or len(services) != 1:
                return None
            service = services[0]
        else:
            service = suffix[1:]
            if method != "POST":
                return None
        if service not in ("git-upload-pack", "git-receive-pack"):
            return None
        return GitRequest(repo, service, kind == "rpc")
    return None


def judge_git(policy: GitPolicy, request: GitRequest) -> tuple[Verdict, str, PushItem | None]:
    """(reason, clause, push item whose refs the command list must match)."""
    if request.service == "git-upload-pack":
        if policy.fetch is None or any(p.fullmatch("/" + request.repo) for p in policy.fetch):
            return Verdict.ALLOW, "git.fetch", None
        return Verdict.MISMATCH, "git.fetch", None
    for index, item in enumerate(policy.push):
        if item.repo.fullmatch("/" + request.repo):
            return Verdict.ALLOW, f"git.push[{index}]", item
    return Verdict.PUSH_DENIED, "git.push", None


class CommandReader:
    """Reads a receive-pack command list from the body's first bytes as they arrive.

    `feed` answers None while the list is incomplete, then once for good: the `Commands`
    (the flush read) or what is wrong (malformed, or not complete within
    `COMMANDS_LIMIT` bytes). Parsing resumes where it stopped, so a body fed a byte at a
    time costs what it costs whole. `held` is every byte fed until the answer: at most
    `COMMANDS_LIMIT` plus the last chunk. An empty list is allowed only as git's probe, a
    body of exactly one flush packet (docs/decisions.md D181).
    """

    def __init__(self) -> None:
        self.held = bytearray()
        self._at = 0
        self._commands: list[Command] = []
        self._capabilities: frozenset[str] = frozenset()
        self._answer: Commands | str | None = None

    def feed(self, data: bytes, ended: bool = False) -> Commands | str | None:
        """The answer once `data` (and, with `ended`, the end of the body) is read."""
        if self._answer is None:
            self.held += data
            self._answer = self._read(ended)
        return self._answer

    def _read(self, ended: bool) -> Commands | str | None:
        body = self.held
        while True:
            at = self._at
            if at + 4 > COMMANDS_LIMIT:
                return _UNBOUNDED
            if at + 4 > len(body):
                return _UNENDED if ended else None
            if not _PKT_LEN.fullmatch(body[at : at + 4]):
                return "not a pkt-line"
            size = int(body[at : at + 4], 16)
            if size == 0:
                return self._flushed(at + 4 == len(body), ended)
            if size < 5:
                return "not a pkt-line"
            if at + size > COMMANDS_LIMIT:
                return _UNBOUNDED
            if at + size > len(body):
                return "not a pkt-line" if ended else None
            problem = self._command(bytes(body[at + 4 : at + size]))
            if problem:
                return problem
            self._at = at + size

    def _flushed(self, at_end: bool, ended: bool) -> Commands | str | None:
        if self._commands:
            return Commands(tuple(self._commands), self._capabilities)
        if self._at != 0 or not at_end:
            return "the command list is empty"
        return Commands((), frozenset()) if ended else None  # git's probe: "0000", nothing else

    def _command(self, raw: bytes) -> str:
        try:
            line = raw.decode("ascii").removesuffix("\n")
        except UnicodeDecodeError:
            return "a command is not ASCII"
        if line.startswith("shallow "):
            return ""
        if not self._commands and "\0" in line:
            line, caps = line.split("\0", 1)
            self._capabilities = frozenset(caps.split())
        parts = line.split(" ")
        if len(parts) != 3 or not _ID.fullmatch(parts[0]) or not _ID.fullmatch(parts[1]):
            return "a command is not '<old-id> <new-id> <ref>'"
        if not parts[2].startswith("refs/") or "\0" in parts[2]:
            return "a command names no ref"
        self._commands.append(Command(*parts))
        return ""


def read_commands(body: bytes, ended: bool = True) -> Commands | str | None:
    """The command list at the start of a receive-pack body (the whole body when `ended`;
    None: its first bytes do not decide yet), or what is wrong with it."""
    return CommandReader().feed(body, ended)


def judge_push(item: PushItem, commands: Commands) -> tuple[str, ...]:
    """Why each command is refused ("" when it alone would be allowed)."""
    reasons = []
    for command in commands.commands:
        if not any(p.fullmatch("/" + command.ref) for p in item.refs):
            reasons.append("egress policy: this ref may not be pushed")
        elif command.deletes and not item.delete:
            reasons.append("egress policy: deleting this ref is not allowed")
        else:
            reasons.append("")
    return tuple(reasons)


def judge_pushes(items: Sequence[PushItem], commands: Commands) -> tuple[str, ...]:
    """Every item's verdict on each command, the first refusal kept: a sandbox's push
    item and the node's (docs/configuration.md#sandboxes) must both admit a ref."""
    verdicts = [judge_push(item, commands) for item in items]
    return tuple(next((r for r in per_ref if r), "") for per_ref in zip(*verdicts, strict=True))


def report_status(commands: Commands, reasons: tuple[str, ...]) -> bytes:
    """git's report-status refusing every ref (the allowed ones with the rest)."""
    lines = [pkt(b"unpack ok\n")]
    for command, reason in zip(commands.commands, reasons, strict=True):
        why = reason or "egress policy: refused with the rest of this push"
        lines.append(pkt(f"ng {command.ref} {why}\n".encode()))
    status = b"".join(lines) + b"0000"
    if "side-band-64k" not in commands.capabilities and "side-band" not in commands.capabilities:
        return status
    limit = 65515 if "side-band-64k" in commands.capabilities else 995
    framed = [pkt(b"\x01" + status[i : i + limit]) for i in range(0, len(status), limit)]
    return b"".join(framed) + b"0000"


def pkt(data: bytes) -> bytes:
    return f"{len(data) + 4:04x}".encode() + data


# -- loading -------------------------------------------------------------------------------


def parse_git(raw: Any, where: str, report: Report) -> tuple[bool, GitPolicy | None]:
    """(valid, policy) of the entry's `git` section (shaped by the JSON Schema); the
    policy is None when the section is absent or refused."""
    if raw is None:
        return True, None
    ok = True
    fetch = None
    if "fetch" in raw:
        fetch = _globs(raw["fetch"], f"{where}.fetch", report)
        ok = fetch is not None
    items = []
    for index, item in enumerate(raw.get("push") or ()):
        here = f"{where}.push[{index}]"
        repo = _globs([item.get("repo")], f"{here}.repo", report)
        refs = _globs(item.get("refs"), f"{here}.refs", report)
        if repo is None or refs is None:
            ok = False
            continue
        items.append(PushItem(repo[0], refs, item.get("delete") is True))
    return ok, GitPolicy(fetch, tuple(items)) if ok else None


def _globs(raw: Any, where: str, report: Report) -> tuple[re.Pattern[str], ...] | None:
    if not isinstance(raw, list) or not raw or not all(isinstance(g, str) and g for g in raw):
        report(where, "must be a non-empty list of globs")
        return None
    bad = [
        g for g in raw if g.startswith("/") or any("**" in s and s != "**" for s in g.split("/"))
    ]
    if bad:
        report(
            where, f"a glob has no leading '/' and '**' only as a whole segment (got {bad[0]!r})"
        )
        return None
    return tuple(compile_path("/" + g) for g in raw)
