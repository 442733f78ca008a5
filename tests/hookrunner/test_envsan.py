"""Environment sanitisation: the table, then what a real hook process actually sees."""

from __future__ import annotations

import json

import pytest

from sandbox_egress.hookrunner.enforce.envsan import (
    HOOK_ARGS_JSON_LIMIT,
    Redactor,
    hook_variables,
    removal_cause,
)
from tests.hookrunner.helpers import PY, Env, base_environ, command, pre_group, rule

GH = "ghp_" + "a" * 36

CASES = [
    # (name, value, cause or None when kept)
    ("PATH", "/usr/bin:/bin", None),
    ("HOME", "/root", None),
    ("LANG", "C.UTF-8", None),
    ("TERM", "xterm", None),
    ("PWD", "/w", None),
    ("GIT_AUTHOR_NAME", "Ada", None),
    ("TOKENIZERS_PARALLELISM", "false", None),
    ("KEYBOARD", "us", None),
    ("XDG_SESSION_ID", "3", None),
    ("HTTPS_PROXY", "http://127.0.0.1:8080", None),
    ("NO_PROXY", "localhost", None),
    ("SSL_CERT_FILE", "/etc/ssl/ca.pem", None),
    ("PIP_INDEX_URL", "https://pypi.org/simple", None),
    ("GITHUB_TOKEN", "x", "secret_name"),
    ("GH_TOKEN", "x", "secret_name"),
    ("NPM_TOKEN", "x", "secret_name"),
    ("OPENAI_API_KEY", "x", "secret_name"),
    ("AWS_SECRET_ACCESS_KEY", "x", "secret_name"),
    ("AWS_ACCESS_KEY_ID", "x", "secret_name"),
    ("AWS_SESSION_TOKEN", "x", "secret_name"),
    ("PGPASSWORD", "x", "secret_name"),
    ("MYSQL_PWD_PASS", "x", "secret_name"),
    ("DB_PASSWD", "x", "secret_name"),
    ("GOOGLE_APPLICATION_CREDENTIALS", "/k.json", "secret_name"),
    ("APIKEY", "x", "secret_name"),
    ("client_secret", "x", "secret_name"),
    ("SENTRY_DSN", "x", "secret_name"),
    ("NPM_CONFIG__AUTH", "x", "secret_name"),
    ("GH_PAT", "x", "secret_name"),
    ("GHTOKEN", "x", "secret_name"),
    ("DATABASE_URL", "postgres://user:pw@db:5432/app", "secret_value"),
    ("HTTPS_PROXY", "http://user:pw@proxy:3128", "secret_value"),
    (
        "PIP_EXTRA_INDEX_URL",
        "https://pypi.org/simple https://tok@repo.example/simple",
        "secret_value",
    ),
    ("CALLBACK", "https://hooks.example.com/x?token=abc", "secret_value"),
    ("SIGNED", "https://bucket.example.com/o?X-Amz-Signature=abc", "secret_value"),
    ("MY_VAR", GH, "secret_value"),
    ("MY_KEY_MATERIAL", "x", "secret_name"),
    ("SOMETHING", "-----BEGIN OPENSSH PRIVATE KEY-----\nabc", "secret_value"),
    ("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1", "credential_helper"),
    ("GPG_AGENT_INFO", "x", "credential_helper"),
    ("KRB5CCNAME", "FILE:/tmp/krb", "credential_helper"),
    ("GIT_ASKPASS", "/usr/bin/askpass", "credential_helper"),
    ("NODE_OPTIONS", "--require /w/evil.js", "process_injection"),
    ("LD_PRELOAD", "/w/evil.so", "process_injection"),
    ("LD_LIBRARY_PATH", "/w", "process_injection"),
    ("DYLD_INSERT_LIBRARIES", "/w/x", "process_injection"),
    ("PYTHONPATH", "/w", "process_injection"),
    ("PYTHONSTARTUP", "/w/x.py", "process_injection"),
    ("BASH_ENV", "/w/x.sh", "process_injection"),
    ("BASH_FUNC_ls%%", "() { evil; }", "process_injection"),
    ("JAVA_TOOL_OPTIONS", "-javaagent:/w/x.jar", "process_injection"),
    ("PERL5OPT", "-Mevil", "process_injection"),
    ("HOOK_EVENT", "forged", "hook_protocol"),
    ("HOOK_PACK", "x", "hook_protocol"),
]


@pytest.mark.parametrize(
    ("name", "value", "cause"), CASES, ids=[f"{c[0]}={c[1][:20]}" for c in CASES]
)
def test_removal_table(name: str, value: str, cause: str | None) -> None:
    assert removal_cause(name, value) == cause


def _dump_env(env: Env, **session: object) -> dict[str, str]:
    out = env.root / "env.json"
    dumper = env.script(
        "dump.py", f"import json, os\nopen({str(out)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
    )
    env.hooks({"g": pre_group(rule("*", command(dumper)))})
    env.session(**session).pre("read_file", {"path": "notes.txt"})
    return json.loads(out.read_text())


