"""The packs' entry point, run as a hook's child process: ``main([PACK_NAME])``.

Input is what every legacy hook gets: ``HOOK_EVENT``, ``HOOK_TOOL``,
``HOOK_SESSION_ID`` in the environment, the tool's arguments as JSON on
stdin, the workspace as working directory. Exit status 0 lets the action
continue (stdout is PostToolUse feedback or a Stop notice); 2 blocks, the
reason on stderr; 1 is an internal error, which blocks too for the blocking
packs (their entries set ``blockOnFailure``: a guard that cannot look does
not let things through).

Only the standard library, this package and the shell grammar
(``tree_sitter``, D90) are imported, and each pack imports what it needs when
it runs: the child starts with ``python -I -S`` on
every tool call, so import time is latency the agent waits for.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

FORMAT_TIMEOUT = 50.0
MAX_LOGGED_CHARS = 64 * 1024


class Context(NamedTuple):
    event: str
    tool: str
    session_id: str
    args: Mapping[str, Any]
    workspace: str
    environ: Mapping[str, str]

    @classmethod
    def from_process(cls) -> Context:
        data = sys.stdin.buffer.read()
        args = json.loads(data) if data.strip() else {}
        if not isinstance(args, dict):
            raise ValueError("the arguments on stdin are not a JSON object")
        env = os.environ
        return cls(
            env.get("HOOK_EVENT", ""),
            env.get("HOOK_TOOL", ""),
            env.get("HOOK_SESSION_ID", ""),
            args,
            os.getcwd(),
            env,
        )

    def script(self) -> tuple[str, bool] | None:
        """The code this call runs, and whether it is shell (the first of `scripts`)."""
        scripts = self.scripts()
        return (scripts[0][0], scripts[0][1] == "bash") if scripts else None

    def scripts(self) -> list[tuple[str, str]]:
        """Every text this call may run, with its language (``bash``, ``python``...).

        ``code_execution`` runs ``code``; a ``command`` beside it is judged too, so a
        decoy argument can only make a pack stricter (issue 20).
        """
        found: list[tuple[str, str]] = []
        command = self.args.get("command")
        if isinstance(command, str):
            found.append((command, "bash"))
        code = self.args.get("code")
        if isinstance(code, str):
            language = self.args.get("language", "bash")
            language = language if isinstance(language, str) else "?"
            found.append((code, "bash" if language in ("bash", "sh") else language))
        if self.tool == "code_execution":
            found.sort(key=lambda each: each[0] is not code)  # the code that runs first
        return found

    def state_dir(self) -> str:
        home = self.environ.get("HOME", "/")
        base = self.environ.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")
        return os.path.join(base, "hookrunner")


def _block(message: str) -> int:
    sys.stderr.write(message + "\n")
    return 2


def _boundary(ctx: Context) -> Any:
    """What stands below the pack at run time (``HOOK_BOUNDARY``, set by the runner, D196)."""
    from sandbox_egress.hookrunner.ax.packs.judge import Boundary

    return Boundary.parse(ctx.environ.get("HOOK_BOUNDARY", ""))


def block_force_push(ctx: Context) -> int:
    from sandbox_egress.hookrunner.ax.packs import judge

    refusal = judge.force_push(ctx.scripts(), _boundary(ctx))
    return 0 if refusal is None else _block(refusal)


def protect_env_files(ctx: Context) -> int:
    from sandbox_egress.hookrunner.ax.packs import envfiles, judge

    resolve = _resolver(ctx.workspace)
    hit = envfiles.in_arguments(ctx.args, resolve)
    unverified = None
    if hit is None:
        hit, unverified = judge.env_file(
            ctx.scripts(), _boundary(ctx), resolve, _reach(ctx.workspace)
        )
    if hit is None and unverified is not None:
        return _block(judge.unverified("protect-env-files", unverified))
    if hit is None:
        return 0
    return _block(
        f"protect-env-files: this {ctx.tool or 'tool'} call would read or write {hit!r}. "
        ".env files hold secrets and are off limits; ask the user for the values you need."
    )


MAX_WALK = 20_000  # entries a recursive read's directory is searched through for env files


def _reach(workspace: str) -> Callable[[str], str | None]:
    """The first env file below a directory of the workspace (bounded; links not followed)."""
    from sandbox_egress.hookrunner.ax.packs import envfiles

    def reach(path: str) -> str | None:
        top = os.path.realpath(os.path.join(workspace, path))
        if not os.path.isdir(top):
            return None
        seen = 0
        for directory, subdirectories, files in os.walk(top):
            seen += len(subdirectories) + len(files)
            for name in files:
                if envfiles.is_env_name(name):
                    return os.path.relpath(os.path.join(directory, name), workspace)
            if seen > MAX_WALK:
                return os.path.relpath(top, workspace) + "/ (too large to search for .env files)"
        return None

    return reach


def _resolver(workspace: str) -> Callable[[str], str | None]:
    """Where a path (relative to the workspace) leads once every link is followed."""

    def resolve(path: str) -> str | None:
        try:
            return os.path.realpath(os.path.join(workspace, path))
        except (OSError, ValueError):  # a NUL, a name too long
            return None

    return resolve


def log_bash_commands(ctx: Context) -> int:
    import time

    script = ctx.script()
    if script is None:
        return 0
    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "session_id": ctx.session_id,
        "tool": ctx.tool,
        "cwd": ctx.workspace,
        "command": script[0][:MAX_LOGGED_CHARS],
    }
    if not script[1]:
        record["language"] = str(ctx.args.get("language"))
    directory = ctx.state_dir()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8", errors="replace")
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    fd = os.open(os.path.join(directory, "bash-commands.jsonl"), flags, 0o600)
    try:
        os.write(fd, line)  # one write per line: concurrent sessions do not interleave lines
    finally:
        os.close(fd)
    return 0


def format_after_edit(ctx: Context) -> int:
    from sandbox_egress.hookrunner.ax.packs import formatters, testruns

    notes = []
    run_as = formatters.who_formats(ctx.environ, os.geteuid())
    if isinstance(run_as, str):
        sys.stdout.write(f"[format-after-edit] {run_as}\n")
        return 0
    for name in testruns.edited_paths(ctx.args):
        path = os.path.realpath(os.path.join(ctx.workspace, name))
        inside = path.startswith(ctx.workspace.rstrip("/") + "/")
        if not inside or not os.path.isfile(path):
            continue
        found = formatters.find_formatter(path, ctx.workspace, ctx.environ.get("PATH"), run_as)
        if found is None:
            continue
        formatter, executable = found
        shown = os.path.relpath(path, ctx.workspace)
        before = _read_bytes(path)
        done = formatters.run_formatter(
            formatter.argv(executable, path), ctx.workspace, run_as, FORMAT_TIMEOUT
        )
        if done.returncode != 0:
            error = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
            notes.append(
                f"[format-after-edit] `{formatter.label}` could not format {shown}: "
                f"{error[0][:300] if error else f'exit status {done.returncode}'}"
            )
        elif _read_bytes(path) != before:
            notes.append(
                f"[format-after-edit] Reformatted {shown} with `{formatter.label}`. The file "
                "on disk changed: read it again before editing it."
            )
    if notes:
        sys.stdout.write("\n".join(notes) + "\n")
    return 0


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def require_tests_on_stop(ctx: Context) -> int:
    import hashlib

    from sandbox_egress.hookrunner.ax.packs import testruns

    key = hashlib.sha256(f"{ctx.workspace}\0{ctx.session_id}".encode()).hexdigest()[:32]
    directory = os.path.join(ctx.state_dir(), "require-tests-on-stop")
    path = os.path.join(directory, f"{key}.json")
    try:
        with open(path, encoding="utf-8") as handle:
            state = testruns.State.from_json(json.load(handle))
    except (OSError, ValueError):
        state = testruns.State()
    if ctx.event == "Stop":
        message = testruns.reminder(state, ctx.workspace)
        if message is not None:
            sys.stdout.write(message + "\n")
        return 0
    testruns.record(state, ctx.args)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(state.to_json(), handle)
    os.replace(temporary, path)
    return 0


HANDLERS: dict[str, Callable[[Context], int]] = {
    "format-after-edit": format_after_edit,
    "block-force-push": block_force_push,
    "require-tests-on-stop": require_tests_on_stop,
    "protect-env-files": protect_env_files,
    "log-bash-commands": log_bash_commands,
}


def main(argv: list[str]) -> int:
    name = argv[0] if argv else ""
    handler = HANDLERS.get(name)
    if handler is None:
        sys.stderr.write(f"unknown pack {name!r}\n")
        return 1
    try:
        return handler(Context.from_process())
    except Exception as exc:
        sys.stderr.write(f"{name}: internal error ({type(exc).__name__}: {exc}); nothing checked\n")
        return 1
