"""The packs without a boundary (D436), the only guard there.

``protect-env-files``: bash's bracket expressions that Python's
``fnmatch`` does not know (``[[:lower:]]``, ``[[=e=]]``, ``[[.e.]]``, ``[^x]``) still name a
``.env`` and are refused. ``block-force-push``: an ``eval`` of text only the run time
knows (``eval "$(cat push.sh)"``) cannot be read, so it is refused (allowed with the guard)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox_egress.hookrunner.ax.packs import judge
from sandbox_egress.hookrunner.ax.packs.envfiles import is_env_name
from sandbox_egress.hookrunner.ax.packs.judge import Boundary

PACK = "import sys; from sandbox_egress.hookrunner.ax.packs.main import main; sys.exit(main(sys.argv[1:]))"


def pack(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOOK_EVENT": "PreToolUse",
           "HOOK_TOOL": "Bash", "HOOK_SESSION_ID": "s1"}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-I", "-c", PACK, "protect-env-files"],
        input=json.dumps({"command": command}),
        capture_output=True, text=True, env=env, cwd=cwd, timeout=30, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    "command",
    [
        "cat .[[:lower:]]nv",
        "cat .[[:alpha:]]nv",
        "cat .[[:print:]]nv",
        "cat .[[=e=]]nv",
        "cat .[[.e.]]nv",
        "cat .[^x]nv",
        "cat .e[[:lower:]]v",
        "cat .en[[:alnum:]]",
        "cat .[[:lower:]]*",
        "cat .[[:lower:]]nv.local",
        "cat .[[:lower:]][[:lower:]][[:lower:]]",
    ],
)
def test_a_bracket_glob_that_matches_a_env_is_refused(command: str, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("SECRET=x\n")
    (tmp_path / ".env.local").write_text("SECRET=x\n")
    matched = subprocess.run(
        ["bash", "-c", f"printf '%s\\n' {command.split(' ', 1)[1]}"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert {".env", ".env.local"} & set(matched), matched  # bash does expand it to one
    done = pack(command, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "protect-env-files" in done.stderr


def test_an_ordinary_bracket_glob_is_still_allowed(tmp_path: Path) -> None:
    assert pack("cat [[:lower:]]*.py src/[^_]*.py", tmp_path).returncode == 0
    assert not is_env_name(".[[:digit:]]nv.example")


CLASSES = ["[:lower:]", "[:alpha:]", "[:alnum:]", "[:graph:]", "[:print:]", "=", "."]


@given(position=st.integers(1, 3), klass=st.sampled_from(CLASSES), negate=st.booleans())
def test_any_class_in_any_position_of_env(position: int, klass: str, negate: bool) -> None:
    letter = ".env"[position]
    member = f"[{klass}{letter}{klass}]" if klass in "=." else klass
    bracket = "[^0-9]" if negate else f"[{member}]"  # each matches the letter in bash
    pattern = ".env"[:position] + bracket + ".env"[position + 1 :]
    assert is_env_name(pattern), pattern


EVALS = [
    'X="git push -f origin main"; eval "$X"',
    'eval "$(echo git push -f origin main)"',
    "eval $(cat push.sh)",
    "eval `cat push.sh`",
    'eval "$(cat push.sh)"',
]


@pytest.mark.parametrize("command", EVALS)
def test_eval_of_text_only_the_run_time_knows_is_refused_without_a_boundary(
    command: str,
) -> None:
    refusal = judge.force_push([(command, "bash")], Boundary.parse(""))
    assert refusal is not None and refusal.startswith("block-force-push: cannot verify"), refusal
    assert "eval runs text only the run time knows" in refusal
    # with the git guard below, the run time judges it: no early refusal
    assert judge.force_push([(command, "bash")], Boundary.parse("git,mask")) is None


def test_eval_of_text_on_the_line_is_still_read() -> None:
    assert judge.force_push([("eval echo hi", "bash")], Boundary.parse("")) is None
    refusal = judge.force_push([('eval "git push -f"', "bash")], Boundary.parse(""))
    assert refusal is not None and "rewrites the remote branch's history" in refusal
