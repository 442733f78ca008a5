"""The replayed session's generated content and table (bench/session.py): a repository
git reads whole, wheels whose RECORD holds, an index pip's format, ratios to direct."""

from __future__ import annotations

import hashlib
import random
import subprocess
import zipfile
from pathlib import Path

import pytest

from bench import session
from bench.report import text_grid


def test_the_cache_holds_a_repository_and_a_pep_503_index_of_valid_wheels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session, "COMMITS", 5)
    monkeypatch.setattr(session, "BLOB_BYTES", 4096)
    monkeypatch.setattr(session, "WHEELS", 3)
    cache = session.prepare(tmp_path / "cache")
    repo = cache / "git" / "repo.git"
    log = subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%H %s", "main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert [line.split(" ", 1)[1] for line in log] == [f"commit {n}" for n in range(4, -1, -1)]
    subprocess.run(["git", "-C", str(repo), "fsck", "--strict"], check=True, capture_output=True)
    again = session.prepare(tmp_path / "cache")  # reused, not made again
    assert again == cache and (cache / "ready-v1").exists()
    for name in ("benchpkg00", "benchpkg02"):
        wheel = cache / "wheels" / f"{name}-1.0-py3-none-any.whl"
        page = (cache / "simple" / name / "index.html").read_text()
        assert f"#sha256={hashlib.sha256(wheel.read_bytes()).hexdigest()}" in page
        with zipfile.ZipFile(wheel) as archive:
            record = archive.read(f"{name}-1.0.dist-info/RECORD").decode().splitlines()
            assert len(archive.read(f"{name}/data.bin")) == session.WHEEL_BYTES
            for line in record[:-1]:
                path, digest, size = line.split(",")
                data = archive.read(path)
                assert (digest, int(size)) == (
                    f"sha256={hashlib.sha256(data).hexdigest()}",
                    len(data),
                )


def test_the_same_seed_makes_the_same_wheel() -> None:
    assert session._wheel("p", random.Random(1)) == session._wheel("p", random.Random(1))


def test_the_table_gives_each_part_and_the_total_against_direct() -> None:
    parts = {"git": 1.0, "pip": 0.5, "chat": 2.0, "download": 4.0, "total": 7.5}
    section = {
        "rounds": 1,
        "parts": {
            "git_mib": 100,
            "git_commits": 300,
            "wheels": 40,
            "chats": 300,
            "download_bytes": 1 << 30,
        },
        "seconds": {"direct": parts, "squid": {k: v * 2 for k, v in parts.items()}},
    }
    lines = session.lines(section, text_grid)
    assert lines[0].startswith("Scenario 10: a replayed agent session (median [min-max] of 1)")
    assert lines[-1].split() == [
        "squid",
        "2.00",
        "(2.00×)",
        "1.00",
        "(2.00×)",
        "4.00",
        "(2.00×)",
        "8.00",
        "(2.00×)",
        "15.00",
        "(2.00×)",
    ]


def test_with_rounds_each_part_shows_its_spread() -> None:
    seconds = {"git": 1.0, "pip": 0.5, "chat": 2.0, "download": 4.0, "total": 7.5}
    section = {
        "rounds": 3,
        "parts": {"git_mib": 100, "git_commits": 300, "wheels": 40, "chats": 300,
                  "download_bytes": 1 << 30},
        "seconds": {"direct": seconds},
        "spread": {"direct": {k: [v - 0.25, v + 0.5] for k, v in seconds.items()}},
    }  # fmt: skip
    row = session.lines(section, text_grid)[-1].split()
    assert row[:4] == ["direct", "1.00", "[0.75-1.50]", "(1.00×)"]
    assert row[-3:] == ["7.50", "[7.25-8.00]", "(1.00×)"]
