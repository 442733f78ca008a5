"""The distribution: what `pip install` users get (pyproject.toml, docs/decisions.md D139).

* `config/default.yaml` ships as package data (`runtime/default.yaml`, the same bytes), so
  `egress-proxy run` and `check` without a file find it;
* metadata carries classifiers and project URLs;
* (slow) the built wheel, installed into a clean virtualenv, runs both commands.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sandbox_egress.runtime import cmdline

REPO = Path(__file__).resolve().parents[1]


def test_the_packaged_default_is_config_default_yaml() -> None:
    packaged = REPO / "runtime" / "default.yaml"
    assert packaged.read_bytes() == (REPO / "config" / "default.yaml").read_bytes()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    data = project["tool"]["setuptools"]["package-data"]
    assert "default.yaml" in data["sandbox_egress.runtime"]


def test_run_and_check_without_a_file_use_the_packaged_default() -> None:
    parser = cmdline.parser()
    default = str(REPO / "runtime" / "default.yaml")
    assert parser.parse_args(["run"]).config == default
    assert parser.parse_args(["check"]).file == default


def test_metadata_has_classifiers_and_urls() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "Topic :: Internet :: Proxy Servers" in project["classifiers"]
    assert "Typing :: Typed" in project["classifiers"]
    assert set(project["urls"]) == {"Homepage", "Documentation", "Changelog"}


@pytest.mark.slow
def test_the_wheel_installs_into_a_clean_virtualenv_and_runs(tmp_path: Path) -> None:
    """Built from this tree, installed with its dependencies (the configured index), run
    from outside the checkout: nothing of the repository is on the path."""
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
        check=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("sandbox_egress-*.whl")
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(wheel)], check=True, timeout=900
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(venv / "bin" / argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=env,
        )

    version = run("egress-proxy", "--version")
    assert (version.returncode, version.stdout.splitlines()[0]) == (0, "egress-proxy 0.1.0")
    checked = run("egress-proxy", "check", "--no-secrets")
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert (checked.returncode, checked.stderr) == (0, "")
    assert checked.stdout == (
        f"{site / 'sandbox_egress' / 'runtime' / 'default.yaml'}: ok, 5 allowlist entries "
        "(references not looked up: --no-secrets)\n"
    )
    hooks = run("hookrunner", "--version")
    assert (hooks.returncode, hooks.stdout.splitlines()[0]) == (0, "hookrunner 0.1.0")
    # One top-level name (D140): the generic names of the repository's folders stay out.
    record = next(site.glob("sandbox_egress-*.dist-info")) / "RECORD"
    lines = record.read_text().splitlines()
    tops = {line.split("/")[0] for line in lines if not line.startswith("../")}  # bin/ scripts
    assert {t for t in tops if not t.startswith("sandbox_egress-")} == {"sandbox_egress"}
    for name in ("proxy", "addons", "common", "hookrunner", "runtime"):
        probe = run("python", "-c", f"import {name}")
        assert (probe.returncode, probe.stderr.splitlines()[-1]) == (
            1,
            f"ModuleNotFoundError: No module named '{name}'",
        )
    module = run("python", "-m", "sandbox_egress", "--version")
    assert (module.returncode, module.stdout.splitlines()[0]) == (0, "egress-proxy 0.1.0")
