"""How often the blocking packs refuse ordinary commands (issue 20): a measured bound.

The corpus (data/ordinary_commands.txt, provenance in its header) holds real
shell lines that neither force-push nor touch an env file, so every refusal is
a false one. Each line goes through the same judgement the packs make
(`verdict`, as main.block_force_push / main.protect_env_files without a
workspace). The bounds are the rates measured when the corpus was written, with
a little room; docs/hooks.md reports them. Nearly all refusals come from D49: a
word the shell expands (``"$FILE"``, ``$1``) could be ``.env``.
"""

from __future__ import annotations

from pathlib import Path

from sandbox_egress.hookrunner.ax.packs import envfiles, git, inline
from sandbox_egress.hookrunner.ax.packs.commands import read_script

CORPUS = Path(__file__).parent / "data" / "ordinary_commands.txt"
AGENT_SECTION = "agent transcripts"
BOUND_ALL = 0.25  # measured 163 / 700 = 0.233
BOUND_AGENT = 0.05  # measured 2 / 112 = 0.018


def verdict(line: str) -> str | None:
    """Why a blocking pack would refuse this line, or None."""
    script = read_script(line)
    push = git.push_in_commands(script.commands)
    if push is not None:
        return f"block-force-push: {push.spelling}"
    hit = envfiles.in_commands(script.commands)
    if hit is not None:
        return f"protect-env-files: {hit}"
    for language, code in script.codes:
        if git.force_push_in_code(code) or envfiles.in_code(code):
            return f"{language} code"
    if not script.complete:
        return "cannot verify: " + "; ".join(script.problems)
    for language, code in script.codes:
        starts = inline.starts_programs(language, code)
        if starts is not None:
            return f"cannot verify: {language} code uses {starts}"
    return None


def corpus() -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = ""
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        if line.startswith("## source:"):
            current = line.removeprefix("## source:").strip()
        elif line.strip() and not line.startswith("#"):
            sections.setdefault(current, []).append(line)
    return sections


def test_the_corpus_is_large_enough() -> None:
    lines = [line for lines in corpus().values() for line in lines]
    assert len(lines) >= 500
    assert len(set(lines)) >= 500


def test_the_false_refusal_rate_stays_under_its_bound() -> None:
    sections = corpus()
    lines = [line for lines in sections.values() for line in lines]
    refused = [(line, verdict(line)) for line in lines if verdict(line) is not None]
    assert len(refused) / len(lines) <= BOUND_ALL, refused
    agent = [
        line for name, lines in sections.items() if name.startswith(AGENT_SECTION) for line in lines
    ]
    agent_refused = [line for line in agent if verdict(line) is not None]
    assert len(agent) >= 100
    assert len(agent_refused) / len(agent) <= BOUND_AGENT, agent_refused


def test_no_refusal_is_for_a_line_the_grammar_cannot_read() -> None:
    """Real lines parse: a "cannot verify" refusal here is a reader defect, not caution,
    except for text that only ``eval`` makes into shell (``eval echo \\${X_${1}}``)."""
    unread = [
        line
        for lines in corpus().values()
        for line in lines
        if (verdict(line) or "").startswith("cannot verify: the shell grammar")
        and not line.startswith("eval ")
    ]
    assert unread == []
