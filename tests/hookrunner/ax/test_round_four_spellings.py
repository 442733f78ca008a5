"""The fourth round's spellings the strict packs could not read (issue 44, D383).

Without a boundary below them (no namespace: ``fire`` cannot wrap the command, D382)
the packs are the only guard, so each of these is refused: a script fed from a
process substitution or ``/dev/stdin`` (``source``, ``.``, ``bash FILE``,
``BASH_ENV``, ``--rcfile``), commands git or bash carry in a variable or an option
(``GIT_EDITOR``, ``GIT_SEQUENCE_EDITOR``, ``rebase --exec``, ``PROMPT_COMMAND``), an
array subscript bash evaluates in ``[[ ... -eq ... ]]``, and a here-document that ends
at a line continued into its delimiter (``EO\\⏎F``). With the boundary below, what is
written out is still refused (the pack sees it) and what only the run time knows is
left to the boundary. Each case is checked against real bash: the carried command runs.
"""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.hookrunner.ax.packs import judge

BOTH = judge.Boundary(git=True, mask=True)
PUSH = "git push -f origin main"
READ = "cat .env"

# (name, template): {cmd} is the carried command; only the run time can read those marked.
FED = {
    "source <(...)": "source <(printf '%s\\n' '{cmd}')",
    ". <(...)": ". <(echo '{cmd}')",
    "bash <(...)": "bash <(echo '{cmd}')",
    ". /dev/stdin, piped": "printf '%s\\n' '{cmd}' | . /dev/stdin",
    "bash /dev/stdin, piped": "printf '%s\\n' '{cmd}' | bash /dev/stdin",
    "sh /dev/fd/0, piped": "printf '%s\\n' '{cmd}' | sh /dev/fd/0",
    "BASH_ENV=/dev/stdin, piped": "printf '%s\\n' '{cmd}' | BASH_ENV=/dev/stdin bash -c :",
    "BASH_ENV=$F": "F=/dev/stdin; echo '{cmd}' | BASH_ENV=$F bash -c :",
    "--rcfile <(...)": "bash --rcfile <(echo '{cmd}') -i </dev/null",
    "--init-file <(...)": "bash --init-file <(echo '{cmd}') -i </dev/null",
}
WRITTEN = {
    "source /dev/stdin, echo piped": "echo '{cmd}' | source /dev/stdin",
    "bash /dev/stdin, echo piped": "echo '{cmd}' | bash /dev/stdin",
    "sh /dev/fd/0, echo piped": "echo '{cmd}' | sh /dev/fd/0",
    "BASH_ENV=/dev/stdin, echo piped": "echo '{cmd}' | BASH_ENV=/dev/stdin bash -c :",
    "source /dev/stdin, here-string": "source /dev/stdin <<< '{cmd}'",
    "BASH_ENV=/dev/stdin, here-string": "BASH_ENV=/dev/stdin bash -c : <<< '{cmd}'",
    "--rcfile /dev/stdin, here-string": "bash --rcfile /dev/stdin -i <<< '{cmd}'",
    "GIT_EDITOR": "GIT_EDITOR='{cmd}; true' git -C r commit -q --amend --allow-empty",
    "GIT_SEQUENCE_EDITOR": "GIT_SEQUENCE_EDITOR='{cmd}; true' git -C r rebase -q -i HEAD",
    "EDITOR exported": "export EDITOR='{cmd}; true'; git -C r commit -q --amend --allow-empty",
    "rebase --exec": "git -C r rebase -q --exec '{cmd}' HEAD~1",
    "rebase -x": "git -C r rebase -q -x '{cmd}' HEAD~1",
    "rebase --exec=": "git -C r rebase -q --exec='{cmd}' HEAD~1",
    "PROMPT_COMMAND": "PROMPT_COMMAND='{cmd}' bash -i </dev/null",
    "PROMPT_COMMAND exported": "export PROMPT_COMMAND='{cmd}'; bash -i </dev/null",
    "[[ subscript ]]": "[[ 'a[$({cmd})]' -eq 0 ]]",
    "[[ subscript, two words ]]": "[[ 1 -lt 'b[$({cmd})]' ]]",
    "here-document EO\\⏎F": "cat <<EOF\nEO\\\nF\n{cmd}\nEOF",
    "here-document <<- EO\\⏎F": "cat <<-EOF\n\tEO\\\nF\n{cmd}\nEOF",
}


