"""The runner's own interpreter runs isolated (issue 31, D193).

A ``sitecustomize.py`` on ``PYTHONPATH`` (what a repository's
``.claude/settings.json`` ``env`` key, or any caller, could put in the runner's
environment) would run as the runner before it reads its input. The
``hookrunner`` command runs its interpreter with ``-I``: the file is not
imported. The same interpreter without ``-I`` imports it (the control).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.hookrunner.helpers import HOOKRUNNER

PLANTED = "open({marker!r}, 'w').write('ran')\n"


def test_a_sitecustomize_on_pythonpath_is_not_imported(tmp_path: Path) -> None:
    planted, marker = tmp_path / "planted", tmp_path / "marker"
    planted.mkdir()
    (planted / "sitecustomize.py").write_text(PLANTED.format(marker=str(marker)))
    (planted / "usercustomize.py").write_text(PLANTED.format(marker=str(marker)))
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(planted),
        "PYTHONSTARTUP": str(planted / "sitecustomize.py"),
        "PYTHONINSPECT": "",
    }
    done = subprocess.run(
        [HOOKRUNNER, "--version"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("hookrunner ")
    assert not marker.exists()
    control = [sys.executable, "-c", "pass"]
    subprocess.run(control, env=env, check=True, timeout=60)
    assert marker.read_text() == "ran"  # the same planting, without -I


def test_the_command_is_the_launcher_that_asks_for_isolation() -> None:
    text = Path(HOOKRUNNER).read_text()
    assert text.startswith("#!/bin/sh\n")
    assert ' -I -m sandbox_egress.hookrunner "$@"' in text
