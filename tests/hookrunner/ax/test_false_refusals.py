"""How often the blocking packs refuse ordinary commands (issues 20 and 31): measured bounds.

Two corpora (provenance in their headers): data/ordinary_commands.txt (issue 20: docs,
scripts, dotfiles and agent lines) and data/agent_commands.txt (issue 31: Claude Code's
commit and PR idioms, everyday workflows, agent exploration). Neither force-pushes nor
touches an env file, so every refusal is a false one. Each command goes through the packs'
own judgement (`judge`, as main.block_force_push / main.protect_env_files), with and
without a run-time boundary below (D196), in a workspace with and without a ``.env``. The
refusals are printed (``pytest -s``); docs/hooks.md reports the figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_egress.hookrunner.ax.packs import judge
from sandbox_egress.hookrunner.ax.packs.main import _reach, _resolver

DATA = Path(__file__).parent / "data"
CORPUS = DATA / "ordinary_commands.txt"
AGENTS = DATA / "agent_commands.txt"
AGENT_SECTION = "agent transcripts"
BOTH = judge.Boundary(git=True, mask=True)
BOUND_ALL = 0.25  # without a boundary: measured 163 / 700 = 0.233
BOUND_AGENT = 0.01  # agent commands with the boundary (issue 31: under 1 %)


def verdict(
    line: str, boundary: judge.Boundary = judge.NONE, workspace: Path | None = None
) -> str | None:
    """Why a blocking pack would refuse this command, or None."""
    texts = [(line, "bash")]
    refusal = judge.force_push(texts, boundary)
    if refusal is not None:
        return refusal
    resolve = _resolver(str(workspace)) if workspace is not None else None
    reach = _reach(str(workspace)) if workspace is not None else None
    hit, why = judge.env_file(texts, boundary, resolve, reach)
    if hit is not None:
        return f"protect-env-files: {hit}"
    return None if why is None else f"protect-env-files: cannot verify: {why}"


def corpus(path: Path = CORPUS, separator: str | None = None) -> dict[str, list[str]]:
    """Sections of a corpus: one command a line, or entries ended by ``%%`` lines."""
    sections: dict[str, list[str]] = {}
    current, entry = "", []
    for line in [*path.read_text(encoding="utf-8").splitlines(), separator or ""]:
        if separator is not None and (line == separator or line.startswith("## source:")):
            if any(part.strip() for part in entry):
                sections.setdefault(current, []).append("\n".join(entry))
            entry = []
        if line.startswith("## source:"):
            current = line.removeprefix("## source:").strip()
        elif separator is None and line.strip() and not line.startswith("#"):
            sections.setdefault(current, []).append(line)
        elif (
            separator is not None and line != separator and not (line.startswith("#") and not entry)
        ):
            entry.append(line)
    return sections


def agent_commands() -> list[str]:
    old = [
        line for name, lines in corpus().items() if name.startswith(AGENT_SECTION) for line in lines
    ]
    new = [entry for lines in corpus(AGENTS, "%%").values() for entry in lines]
    return old + new


@pytest.fixture(params=["no .env", "with .env"])
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    if request.param == "with .env":
        (tmp_path / ".env").write_text("API_KEY=not-a-real-key\n")
        (tmp_path / "src" / ".env.local").write_text("B=2\n")
    return tmp_path


def test_the_corpora_are_large_enough() -> None:
    lines = [line for lines in corpus().values() for line in lines]
    assert len(set(lines)) >= 500
    agents = agent_commands()
    assert len(set(agents)) >= 300
    assert any("git commit -m \"$(cat <<'EOF'" in a for a in agents)
    assert any("gh pr create" in a and "--body \"$(cat <<'EOF'" in a for a in agents)


def test_without_a_boundary_the_rate_stays_under_its_bound() -> None:
    lines = [line for lines in corpus().values() for line in lines]
    refused = [(line, verdict(line)) for line in lines if verdict(line) is not None]
    assert len(refused) / len(lines) <= BOUND_ALL, refused


def test_with_the_boundary_agent_commands_are_refused_under_one_percent(workspace: Path) -> None:
    agents = agent_commands()
    refused = [(a, verdict(a, BOTH, workspace)) for a in agents]
    refused = [(a, why) for a, why in refused if why is not None]
    print(f"\n{workspace.name}: {len(refused)} of {len(agents)} agent commands refused")
    for command, why in refused:
        print(f"  {command!r}: {why}")
    assert len(refused) / len(agents) < BOUND_AGENT, refused


def test_with_the_boundary_no_bare_variable_is_refused(workspace: Path) -> None:
    section = corpus(AGENTS, "%%")[
        "bare variables and substitutions (issue 31: none of these may be refused)"
    ]
    bare = [*section, "cat $F", "cat .$SUFFIX", "echo x > $OUT", "cat $(printf .env)"]
    assert [(c, verdict(c, BOTH, workspace)) for c in bare if verdict(c, BOTH, workspace)] == []


def test_claude_codes_commit_and_pr_idioms_pass_without_a_boundary_too() -> None:
    idioms = [
        a
        for a in agent_commands()
        if "<<'EOF'" in a and a.startswith(("git commit", "gh pr", "git add"))
    ]
    assert len(idioms) >= 4
    assert [(a, verdict(a)) for a in idioms if verdict(a)] == []


def test_every_line_of_the_corpus_is_measured_without_a_boundary_too() -> None:
    """The figure without a boundary (printed, bounded by the issue 20 bound)."""
    agents = agent_commands()
    refused = [(a, verdict(a)) for a in agents if verdict(a) is not None]
    print(f"\nno boundary: {len(refused)} of {len(agents)} agent commands refused")
    for command, why in refused:
        print(f"  {command!r}: {why}")
    assert len(refused) / len(agents) <= 0.06  # measured 18 / 372 = 0.048


def test_no_refusal_is_for_a_line_the_grammar_cannot_read() -> None:
    """Real lines parse: a "cannot verify" refusal here is a reader defect, not caution,
    except for text that only ``eval`` makes into shell (``eval echo \\${X_${1}}``)."""
    unread = [
        line
        for lines in [*corpus().values(), agent_commands()]
        for line in lines
        if "the shell grammar" in (verdict(line) or "") and not line.startswith("eval ")
    ]
    assert unread == []
