"""Every reference to the documentation points at a section that exists.

Code and docs cite the reference sections of `docs/` (and the README) by anchor,
`docs/configuration.md#reason-codes`; Markdown links inside `docs/` use relative
paths. Documents outside the repository are never cited.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A path reference from the repository's root, anywhere: a docs/ page or the README, then
# "#" and the anchor.
PATH_REF = re.compile(r"(?<![\w/.])(docs/[\w-]+\.md|README\.md)#([\w-]+)")
# A Markdown link: [text](file.md#anchor) or [text](#anchor).
LINK_REF = re.compile(r"\]\(((?:\.\./)?[\w/-]*\.md)?#([\w-]+)\)")
# Documents that live outside the repository (the specification and the style guide).
OUTSIDE = re.compile(r"\b" + "SP" + r"EC \d|\b" + "STY" + r"LE\b")


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [ROOT / line for line in out.stdout.splitlines()]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        base = slug(line.lstrip("#"))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


def references(path: Path) -> list[tuple[Path, str]]:
    text = path.read_text(encoding="utf-8")
    refs = [(ROOT / target, anchor) for target, anchor in PATH_REF.findall(text)]
    if path.suffix == ".md":
        for target, anchor in LINK_REF.findall(text):
            refs.append(((path.parent / target).resolve() if target else path, anchor))
    return refs


def test_slug_follows_githubs_rules() -> None:
    assert slug(" The AX Code / Claude Code dialect (`.ax-code/hooks.json`)") == (
        "the-ax-code--claude-code-dialect-ax-codehooksjson"
    )
    assert slug("Report-only rollout (`report_only`)") == "report-only-rollout-report_only"


@pytest.mark.parametrize(
    "path",
    tracked("*.py", "*.md", "*.yaml", "*.yml", "Makefile", "Dockerfile"),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_every_reference_names_a_section_that_exists(path: Path) -> None:
    broken = []
    for target, anchor in references(path):
        if not target.is_file():
            broken.append(f"{target.relative_to(ROOT)} does not exist (#{anchor})")
        elif target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{target.relative_to(ROOT)} has no section #{anchor}")
    assert broken == []


@pytest.mark.parametrize("path", tracked("*.py", "*.md"), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_reference_to_a_document_outside_the_repository(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [line for line in lines if OUTSIDE.search(line)] == []
