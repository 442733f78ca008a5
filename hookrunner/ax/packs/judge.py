"""The blocking packs' verdicts on a tool call's texts, with or without a boundary below (pure).

``block-force-push`` and ``protect-env-files`` refuse what they SEE (a force
push, a mirror, a deletion, an env file) in every case. What they merely
cannot rule out (a word only the run time knows, a shell reading a pipe,
inline code that starts programs, git configured from a variable) is refused
only when nothing stands below the pack at run time (D196): the runner says
what stands below in ``HOOK_BOUNDARY`` (`Boundary`): ``git`` (the exec-time
git guard) and/or ``mask`` (the ``.env`` mask). Text the grammar cannot read
at all stays a refusal either way (D91).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from sandbox_egress.hookrunner.ax.packs import envfiles, git, inline
from sandbox_egress.hookrunner.ax.packs.commands import read_script

Texts = Sequence[tuple[str, str]]  # (text, language): what a tool call may run


class Boundary(NamedTuple):
    git: bool = False  # every git the tool can run is the runner's guard
    mask: bool = False  # every .env of the workspace is masked for the tool

    @classmethod
    def parse(cls, text: str) -> Boundary:
        """``HOOK_BOUNDARY``: comma-separated layers, unknown ones ignored."""
        layers = {part.strip() for part in text.split(",")}
        return cls(git="git" in layers, mask="mask" in layers)


NONE = Boundary()


def unverified(pack: str, what: str) -> str:
    return (
        f"{pack}: cannot verify this command ({what}), so it is refused. Run the commands "
        "plainly, one per line, with their arguments written out."
    )


def forced(spelling: str) -> str:
    return (
        f"block-force-push: `{spelling}` rewrites the remote branch's history and is blocked. "
        "Push without force (rebase or merge first), or ask a human to do it."
    )


def _codes(text: str, language: str) -> tuple[list[tuple[str, str]], object]:
    if language != "bash":
        return [(language, text)], None
    script = read_script(text)
    return list(script.codes), script


def _unread(script: object, trusted: bool) -> str | None:
    """The problems a refusal names: all of them, or with a boundary the grammar's only."""
    problems = getattr(script, "problems", ())
    opaque = set(getattr(script, "opaque", ())) if trusted else set()
    left = [p for p in problems if p not in opaque]
    return "; ".join(left) if left else None


def force_push(texts: Texts, boundary: Boundary = NONE) -> str | None:
    """Why ``block-force-push`` refuses these texts (the message), or None."""
    for text, language in texts:
        codes, script = _codes(text, language)
        if script is not None:
            push = git.push_in_commands(script.commands)  # type: ignore[attr-defined]
            if push is not None and push.seen:
                return forced(push.spelling)
            if push is not None and not boundary.git:
                return (
                    f"block-force-push: `{push.spelling}` is only known when the shell runs "
                    "it, so whether this push forces cannot be checked. Write the arguments out."
                )
        for _language, code in codes:
            found = git.force_push_in_code(code)
            if found is not None:
                return forced(found)
        problems = _unread(script, boundary.git) if script is not None else None
        if problems is not None:
            return unverified("block-force-push", problems)
        for code_language, code in codes if not boundary.git else ():
            starts = inline.starts_programs(code_language, code)
            if starts is not None:
                return unverified("block-force-push", f"{code_language} code uses `{starts}`")
    return None


def env_file(
    texts: Texts,
    boundary: Boundary = NONE,
    resolve: envfiles.Resolve | None = None,
    reach: Callable[[str], str | None] | None = None,
) -> tuple[str | None, str | None]:
    """(the env file these texts read or write, why they cannot be verified): at most one."""
    why = None
    for text, language in texts:
        codes, script = _codes(text, language)
        hit = None
        if script is not None:
            commands = script.commands  # type: ignore[attr-defined]
            # with the mask, a directory read (grep -r) reads masked files: no refusal
            hit = envfiles.in_commands(
                commands, resolve, None if boundary.mask else reach, unseen=not boundary.mask
            )
            why = why or _unread(script, boundary.mask)
        for code_language, code in codes:
            hit = hit or envfiles.in_code(code)
            starts = None if boundary.mask else inline.starts_programs(code_language, code)
            if starts is not None:
                why = why or f"{code_language} code uses `{starts}`"
        if hit is not None:
            return hit, None
    return None, why
