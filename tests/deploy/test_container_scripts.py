"""The container scripts that need no engine: daemon.json, and what .ci/run calls.

scripts/container-engine writes the daemon configuration the engine on these
machines needs (runc, cgroupfs, rlimits the containers can actually set);
test_compose_up.py exercises the rest with a running engine.
"""

from __future__ import annotations

import json
import resource
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "scripts/container-engine"


def write_config(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ENGINE), "config"],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DAEMON_JSON": str(path)},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )


def test_daemon_json_selects_runc_cgroupfs_and_ulimits_within_the_hard_limit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "docker" / "daemon.json"
    done = write_config(path)
    config = json.loads(path.read_text(encoding="utf-8"))
    assert json.loads(done.stdout) == config
    assert config["default-runtime"] == "runc"
    assert config["exec-opts"] == ["native.cgroupdriver=cgroupfs"]
    nofile = config["default-ulimits"]["nofile"]
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    expected_hard = 1048576 if hard == resource.RLIM_INFINITY else hard
    assert nofile == {"Name": "nofile", "Soft": min(expected_hard, 4096), "Hard": expected_hard}
    assert config["labels"] == ["sandbox-egress.managed=true"]


def test_a_daemon_json_written_by_someone_else_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text('{"debug": true}\n', encoding="utf-8")
    done = write_config(path)
    assert path.read_text(encoding="utf-8") == '{"debug": true}\n'
    assert "keeping" in done.stderr


def test_make_test_prepares_the_engine_the_base_image_and_the_wheelhouse() -> None:
    """`make test` alone sets up what the compose test needs (README: a fresh machine needs
    nothing else), after `install` (scripts/wheelhouse uses the venv's pip); .ci/run calls
    `make lint`, `make test-unit` without root's capabilities, then `make test`."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile[makefile.index("\ntest: install\n") :].split("\n\n", 1)[0]
    steps = [
        "sh scripts/install-test-deps",
        "scripts/container-engine start",
        "scripts/base-image",
        "scripts/wheelhouse",
        # The unit selection on two processes, then the rest on two, a file each, then the
        # container tests on one (D690, D700); between the last two, the both_paths suites on the fast path (D720); with PYTEST_ARGS one run; each prints the 25
        # slowest (D643).
        "ifeq ($(strip $(PYTEST_ARGS)),)",
        '$(BIN)/python -m pytest -p no:cacheprovider -n 2 --ignore=tests/e2e -m "$(UNIT_MARKS)"',
        "EGRESS_UNIT_TESTS_DONE=1 $(BIN)/python -m pytest -n 2 --dist loadfile"
        ' -m "not container" --durations=25',
        # The conformance and attack suites again, every proxy on the fast path (D720).
        "E2E_FAST_PATH=1 $(BIN)/python -m pytest -n 2 --dist loadfile"
        ' -m "both_paths and not slow" --durations=10 tests/e2e',
        "$(BIN)/python -m pytest -m container --durations=25",
        "else",
        "$(BIN)/python -m pytest --durations=25 $(PYTEST_ARGS)",
        "endif",
    ]
    lines = [line.strip().lstrip("@") for line in recipe.strip().splitlines()[1:]]
    assert lines == steps
    ci = [
        line.strip()
        for line in (ROOT / ".ci/run").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert ci[ci.index("make lint") :] == [
        "make lint",
        "make install",
        "sh scripts/install-test-deps",
        "setpriv --inh-caps=-all --bounding-set=-all --no-new-privs -- make test-unit",
        "make test",
    ]
    for script in ("container-engine", "base-image", "wheelhouse", "compose-secret"):
        assert (ROOT / "scripts" / script).stat().st_mode & 0o111, script


def test_the_second_run_of_make_test_leaves_out_exactly_the_unit_selection() -> None:
    """tests/conftest.py leaves out the tests of the Makefile's UNIT_MARKS (D690): the marks
    it reads are the ones the Makefile names."""
    from tests.conftest import NOT_UNIT_MARKS

    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    line = next(x for x in makefile.splitlines() if x.startswith("UNIT_MARKS"))
    expression = line.split(":=", 1)[1].strip()
    assert expression == " and ".join(f"not {mark}" for mark in NOT_UNIT_MARKS)