def refusal(text: str, boundary: judge.Boundary = judge.NONE) -> str | None:
    texts = [(text, "bash")]
    pushed = judge.force_push(texts, boundary)
    if pushed is not None:
        return pushed
    hit, why = judge.env_file(texts, boundary)
    return hit or why


def runs_in_bash(template: str, tmp_path_factory: pytest.TempPathFactory) -> bool:
    """Whether bash runs the carried command (a marker command in its place)."""
    top = tmp_path_factory.mktemp("bash")
    marker = top / "ran"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(top), "TERM": "dumb", "GIT_CONFIG_NOSYSTEM": "1"}
    repo = top / "r"
    for args in (
        ["init", "-q", str(repo)],
        ["-C", str(repo), "-c", "user.email=a@b.test", "-c", "user.name=a", "commit", "-q",
         "--allow-empty", "-m", "1"],
        ["-C", str(repo), "-c", "user.email=a@b.test", "-c", "user.name=a", "commit", "-q",
         "--allow-empty", "-m", "2"],
    ):  # fmt: skip
        subprocess.run(["git", *args], check=True, env=env, capture_output=True)
    env |= {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b.test"}
    env |= {"GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b.test"}
    text = template.format(cmd=f"touch {marker}")
    subprocess.run(["bash", "-c", text], cwd=top, env=env, capture_output=True, timeout=60)
    return marker.exists()


@pytest.mark.parametrize("name", sorted({**FED, **WRITTEN}))
def test_bash_runs_the_carried_command(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    assert runs_in_bash({**FED, **WRITTEN}[name], tmp_path_factory)


@pytest.mark.parametrize("cmd", [PUSH, READ])
@pytest.mark.parametrize("name", sorted({**FED, **WRITTEN}))
def test_without_a_boundary_every_carrier_is_refused(name: str, cmd: str) -> None:
    text = {**FED, **WRITTEN}[name].format(cmd=cmd)
    assert refusal(text) is not None, text


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_with_the_boundary_what_is_written_out_is_still_refused(name: str) -> None:
    text = WRITTEN[name].format(cmd=PUSH)
    assert refusal(text, BOTH) is not None, text


@pytest.mark.parametrize("name", sorted(FED))
def test_with_the_boundary_what_only_the_run_time_knows_is_left_to_it(name: str) -> None:
    assert refusal(FED[name].format(cmd=PUSH), BOTH) is None


@pytest.mark.parametrize(
    "text",
    [
        "GIT_EDITOR=true git rebase --continue",
        "GIT_SEQUENCE_EDITOR=: git rebase -i --autosquash main",
        "GIT_PAGER=cat git log -3",
        "git rebase --exec 'make test' main",
        "source .venv/bin/activate && pytest -q",
        ". ./scripts/env.sh",
        "diff <(sort a.txt) <(sort b.txt)",
        '[[ -n "$CI" ]] && echo ci',
        "[[ $(git rev-parse --abbrev-ref HEAD) == main ]] && echo on-main",
        "cat <<'EOF' > notes.md\nline one \\\nline two\nEOF",
        "cat <<'EOF'\nEO\\\nF\ngit push -f origin main\nEOF",  # quoted: bash joins no line
    ],
)
def test_ordinary_uses_of_the_same_features_are_not_refused(text: str) -> None:
    assert refusal(text) is None
    assert refusal(text, BOTH) is None


@settings(max_examples=40, deadline=None)
@given(
    delimiter=st.text(alphabet="ABCDEFGHXYZ_", min_size=2, max_size=8),
    cut=st.integers(min_value=1, max_value=7),
    tabs=st.booleans(),
    program=st.sampled_from(["cat", "true", "python3 -", ": >/dev/null"]),
)
def test_a_here_document_ended_by_a_continued_line_is_refused(
    delimiter: str, cut: int, tabs: bool, program: str
) -> None:
    cut = min(cut, len(delimiter) - 1)
    start = "<<-" if tabs else "<<"
    ending = ("\t" if tabs else "") + delimiter[:cut] + "\\\n" + delimiter[cut:]
    text = f"{program} {start}{delimiter}\n{ending}\n{PUSH}\n{delimiter}\n"
    ran = subprocess.run(
        ["bash", "-c", text.replace(PUSH, "echo RAN >&2")], capture_output=True, text=True
    )
    assert "RAN" in ran.stderr  # bash ends the here-document there and runs the push
    assert refusal(text, BOTH) is not None
