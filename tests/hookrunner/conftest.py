"""Fixtures for the hook runner tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hookrunner.helpers import Env
from tests.hookrunner.tls_support import Pki, make_pki


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), "trusted")


@pytest.fixture(scope="session")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("other-pki"), "untrusted")
