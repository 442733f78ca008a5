"""The fourth attack round on the exec-time git guard (issue 44, D370-D375).

Real ``code_execution`` tools as ``nobody`` in real bash, in the tool's mount
namespace, with the real git and a real bare repository (file transport, so
``git-receive-pack`` runs through the guarded paths too); the fixtures are
those of issue 31's suite (``make_repos``: the remote has ``main`` and
``keep``, the clone's ``main`` was amended, so pushing it forces). Every
spelling must leave the remote's refs unchanged: ``-q`` (which emptied the old
dry run's porcelain), autocorrected and aliased commands, the agent's own
``pre-push`` hook and receive-pack, ssh or ``ext::`` programs that show the
dry run another remote than the push.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hookrunner.gitrepos import git, refs, tool

GUARD = "git guard (hookrunner)"
QUIET = {
    "-q -f": "git push -q -f origin main",
    "--quiet +main:main": "git push --quiet origin +main:main",
    "-q :keep (delete)": "git push -q origin :keep",
    "-qf bundled": "git push -qf origin main",
    "-fq after the refspec": "git push origin main -fq",
    "--qu --fo abbreviated": "git push --qu --force origin main",
    "-q --force-with-lease": "git push -q --force-with-lease origin main",
    "-q --force-with-lease=main": "git push -q --force-with-lease=main origin main",
    "-q --all -f": "git push -q --all -f origin",
    "-q -o option -f": "git push -q -o ci.skip -f origin main",
    "-q --porcelain -f": "git push -q --porcelain -f origin main",
    "-v -q -f": "git push -v -q -f origin main",
    "-q --delete": "git push -q --delete origin keep",
    "-q -d": "git push -qd origin keep",
    "-q --prune": "git push -q --prune origin 'refs/heads/nothing*:refs/heads/*'",
    "-q --mirror": "git push -q --mirror origin",
    "-q remote.origin.push=+": "git -c remote.origin.push=+refs/heads/main:refs/heads/main push -q",
    "-q remote.origin.mirror": "git -c remote.origin.mirror=true push -q origin",
    "-q push.default=current -f": "git -c push.default=current push -q -f",
    "-q push.default=matching +": "git -c push.default=matching push -q origin +:",
    "-q HEAD refspec": "git push -q origin +HEAD:refs/heads/main",
    "-q --repo=": "git push -q -f --repo=origin",
    "-q after --": "git push -q -f -- origin main",
    "-q dashed git-push": '"$(git --exec-path)"/git-push -q -f origin main',
    "-q --recurse-submodules": "git push -q --recurse-submodules=on-demand -f origin main",
    "-q to a path": 'git push -q -f "$(git remote get-url origin)" main',
}
AUTOCORRECT = {
    "help.autocorrect=1": "git -c help.autocorrect=1 psuh -f origin main",
    "help.autocorrect=immediate -q": "git -c help.autocorrect=immediate psuh -q -f origin main",
    "help.autocorrect in the repository": (
        "git config help.autocorrect immediate; git psuh -q -f origin main"
    ),
    "help.autocorrect from GIT_CONFIG_COUNT": (
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=help.autocorrect GIT_CONFIG_VALUE_0=immediate "
        "git psuh -f origin main"
    ),
    "alias in the repository": "git config alias.p push; git p -q -f origin main",
    "alias of an alias, quiet": "git config alias.p 'push -q'; git config alias.pp p; git pp -f origin main",
    "autocorrected alias": (
        "git config alias.shove push; git -c help.autocorrect=immediate shvoe -q -f origin main"
    ),
}
# The agent's programs that show the dry run a remote where main is new (an empty decoy)
# and the push the real one; and its pre-push hook, which moves the local main to the
# diverged commit once the dry run has resolved it.
LIAR = (
    "git init -q --bare ../decoy.git; "
    'printf \'#!/bin/sh\\nif [ -e "$0.once" ]; then exec git-receive-pack "$@"; fi\\n'
    ': > "$0.once"; exec git-receive-pack "$PWD/../decoy.git"\\n\' > ../liar; '
    "chmod +x ../liar; "
)
SSH_LIAR = (
    "git init -q --bare ../decoy.git; "
    "printf '#!/bin/sh\\nfor a; do last=$a; done\\n"
    'if [ -e "$0.once" ]; then exec sh -c "$last"; fi\\n'
    ': > "$0.once"; exec git-receive-pack "%s/../decoy.git"\\n\' "$PWD" > ../sshliar; '
    "chmod +x ../sshliar; "
)
MOVED = {
    "--receive-pack": LIAR + "git push --receive-pack=../liar origin +main",
    "--exec": LIAR + "git push -q --exec ../liar origin +main",
    "remote.origin.receivepack": (
        LIAR + "git config remote.origin.receivepack ../liar; git push -q origin +main"
    ),
    "-c remote.origin.receivepack": (
        LIAR + "git -c remote.origin.receivepack=$PWD/../liar push -q origin +main"
    ),
    "GIT_SSH_COMMAND": (
        SSH_LIAR + "GIT_SSH_VARIANT=simple GIT_SSH_COMMAND=$PWD/../sshliar "
        'git push -q "ssh://example.test$PWD/../remote.git" +main:main'
    ),
    "core.sshCommand": (
        SSH_LIAR + "git -c ssh.variant=simple -c core.sshCommand=$PWD/../sshliar "
        'push "ssh://example.test$PWD/../remote.git" +main:main'
    ),
    "ext:: allowed by -c": (
        LIAR + "git -c protocol.ext.allow=always push 'ext::../liar %S ../remote.git' +main:main"
    ),
}


# Each spelling, and what must show: QUIET's are refused by the guard itself (its line on
# stderr); the others fail (git's own error, or the guard's) without touching the remote.
SPELLINGS = [
    *(pytest.param(code, True, id=f"quiet: {name}") for name, code in QUIET.items()),
    *(pytest.param(code, False, id=f"autocorrect: {name}") for name, code in AUTOCORRECT.items()),
    *(pytest.param(code, False, id=f"moved: {name}") for name, code in MOVED.items()),
]


@pytest.mark.privileged
@pytest.mark.parametrize(("code", "guard_says"), SPELLINGS)
def test_no_spelling_of_a_forced_push_changes_the_remote(
    repos: tuple[Path, Path], code: str, guard_says: bool
) -> None:
    """Quiet and every other spelling of a forced push is refused; autocorrected and aliased
    pushes are judged; the agent's programs cannot show the dry run another remote."""
    work, remote = repos
    before = refs(remote)
    ok, output, error = tool(work, code)
    assert refs(remote) == before, (output, error)
    if guard_says:
        assert GUARD in error, (ok, output, error)
    else:
        assert not ok, (output, error)


