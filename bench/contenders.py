"""The proxies under test, all listening on the client namespace's loopback.

* `mitmdump`: bare mitmproxy, no addons of ours, with the options the launcher sets
  (regular mode, `connection_strategy=lazy`, the same upstream trust bundle) and the
  same CA; `flow_detail=0` because the launcher runs without the dumper.
* `squid`: squid-openssl with the same policy: client-first ssl-bump with the same
  CA, the allowlist as `dstdomain` ACLs, `Authorization` replaced (access deny +
  header add) for the transform entries; one process (`-N`), no cache, access log on.
* `egress-proxy`: `egress-proxy run` with the generated allowlist and every policy stage
  configured (bench/staged.py: rules, git items, a placeholder secret, a credential,
  an MCP endpoint, budgets in `state: memory`, a sandboxes directory claiming the bench
  client), audit log to a file; variants
  (`--variant NAME=ARGS`) are more instances with extra arguments.

`ip netns exec` execs in place, so a contender's pid is the proxy's own; its CPU
time and memory are read for it and its child processes.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench import allowlist, netns, pki, procs, staged, upstream
from bench.allowlist import Allowlist
from bench.pki import ProxyCa, UpstreamPki, copy_confdir

VENV_BIN = Path(sys.executable).parent
LOOPBACK = "127.0.0.1"
PORTS = {"mitmdump": 18081, "squid": 18082, "egress-proxy": 18083}
EGRESS_METRICS_PORT = 19464
CERTGEN = Path("/usr/lib/squid/security_file_certgen")

SQUID_CONF = """\
http_port {listen} ssl-bump tls-cert={ca_cert} tls-key={ca_key} \
generate-host-certificates=on dynamic_cert_mem_cache_size=16MB
sslcrtd_program {certgen} -s {dir}/ssl_db -M 16MB
sslcrtd_children 4 startup=1 idle=1
ssl_bump bump all
tls_outgoing_options cafile={bundle}
{acls}
http_access allow allowlist
http_access deny all
cache deny all
cache_mem 8 MB
access_log stdio:{dir}/access.log
cache_log {dir}/cache.log
cache_store_log none
pid_filename {dir}/squid.pid
coredump_dir {dir}
cache_effective_user proxy
visible_hostname bench-squid
via off
forwarded_for delete
pinger_enable off
shutdown_lifetime 1 seconds
max_filedescriptors 16384
"""


@dataclass
class Contender:
    name: str
    child: procs.Child
    port: int

    @property
    def proxy_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"


def _wait_listening(ns: netns.Namespaces, child: procs.Child, port: int, timeout: float) -> None:
    procs.wait_until(
        f"{child.name} listening on {port}",
        lambda: netns.port_open(ns.client, LOOPBACK, port),
        timeout=timeout,
        child=child,
    )


def start_mitmdump(
    ns: netns.Namespaces, ca: ProxyCa, pki: UpstreamPki, work: Path, log_dir: Path
) -> Contender:
    confdir = copy_confdir(ca, work / "mitmdump-conf")
    port = PORTS["mitmdump"]
    argv = [
        *ns.exec_prefix(ns.client),
        str(VENV_BIN / "mitmdump"),
        "--mode",
        "regular",
        "--listen-host",
        LOOPBACK,
        "--listen-port",
        str(port),
        "--set",
        f"confdir={confdir}",
        "--set",
        "connection_strategy=lazy",
        "--set",
        f"ssl_verify_upstream_trusted_ca={pki.bundle}",
        "--set",
        "termlog_verbosity=warn",
        "--set",
        "flow_detail=0",
    ]
    child = procs.start("mitmdump", argv, log_dir)
    _wait_listening(ns, child, port, 60)
    return Contender("mitmdump", child, port)


def start_squid(
    ns: netns.Namespaces,
    ca: ProxyCa,
    pki: UpstreamPki,
    allowlist: Allowlist,
    work: Path,
    log_dir: Path,
) -> Contender:
    root = work / "squid"
    root.mkdir()
    proxy_user = pwd.getpwnam("proxy")
    key = root / "ca-key.pem"
    shutil.copy2(ca.key, key)
    ca_cert = root / "ca-cert.pem"
    shutil.copy2(ca.cert, ca_cert)
    conf = root / "squid.conf"
    port = PORTS["squid"]
    conf.write_text(
        SQUID_CONF.format(
            listen=f"{LOOPBACK}:{port}",
            ca_cert=ca_cert,
            ca_key=key,
            certgen=CERTGEN,
            dir=root,
            bundle=pki.bundle,
            acls="\n".join(allowlist.squid_lines()),
        )
    )
    subprocess.run(
        [str(CERTGEN), "-c", "-s", str(root / "ssl_db"), "-M", "16MB"],
        check=True,
        capture_output=True,
        timeout=30,
    )
    for path in [root, *root.rglob("*")]:
        os.chown(path, proxy_user.pw_uid, proxy_user.pw_gid)
    parse = subprocess.run(
        ["squid", "-k", "parse", "-f", str(conf)], capture_output=True, text=True, timeout=60
    )
    if parse.returncode != 0:
        raise RuntimeError(f"squid refused its configuration:\n{parse.stderr[-3000:]}")
    child = procs.start(
        "squid", [*ns.exec_prefix(ns.client), "squid", "-N", "-f", str(conf)], log_dir
    )
    _wait_listening(ns, child, port, 60)
    return Contender("squid", child, port)


def start_egress(
    ns: netns.Namespaces,
    ca: ProxyCa,
    pki: UpstreamPki,
    allowlist: Allowlist,
    work: Path,
    log_dir: Path,
    name: str = "egress-proxy",
    extra_args: tuple[str, ...] = (),
    offset: int = 0,
    extra_env: dict[str, str] | None = None,
) -> Contender:
    """`egress-proxy run` (a variant with `extra_args` and `extra_env` listens `offset`
    ports further on)."""
    confdir = copy_confdir(ca, work / f"{name}-certs")
    config = work / "egress.yaml"
    if not config.exists():
        staged.write(allowlist, work)
    port = PORTS["egress-proxy"] + offset
    argv = [
        *ns.exec_prefix(ns.client),
        str(VENV_BIN / "egress-proxy"),
        "run",
        "--config",
        str(config),
        "--listen",
        f"{LOOPBACK}:{port}",
        "--metrics",
        f"{LOOPBACK}:{EGRESS_METRICS_PORT + offset}",
        "--certs",
        str(confdir),
        "--audit-log",
        str(work / f"{name}-audit.log"),
        "--upstream-ca",
        str(pki.ca_cert),
        # Scenario 6 opens its 1,000 tunnels from one client, past the default share of
        # one client (512, docs/configuration.md#fair-sharing): the bench is one client.
        "--max-connections-per-client",
        "4096",
        *extra_args,
    ]
    env = {**os.environ, **allowlist.environ, **staged.environ(), **(extra_env or {})}
    child = procs.start(name, argv, log_dir, env=env)
    _wait_listening(ns, child, port, 60)
    return Contender(name, child, port)


FORWARDER_PORT = 18181  # + the contender's index: its CONNECT forwarder for h2load


def start_forwarder(
    ns: netns.Namespaces, contender: Contender, index: int, authority: str, log_dir: Path
) -> tuple[procs.Child, str]:
    """`socat`: each connection to 127.0.0.1:PORT becomes a CONNECT tunnel to `authority`
    through the contender (h2load has no proxy support). Returns the child and HOST:PORT."""
    port = FORWARDER_PORT + index
    host, _, upstream_port = authority.rpartition(":")
    argv = [
        *ns.exec_prefix(ns.client),
        "socat",
        f"TCP-LISTEN:{port},bind={LOOPBACK},fork,reuseaddr,backlog=512",
        f"PROXY:{LOOPBACK}:{host}:{upstream_port},proxyport={contender.port}",
    ]
    child = procs.start(f"socat-{contender.name}", argv, log_dir)
    _wait_listening(ns, child, port, 30)
    return child, f"{LOOPBACK}:{port}"


@dataclass
class Stage:
    """What every contender serves: the policy, the upstreams and the two PKIs."""

    policy: Allowlist
    upstream_pki: UpstreamPki
    ca: ProxyCa
    servers: upstream.Upstreams


def build_stage(ns: netns.Namespaces, work: Path, logs: Path) -> Stage:
    """The namespaces' hosts, the upstream PKI and servers, the proxies' CA and the
    1,000-entry policy (the children to stop are `servers.nginx` and `servers.sink`)."""
    names = [allowlist.TARGET, allowlist.HOOK_HOST, allowlist.BULK_HOST, allowlist.CHAT_HOST]
    policy = allowlist.generate(1000, (allowlist.HOOK_HOST, allowlist.BULK_HOST))
    ns.build({name: netns.UPSTREAM_IP for name in names})
    upstream_pki = pki.make_upstream_pki(work, names)
    ca = pki.make_proxy_ca(VENV_BIN / "egress-proxy", work / "ca")
    servers = upstream.start(ns, upstream_pki, work, policy.authorization(allowlist.TARGET), logs)
    return Stage(policy, upstream_pki, ca, servers)