HOSTILE = {
    "GITHUB_TOKEN": "ghs_" + "b" * 36,
    "DATABASE_URL": "postgres://app:hunter2-password@db/app",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "NODE_OPTIONS": "--require /w/evil.js",
    "HOOK_TOOL": "forged",
    "LANG": "C.UTF-8",
}


def test_hook_process_gets_the_sanitised_environment_plus_hook_variables(env: Env) -> None:
    seen = _dump_env(env, environ=base_environ(**HOSTILE))
    ours = {k: v for k, v in seen.items() if k not in ("PWD", "SHLVL", "_", "LC_CTYPE")}
    assert ours == {
        "PATH": base_environ()["PATH"],
        "HOME": base_environ()["HOME"],
        "LANG": "C.UTF-8",
        "HOOK_EVENT": "pre_tool_execution",
        "HOOK_TOOL": "read_file",
        "HOOK_ARGS_JSON": '{"path":"notes.txt"}',
        "HOOK_ARGS_STDIN": "1",
        "PYTHONNOUSERSITE": "1",  # hookrunner.enforce.isolation (issue 11, item 1)
    }


@pytest.mark.parametrize(
    "switch",
    [{"full_env": True}, {"environ_flag": "1"}],
    ids=["--full-env", "HOOKRUNNER_FULL_ENV=1"],
)
def test_operator_switch_passes_the_full_environment(env: Env, switch: dict[str, object]) -> None:
    environ = base_environ(**HOSTILE)
    kwargs: dict[str, object] = {"environ": environ}
    if "environ_flag" in switch:
        environ["HOOKRUNNER_FULL_ENV"] = "1"
    else:
        kwargs.update(switch)
    seen = _dump_env(env, **kwargs)
    assert {k: seen.get(k) for k in ("GITHUB_TOKEN", "DATABASE_URL", "NODE_OPTIONS")} == {
        k: HOSTILE[k] for k in ("GITHUB_TOKEN", "DATABASE_URL", "NODE_OPTIONS")
    }
    assert seen["HOOK_TOOL"] == "read_file"  # inherited HOOK_* never survives


def test_repository_file_cannot_turn_on_the_full_environment(env: Env) -> None:
    out = env.root / "env.json"
    dumper = env.script(
        "dump.py", f"import json, os\nopen({str(out)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
    )
    env.hooks({"g": {"full_env": True, **pre_group(rule("*", command(dumper)))}})
    env.session(environ=base_environ(**HOSTILE)).pre("read_file", {"path": "x"})
    assert "GITHUB_TOKEN" not in json.loads(out.read_text())
    assert [w["path"] for w in env.warnings() if w["kind"] == "config"] == ["$.g.full_env"]


def test_hook_args_json_is_empty_above_32_kib() -> None:
    small = hook_variables("pre_tool_execution", "write_file", {"content": "x" * 100})
    exact = {"content": "x" * (HOOK_ARGS_JSON_LIMIT - len('{"content":""}'))}
    at_limit = hook_variables("pre_tool_execution", "write_file", exact)
    over = hook_variables("pre_tool_execution", "write_file", {"content": "é" * 20000})
    assert json.loads(small["HOOK_ARGS_JSON"]) == {"content": "x" * 100}
    assert len(at_limit["HOOK_ARGS_JSON"].encode()) == HOOK_ARGS_JSON_LIMIT
    assert over["HOOK_ARGS_JSON"] == ""  # 40,000 bytes of UTF-8
    assert over["HOOK_ARGS_STDIN"] == "1"


def test_large_args_still_reach_the_hook_on_stdin(env: Env) -> None:
    out = env.root / "stdin.json"
    seen = env.root / "env.json"
    script = env.script(
        "read.py",
        "import json, os, sys\n"
        f"open({str(out)!r}, 'w').write(sys.stdin.read())\n"
        f"open({str(seen)!r}, 'w').write(os.environ['HOOK_ARGS_JSON'])\n",
    )
    env.hooks({"g": pre_group(rule("*", command(script)))})
    args = {"path": "big.txt", "content": "z" * 100_000}
    env.session().pre("write_file", args)
    assert json.loads(out.read_text())["tool_call"]["args"] == args
    assert seen.read_text() == ""


def test_secret_values_never_reach_a_warning_line(env: Env) -> None:
    secret = "hunter2-password"
    leak = f"{PY} -c \"import os, sys; sys.stderr.write(os.environ['DATABASE_URL']); sys.exit(1)\""
    env.hooks({"g": pre_group(rule("*", command(leak)))})
    env.session(environ=base_environ(**HOSTILE), full_env=True).pre("read_file", {"path": "x"})
    text = env.stream.getvalue()
    assert secret not in text
    assert HOSTILE["DATABASE_URL"] not in text
    assert "(stderr: '[redacted]')" in text


def test_redactor_replaces_longest_secrets_first() -> None:
    redact = Redactor(["abcdefgh", "abcdefghijkl", "short"])
    assert redact("x abcdefghijkl y abcdefgh z short") == "x [redacted] y [redacted] z short"