@pytest.mark.privileged
def test_a_pre_push_hook_cannot_move_the_ref_between_the_judgement_and_the_push(
    repos: tuple[Path, Path],
) -> None:
    """The hook (it ran in the old guard's dry run) moves main to the diverged commit once
    the fast-forward it was asked to push has been judged; ``+main`` would then force it."""
    work, remote = repos
    diverged = git(work, "rev-parse", "main")
    code = (
        "git reset -q --hard origin/main; "
        "git -c user.name=n -c user.email=n@example.test commit -q --allow-empty -m ff; "
        f"printf '#!/bin/sh\\ngit update-ref refs/heads/main {diverged}\\n' > .git/hooks/pre-push; "
        "chmod +x .git/hooks/pre-push; git push -q origin +main; git rev-parse main"
    )
    ok, output, error = tool(work, code)
    fast_forward = git(work, "rev-parse", "main")
    assert git(remote, "rev-parse", "main") == fast_forward != diverged, (output, error)
    assert (ok, output) == (True, f"{fast_forward}\n"), error  # the hook never ran


@pytest.mark.privileged
def test_ordinary_pushes_still_behave_like_git(repos: tuple[Path, Path]) -> None:
    """Upstream set by -u, tags followed, a non-forced push that is behind rejected by git
    itself with git's hint, a dry run changes nothing, remote-tracking refs updated."""
    work, remote = repos
    code = (
        "set -e; git checkout -q -b topic origin/keep; echo 2 > f; "
        "git -c user.name=n -c user.email=n@example.test commit -qam two; "
        "git tag -a -m t v1; git push -q --follow-tags -u origin topic; "
        "git rev-parse --abbrev-ref topic@{upstream}; git rev-parse origin/topic; "
        "git push -q --dry-run origin topic:refs/heads/dry; "
        "git push origin main 2>&1 | grep -c '\\[rejected\\]' || true; echo done"
    )
    ok, output, error = tool(work, code)
    topic = git(work, "rev-parse", "topic")
    assert (ok, output) == (True, f"origin/topic\n{topic}\n1\ndone\n"), error
    assert git(remote, "rev-parse", "topic") == topic
    assert git(remote, "rev-parse", "v1^{}") == topic
    assert "refs/heads/dry" not in refs(remote)
