"""Scenario 4: hook runner overhead, run inside the client namespace as `python -m bench.hooks`.

Pairs, alternated call by call (one warm-up call of each first):
* a pre decision (`HookSession.pre`) with one command hook, versus spawning the
  same command bare with `subprocess.run(["/bin/sh", "-c", CMD], input=payload)`;
  for `true` (which prints nothing: the runner allows with an `empty_output`
  warning) and for `echo '{"decision": "allow"}'` (the normal allow);
* a pre decision with one http hook (`https://hook.bench.test/hook`, answered by
  nginx with an allow) through egress-proxy, versus the same POST made with
  `http.client` through the same proxy; and both again directly to nginx;
* Claude Code's hook command, a whole process per call as Claude Code runs it:
  `hookrunner fire PreToolUse --claude-exit-codes` with one claude-code hook (`true`),
  cold (a Python process importing the runner) and warm (the quick client of
  `hookrunner claude serve`, D230), versus `/bin/sh -c true` given the same payload.

Every call's outcome is checked: a hook that failed open (a refused CONNECT, a
TLS error) would look fast and must not count. Prints one JSON object; prints
`{"status": "todo", ...}` when `hookrunner.session` is not usable yet.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.allowlist import HOOK_HOST

ALLOW_ECHO = """echo '{"decision": "allow"}'"""
PAYLOAD = {"tool_call": {"name": "bench_tool", "args": {}}, "environment_id": "bench"}


def _summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {
        "median_ms": statistics.median(ms),
        "p90_ms": ms[int(0.9 * (len(ms) - 1))],
        "min_ms": ms[0],
        "max_ms": ms[-1],
    }


def _pair(runner: Callable[[], None], bare: Callable[[], None], calls: int) -> dict[str, Any]:
    runner()
    bare()
    timed: dict[str, list[float]] = {"runner": [], "bare": []}
    for i in range(calls):
        order = (("runner", runner), ("bare", bare))
        for label, op in order if i % 2 == 0 else reversed(order):
            started = time.perf_counter()
            op()
            timed[label].append(time.perf_counter() - started)
    result: dict[str, Any] = {label: _summary(samples) for label, samples in timed.items()}
    result["overhead_ms"] = result["runner"]["median_ms"] - result["bare"]["median_ms"]
    result["calls"] = calls
    return result


def _session(
    workspace: Path, hooks: dict[str, Any], environ: dict[str, str], ca: str | None
) -> Any:
    from sandbox_egress.hookrunner.metrics import HookMetrics
    from sandbox_egress.hookrunner.session import HookSession

    config = workspace / f"hooks-{len(list(workspace.iterdir()))}.json"
    config.write_text(json.dumps(hooks))
    session = HookSession(
        workspace,
        system_config=config,
        environ=environ,
        ca_file=ca,
        metrics=HookMetrics(),
        stream=open(os.devnull, "w"),  # noqa: SIM115 - lives as long as the session
        log_decisions=False,
    )
    if session.config.problems:
        raise RuntimeError(f"hooks.json refused: {session.config.problems}")
    return session


def _pre(session: Any, outcome: str) -> Callable[[], None]:
    def call() -> None:
        decision = session.pre("bench_tool", {})
        outcomes = [str(getattr(run.outcome, "value", run.outcome)) for run in decision.runs]
        if not decision.allowed or outcomes != [outcome]:
            raise RuntimeError(f"hook run ended {outcomes}, expected [{outcome!r}]")

    return call


def _spawn(command: str) -> Callable[[], None]:
    payload = json.dumps(PAYLOAD).encode()

    def call() -> None:
        done = subprocess.run(
            ["/bin/sh", "-c", command], input=payload, capture_output=True, timeout=30
        )
        if done.returncode != 0:
            raise RuntimeError(f"{command!r} exited {done.returncode}")

    return call


def _post(url_host: str, proxy: tuple[str, int] | None, cafile: str) -> Callable[[], None]:
    body = json.dumps(PAYLOAD).encode()
    context = ssl.create_default_context(cafile=cafile)

    def call() -> None:
        if proxy is None:
            conn = http.client.HTTPSConnection(url_host, 443, context=context, timeout=10)
        else:
            conn = http.client.HTTPSConnection(*proxy, context=context, timeout=10)
            conn.set_tunnel(url_host, 443)
        try:
            conn.request("POST", "/hook", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            answer = response.read()
        finally:
            conn.close()
        if response.status != 200 or b'"allow"' not in answer:
            raise RuntimeError(f"POST answered {response.status}")

    return call


def _fire(command: list[str], payload: bytes, env: dict[str, str]) -> Callable[[], None]:
    def call() -> None:
        done = subprocess.run(command, input=payload, capture_output=True, env=env, timeout=30)
        if done.returncode != 0 or done.stdout:
            raise RuntimeError(f"fire exited {done.returncode}: {done.stderr[-300:]!r}")

    return call


def _claude_fire(workspace: Path, base_env: dict[str, str], calls: int) -> dict[str, Any]:
    """The cold and the warm Claude Code hook command against a bare `true`."""
    from sandbox_egress.hookrunner.ax import quickclient

    runner = str(Path(sys.executable).parent / "hookrunner")
    operator = workspace / "claude-operator.json"
    hook = {"event": "PreToolUse", "command": "true", "protocol": "claude-code"}
    operator.write_text(json.dumps({"hooks": [hook]}))
    run_dir = workspace / "run"
    run_dir.mkdir(mode=0o700)
    env = {**base_env, "HOME": str(workspace), "XDG_RUNTIME_DIR": str(run_dir)}
    payload = json.dumps(
        {"session_id": "bench", "hook_event_name": "PreToolUse", "tool_name": "Bash",
         "tool_input": {"command": "ls"}, "cwd": str(workspace)}
    ).encode()  # fmt: skip
    fire = ["fire", "PreToolUse", "--claude-exit-codes", "--workspace", str(workspace)]
    fire += ["--ax-config", str(operator)]
    client = [sys.executable, "-I", "-S", os.path.realpath(quickclient.__file__), runner]
    server = subprocess.Popen([runner, "claude", "serve", "--idle", "600"], env=env)
    try:
        bare = _spawn("true")
        results = {"claude_fire_cold": _pair(_fire([runner, *fire], payload, env), bare, calls)}
        results["claude_fire_warm"] = _pair(_fire([*client, *fire], payload, env), bare, calls)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return results


def measure(proxy: str, proxy_ca: str, upstream_ca: str, calls: int) -> dict[str, Any]:
    try:
        import sandbox_egress.hookrunner.session  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable yet"
        return {"status": "todo", "reason": f"hookrunner.session not importable: {exc!r}"}
    host, _, port = proxy.removeprefix("http://").rpartition(":")
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    url = f"https://{HOOK_HOST}/hook"
    results: dict[str, Any] = {"status": "ok"}
    with tempfile.TemporaryDirectory(prefix="bench-hooks-") as tmp:
        workspace = Path(tmp)

        def one(handler: dict[str, Any]) -> dict[str, Any]:
            return {"bench": {"pre_tool_execution": [{"matcher": "", "hooks": [handler]}]}}

        for label, command, outcome in (
            ("command_true", "true", "empty_output"),
            ("command_echo_allow", ALLOW_ECHO, "allow"),
        ):
            session = _session(
                workspace, one({"type": "command", "command": command}), base_env, None
            )
            results[label] = _pair(_pre(session, outcome), _spawn(command), calls)
        http_hook = one({"type": "http", "url": url, "timeout": 10})
        via_proxy = _session(workspace, http_hook, {**base_env, "HTTPS_PROXY": proxy}, proxy_ca)
        results["http_via_egress_proxy"] = _pair(
            _pre(via_proxy, "allow"), _post(HOOK_HOST, (host, int(port)), proxy_ca), calls
        )
        direct = _session(workspace, http_hook, base_env, upstream_ca)
        results["http_direct"] = _pair(
            _pre(direct, "allow"), _post(HOOK_HOST, None, upstream_ca), calls
        )
        results.update(_claude_fire(workspace, base_env, calls))
    results["proxy_cost_ms"] = (
        results["http_via_egress_proxy"]["bare"]["median_ms"]
        - results["http_direct"]["bare"]["median_ms"]
    )
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proxy", required=True, help="http://HOST:PORT of egress-proxy")
    parser.add_argument("--proxy-ca", required=True)
    parser.add_argument("--upstream-ca", required=True)
    parser.add_argument("--calls", type=int, default=40)
    args = parser.parse_args(argv)
    try:
        results = measure(args.proxy, args.proxy_ca, args.upstream_ca, args.calls)
    except Exception as exc:  # noqa: BLE001 - reported as a TODO with its cause
        results = {"status": "todo", "reason": f"hook runner API failed: {exc!r}"}
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
