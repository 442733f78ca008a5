"""Package tools through the proxy: pip, git and npm, against a static index, a git
repository and an npm registry that nginx serves (testbed/registries.py).

CA recipes (README): pip reads `PIP_CERT`, git `GIT_SSL_CAINFO`, npm its `cafile`
setting. Each tool sends its own credential (basic auth in the index URL, an extra
header, an auth token); the upstream must see the proxy's, and only it, on every request.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import registries
from tests.e2e.clients.conftest import BASE_URL, HTTPS_PORT, Clients
from tests.e2e.clients.expect import assert_every_request_injected, assert_no_secret

pytestmark = pytest.mark.netns


def pip_env(clients: Clients) -> dict[str, str]:
    # PIP_CONFIG_FILE=/dev/null: this machine's own pip configuration stays out of it.
    return clients.proxy_env(PIP_CERT=clients.ca, PIP_CONFIG_FILE=os.devnull,
                             PIP_DISABLE_PIP_VERSION_CHECK="1")  # fmt: skip


def pip_install(clients: Clients, index: str, target: Path) -> subprocess.CompletedProcess[str]:
    # One retry: pip names the cause of a failed fetch only in its "Retrying" warning.
    return clients.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-cache-dir",
         "--retries", "1", "--timeout", "20", "--target", str(target),
         "--index-url", index, registries.PY_PACKAGE],
        pip_env(clients),
    )  # fmt: skip


def test_pip_installs_from_an_index_behind_the_proxy(clients: Clients) -> None:
    mark, target = clients.nginx.mark(), clients.home / "pip-target"
    own = BASE_URL.replace("https://", "https://sandbox:own-password@")
    result = pip_install(clients, f"{own}/simple/", target)
    assert result.returncode == 0, result.stderr
    assert (target / "egress_demo.py").read_text() == registries.MODULE_TEXT
    assert_every_request_injected(
        clients, mark, [f"/simple/{registries.PY_PACKAGE}/", f"/packages/{clients.content.wheel}"]
    )
    assert_no_secret(clients, result.stdout, result.stderr)


def test_pip_refused_index_shows_the_403(clients: Clients) -> None:
    mark = clients.nginx.mark()
    index = f"https://notlisted.test:{HTTPS_PORT}/simple/"
    result = pip_install(clients, index, clients.home / "pip-refused")
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert "Tunnel connection failed: 403 Forbidden" in output, output
    assert clients.nginx.since(mark) == []


def git_env(clients: Clients) -> dict[str, str]:
    return clients.proxy_env(GIT_SSL_CAINFO=clients.ca, GIT_CONFIG_NOSYSTEM="1",
                             GIT_TERMINAL_PROMPT="0")  # fmt: skip


def test_git_clone_over_https(clients: Clients) -> None:
    mark, dest = clients.nginx.mark(), clients.home / "git-clone"
    result = clients.run(
        ["git", "-c", "http.extraHeader=Authorization: Bearer sandbox-own-token",
         "clone", "-q", f"{BASE_URL}/git/demo.git", str(dest)],
        git_env(clients),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (dest / registries.GIT_FILE).read_text() == registries.GIT_TEXT
    entries = clients.nginx.since(mark)
    assert entries
    assert entries[0]["uri"] == "/git/demo.git/info/refs?service=git-upload-pack"
    for entry in entries:  # the dumb protocol: many GETs, some probing for missing files
        assert entry["auth"] == f"Bearer {clients.secret}", entry
    assert_no_secret(clients, result.stdout, result.stderr)


def test_git_refused_host_shows_the_403(clients: Clients) -> None:
    mark = clients.nginx.mark()
    result = clients.run(
        ["git", "clone", "-q", f"https://notlisted.test:{HTTPS_PORT}/git/demo.git",
         str(clients.home / "git-refused")],
        git_env(clients),
    )  # fmt: skip
    assert result.returncode == 128
    assert "CONNECT tunnel failed, response 403" in result.stderr
    assert clients.nginx.since(mark) == []


def npm_install(clients: Clients, registry: str, prefix: Path) -> subprocess.CompletedProcess[str]:
    prefix.mkdir()
    host = registry.split("://", 1)[1]
    return clients.run(
        ["npm", "install", "--no-audit", "--no-fund", "--no-update-notifier",
         "--fetch-retries", "0", "--prefix", str(prefix), "--registry", registry,
         f"--//{host}:_authToken=sandbox-own-token", registries.NPM_PACKAGE],
        clients.env(npm_config_cafile=clients.ca, npm_config_https_proxy=clients.proxy_url,
                    npm_config_cache=str(prefix / ".npm-cache")),
    )  # fmt: skip


def test_npm_installs_from_a_registry_behind_the_proxy(clients: Clients) -> None:
    mark, prefix = clients.nginx.mark(), clients.home / "npm-prefix"
    result = npm_install(clients, f"{BASE_URL}/npm/", prefix)
    assert result.returncode == 0, result.stderr
    installed = prefix / "node_modules" / registries.NPM_PACKAGE / "index.js"
    assert "installed through the egress proxy" in installed.read_text()
    tarball = f"{registries.NPM_PACKAGE}-{registries.NPM_VERSION}.tgz"
    assert_every_request_injected(
        clients,
        mark,
        [f"/npm/{registries.NPM_PACKAGE}", f"/npm/{registries.NPM_PACKAGE}/-/{tarball}"],
    )
    assert_no_secret(clients, result.stdout, result.stderr)


def test_npm_refused_registry_shows_the_403(clients: Clients) -> None:
    mark = clients.nginx.mark()
    result = npm_install(
        clients, f"https://notlisted.test:{HTTPS_PORT}/npm/", clients.home / "npm-refused"
    )
    assert result.returncode != 0
    assert "403" in result.stderr, result.stderr
    assert clients.nginx.since(mark) == []
