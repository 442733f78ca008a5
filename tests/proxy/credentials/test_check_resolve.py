"""`egress-proxy check` with credentials (runtime/cli.py, proxy/credentials/probe.py):
shapes checked without fetching; `--resolve` fetches each credential once and reports it
by name, ok or failed, never with a value."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_egress.runtime import cli

CONFIG = """\
credentials:
  good: {file: %(good)s}
  missing: {file: %(missing)s}
  printed: {command: {argv: ["/bin/sh", "-c", "printf 'cmd-s3cret-value'"]}}
  failing: {command: {argv: ["/bin/sh", "-c", "echo cmd-s3cret-leak >&2; exit 4"]}}
network:
  allowlist:
    - domain: api.example.com
      credential: {name: good, as: bearer}
"""


def write(tmp_path: Path) -> Path:
    good = tmp_path / "good"
    good.write_text("file-s3cret-value\n")
    path = tmp_path / "env.yaml"
    path.write_text(CONFIG % {"good": good, "missing": tmp_path / "absent"})
    return path


def test_check_validates_shapes_without_fetching(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["check", str(write(tmp_path))]) == 0  # the missing file is not read
    assert "ok, 1 allowlist entries" in capsys.readouterr().out


def test_check_resolve_reports_each_credential_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["check", "--resolve", str(write(tmp_path))]) == 1
    out, err = capsys.readouterr()
    assert "credential good: ok" in out and "credential printed: ok" in out
    assert f"credential missing: failed: cannot read {tmp_path / 'absent'}" in err
    assert "credential failing: failed: /bin/sh exited with 4" in err
    assert "s3cret" not in out + err


def test_check_refuses_a_bad_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(
        "credentials:\n  c: {command: {argv: [op, read]}}\nnetwork:\n  allowlist: [a.example]\n"
    )
    assert cli.main(["check", str(path)]) == 1
    assert "credentials.c.command.argv: argv[0] must be an absolute path" in capsys.readouterr().err


def test_resolve_cannot_go_with_no_secrets(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        cli.main(["check", "--resolve", "--no-secrets", str(write(tmp_path))])
