"""The real git is not reachable from the tool user by any path (issue 44, D375).

The tool tries every path it can name: each mount point of
``/proc/self/mountinfo`` that is a file, every file below the guard's mount
points, and ``/proc/<pid>/exe`` and ``/proc/<pid>/fd/*`` of every process it
can see while a real git runs (``git cat-file --batch`` waiting on a pipe).
Each is run as ``PATH push -q -f origin main``: had one been the real git,
the diverged ``main`` would have been forced onto the bare remote. As root's
tool user (``nobody``) and as a runner that is not root (its tool runs as its
own user, in an unprivileged user namespace).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_egress.hookrunner.enforce import toolns
from tests.hookrunner.gitrepos import refs, tool
from tests.hookrunner.test_boundary_without_root import as_non_root_runner
from tests.hookrunner.test_boundary_without_root import guard as non_root_guard
from tests.hookrunner.test_boundary_without_root import top as non_root_top

__all__ = ["non_root_guard", "non_root_top"]

TRY_EVERY_PATH = r"""
sleep 30 | git cat-file --batch > /dev/null &
found=
for _ in $(seq 200); do
  for p in /proc/[0-9]*; do
    tr '\0' ' ' < "$p/cmdline" 2>/dev/null | grep -q '^git .*cat-file' && found=$p
  done
  [ -n "$found" ] && break; sleep 0.05
done
[ -n "$found" ] && echo "a real git runs: $found"
tried=0
try() {
  [ -f "$1" ] || [ -L "$1" ] || return 0
  tried=$((tried + 1))
  "$1" push -q -f origin main > /dev/null 2>&1 && echo "REACHED $1"
  return 0
}
while read -r mount; do
  case $mount in /|/proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue ;; esac
  try "$mount"
  case $mount in
    *hookrunner*) for f in "$mount"/* "$mount"/*/*; do try "$f"; done ;;
  esac
done <<EOF
$(awk '{print $5}' /proc/self/mountinfo)
EOF
for p in /proc/[0-9]*; do
  try "$p/exe"
  for f in "$p"/fd/*; do try "$f"; done
done
echo "tried $tried"
kill %1 2>/dev/null
true
"""


def check(before: str, after: str, output: str) -> None:
    assert after == before, output
    assert "REACHED" not in output, output
    assert "a real git runs" in output, output
    tried = int(output.rsplit("tried ", 1)[1].split()[0])
    assert tried >= 10, output


@pytest.mark.privileged
def test_no_path_leads_the_tool_user_to_the_real_git(repos: tuple[Path, Path]) -> None:
    work, remote = repos
    before = refs(remote)
    ok, output, error = tool(work, TRY_EVERY_PATH)
    check(before, refs(remote), output + error)


@pytest.mark.privileged
def test_no_path_leads_to_the_real_git_without_root(
    non_root_top: Path, non_root_guard: toolns.Guard
) -> None:
    remote = non_root_top / "remote.git"
    before = refs(remote)
    status, output, error = as_non_root_runner(non_root_top, non_root_guard, TRY_EVERY_PATH)
    check(before, refs(remote), output + error)
