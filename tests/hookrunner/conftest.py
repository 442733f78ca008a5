"""Fixtures for the hook runner tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hookrunner.gitrepos import make_repos
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


@pytest.fixture
def repos() -> Iterator[tuple[Path, Path]]:
    """(workspace: a clone whose main has diverged from the remote's, the bare remote),
    both the tool user's (tests.hookrunner.gitrepos.make_repos)."""
    top = Path(tempfile.mkdtemp(prefix="hr-gitguard-"))
    try:
        yield make_repos(top)
    finally:
        shutil.rmtree(top)
