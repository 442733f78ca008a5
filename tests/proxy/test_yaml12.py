"""Configuration files read with YAML 1.2's plain scalars (D226): `no` is a string."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_egress.proxy.config.loader import load
from sandbox_egress.proxy.config.positions import compose

SCALARS = [
    # (plain scalar, what YAML 1.2's core schema makes of it)
    ("no", "no"),
    ("yes", "yes"),
    ("Off", "Off"),
    ("on", "on"),
    ("y", "y"),
    ("true", True),
    ("False", False),
    ("TRUE", True),
    ("22:30", "22:30"),  # YAML 1.1: 1350
    ("1:2.5", "1:2.5"),
    ("2026-12-04", "2026-12-04"),  # YAML 1.1: a date
    ("443", 443),
    ("-7", -7),
    ("0x10", 16),
    ("1.5", 1.5),
    ("~", None),
    ("null", None),
]


@pytest.mark.parametrize(("text", "value"), SCALARS, ids=[s[0] for s in SCALARS])
def test_plain_scalars_follow_yaml_1_2(text: str, value: object) -> None:
    document, _ = compose(f"key: {text}\n")
    assert document == {"key": value}


def test_a_domain_called_no_is_a_host_name(tmp_path: Path) -> None:
    """YAML 1.1 read `domain: no` as false: "required, a non-empty string"."""
    config = tmp_path / "env.yaml"
    config.write_text("network:\n  allowlist:\n    - domain: no\n    - domain: on.example\n")
    assert [e.pattern for e in load(config, {}).allowlist] == ["no", "on.example"]
