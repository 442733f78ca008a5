"""The set-up says what it does (issue 48): `make install`'s long steps print what they
do, about how long they take, and how long they took; and README.md names everything
`make test` installs and changes on the host, read from the scripts that do it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_bytecode_step_says_what_it_does_and_how_long_it_took(tmp_path: Path) -> None:
    """The real recipe of `.venv/.optimized` (compileall over the installed packages), run
    through a venv of links to this one, so the worktree's own stamps are not touched."""
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "bin").symlink_to(ROOT / ".venv" / "bin")
    (venv / ".installed").touch()
    os.utime(venv / ".installed", (2**31, 2**31))  # newer than pyproject.toml
    done = subprocess.run(
        ["make", "--no-print-directory", f"VENV={venv}", f"{venv}/.optimized"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        "make install: compiling the packages' bytecode for python -O (once; 30 s on an idle "
        "machine, minutes on a busy one) ..."
    )
    assert re.fullmatch(r"make install: bytecode compiled in \d+ s", lines[-1]), lines
    assert (venv / ".optimized").exists()


def test_the_dependency_step_says_what_it_does_before_pip_runs() -> None:
    done = subprocess.run(
        ["make", "-n", "-B", "--no-print-directory", "install"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    text = done.stdout
    announce = text.index('echo "make install: installing the project and its dependencies')
    assert announce < text.index("-m pip install --progress-bar off")
    assert "--quiet -e" not in text  # pip names each package it collects
    assert "make install: installed in" in text


def script_packages() -> set[str]:
    """The Debian packages the scripts `make test` runs may install."""
    deps = (ROOT / "scripts/install-test-deps").read_text(encoding="utf-8")
    engine = (ROOT / "scripts/container-engine").read_text(encoding="utf-8")
    found = set(re.findall(r'need="\$need ([a-z0-9.-]+)"', deps))
    found |= set(re.findall(r"missing\+=\(([a-z0-9.-]+)\)", engine))
    return found


def test_the_readme_names_everything_make_test_installs_and_changes() -> None:
    packages = script_packages()
    assert {"iproute2", "redis-server", "docker.io", "mmdebstrap"} <= packages  # read right
    section = README[README.index("### What `make test` installs") :]
    section = section[: section.index("\n## ")]
    for package in packages:
        assert f"`{package}`" in section, package
    for change in (
        "/etc/docker/daemon.json",
        "/run/sandbox-egress-dockerd.pid",
        "/var/log/sandbox-egress-dockerd.log",
        "sandbox-egress-base:trixie-2",
        "build/wheelhouse",
        "/usr/sbin/policy-rc.d",
        "scripts/container-engine stop",
    ):
        assert change in section, change
    base = (ROOT / "scripts/base-image").read_text(encoding="utf-8")
    assert "BASE_REVISION=2" in base and "SUITE=${BASE_SUITE:-trixie}" in base


def test_the_readmes_first_commands_are_the_offline_ones() -> None:
    """The first code block of README.md: `make demo` and `make try` (whose output
    tests/e2e/test_scenarios_e2e.py and test_try_e2e.py assert), each a target of the
    Makefile, before anything that needs the Internet."""
    block = README[
        README.index("```sh") + len("```sh") : README.index("```", README.index("```sh") + 5)
    ]
    commands = [line.split("#")[0].split() for line in block.strip().splitlines()]
    assert [c[:3] for c in commands] == [
        ["sudo", "make", "demo"],
        ["sudo", "make", "try"],
        ["sudo", "make", "try"],
    ]
    assert commands[2][3].startswith("CONFIG=") and commands[2][4].startswith("URL=")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^demo: install$", makefile, re.M)
    assert re.search(r"^try: install$", makefile, re.M)
    assert "python -m demo.tryout $(call quoted,$(CONFIG)) $(call quoted,$(URL))" in makefile
    assert README.index("make try") < README.index("httpbin.org/headers")
