"""Sanitiser misses found from inside the sandbox (issue 11 item 8), and what must stay.

Two tables: variables that must be removed (each named after the miss it
closes or the token format of `common.tokens` it exercises) and variables
that must be KEPT (the false positives a wider rule could make). Token-shaped
test values are assembled from pieces so that no literal key sits in the
repository for a secret scanner to flag. Then a real hook process shows what
it receives, and a hostile value shows the value scan is linear (RE2).
"""

from __future__ import annotations

import json

import pytest

from sandbox_egress.common.tokens import TOKEN_FORMATS, token_format
from sandbox_egress.hookrunner.enforce.envsan import Redactor, removal_cause, sanitise
from tests.hookrunner.helpers import Env, base_environ, command, pre_group, rule

A36 = "a1B2c3D4e5" * 3 + "f6G7h8"  # 36 alphanumerics
HEX32 = "0123456789abcdef" * 2

# (format id, a value of that format); every format in the table has one.
FORMAT_SAMPLES = {
    "private-key": "-----BEGIN " + "RSA PRIVATE KEY-----\nMIIE",
    "github-pat": "ghp" + "_" + A36,
    "github-oauth": "gho" + "_" + A36,
    "github-app-token": "ghs" + "_" + A36,
    "github-refresh-token": "ghr" + "_" + A36,
    "github-fine-grained-pat": "github" + "_pat_" + "11ABCDEFG0" + "x" * 72,
    "gitlab-token": "glpat" + "-" + "Abcdefghij1234567890",
    "slack-token": "xoxb" + "-1234567890-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx",
    "slack-app-token": "xapp" + "-1-A0123456789-1234567890123-" + HEX32,
    "slack-webhook-url": "https://hooks.slack.com/services/" + "T0123ABCD/B0123ABCD/" + "x" * 24,
    "discord-webhook-url": "https://discord.com/api/webhooks/" + "123456789012345678/" + "Ab" * 30,
    "teams-webhook-url": "https://contoso.webhook.office.com/webhookb2/" + HEX32,
    "aws-access-key-id": "AKIA" + "ABCDEFGHIJ234567",
    "aws-temporary-access-key-id": "ASIA" + "ABCDEFGHIJ234567",
    "stripe-secret-key": "sk" + "_live_" + A36,
    "stripe-restricted-key": "rk" + "_live_" + A36,
    "openai-or-anthropic-key": "sk" + "-proj-" + A36,
    "google-api-key": "AIza" + "Sy" + "A" * 33,
    "npm-access-token": "npm" + "_" + "a" * 36,
    "pypi-upload-token": "pypi" + "-AgEIcHlwaS5vcmc" + "x" * 60,
    "sendgrid-api-key": "SG" + "." + "a" * 22 + "." + "b" * 43,
    "shopify-token": "shpat" + "_" + HEX32,
    "digitalocean-token": "dop" + "_v1_" + HEX32 * 2,
    "vault-token": "hvs" + "." + "C" * 95,
    "huggingface-token": "hf" + "_" + "abcdefghijklmnopqrstuvwxyzABCDEFGH",
    "databricks-token": "dapi" + HEX32,
    "twilio-api-key": "SK" + HEX32,
    "mailgun-api-key": "key" + "-" + HEX32,
    "linear-api-key": "lin" + "_api_" + "a" * 40,
    "doppler-token": "dp" + ".pt." + "a" * 43,
    "postman-api-key": "PMAK" + "-" + "a" * 24 + "-" + "b" * 34,
    "grafana-token": "glsa" + "_" + "a" * 32 + "_" + "0a1b2c3d",
    "age-secret-key": "AGE-SECRET-KEY-1" + "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" + "Q" * 26,
    "jwt": "eyJ" + "hbGciOiJIUzI1NiJ9" + ".eyJ" + "zdWIiOiIxIn0" + "." + "sig",
    "authorization-header": "Authorization: Basic " + "dXNlcjpwYXNz",
    "bearer-credential": "Bearer " + "abcdefghijklmnop1234",
    "connection-string-password": "Server=db;Database=app;User Id=app;Password=" + "hunter2x;",
    "azure-storage-account-key": "DefaultEndpointsProtocol=https;AccountName=a;AccountKey="
    + "Zm9v" * 8,
}

REMOVED = [
    # the misses of the issue
    ("MYSQL_PWD", "hunter2", "secret_name"),
    ("SLACK_WEBHOOK_URL", "https://hooks.example.com/no-shape-known", "secret_name"),
    ("NOTIFY", FORMAT_SAMPLES["slack-webhook-url"], "secret_value"),
    ("PAYMENTS", FORMAT_SAMPLES["stripe-secret-key"], "secret_value"),
    ("PAYMENTS_RO", FORMAT_SAMPLES["stripe-restricted-key"], "secret_value"),
    ("GIT_CONFIG_VALUE_0", "Authorization: Bearer " + "x" * 20, "secret_value"),
    ("GIT_CONFIG_VALUE_1", "AUTHORIZATION: basic " + "eA==", "secret_value"),
    ("GIT_CONFIG_VALUE_2", "PRIVATE-TOKEN: " + "glp" + "x" * 10, "secret_value"),
    ("STRIPEKEY", "x", "secret_name"),
    ("OPENAIKEY", "x", "secret_name"),
    ("ACCESSKEY", "x", "secret_name"),
    ("accessKey", "x", "secret_name"),
    ("secretAccessKey", "x", "secret_name"),
    ("stripeApiKey", "x", "secret_name"),
    ("dbPassword", "x", "secret_name"),
    ("DB_PWD", "x", "secret_name"),
    ("DISCORD_WEBHOOK", "x", "secret_name"),
    ("ADO_CONNECTION", FORMAT_SAMPLES["connection-string-password"], "secret_value"),
    *((f"SAMPLE_{i}", sample, "secret_value") for i, sample in enumerate(FORMAT_SAMPLES.values())),
]

KEPT = [
    ("PATH", "/usr/local/bin:/usr/bin:/bin"),
    ("HOME", "/home/agent"),
    ("TERM", "xterm-256color"),
    ("SHELL", "/bin/bash"),
    ("LANG", "en_US.UTF-8"),
    ("LC_ALL", "C.UTF-8"),
    ("PWD", "/workspace"),
    ("OLDPWD", "/workspace/src"),
    ("SSH_TTY", "/dev/pts/0"),
    ("SSH_CONNECTION", "10.0.0.1 50000 10.0.0.2 22"),
    ("KEYBOARD", "us"),
    ("MONKEY", "patched"),
    ("HOTKEY", "ctrl+k"),
    ("LESSKEY", "/home/agent/.less"),
    ("TOKENIZERS_PARALLELISM", "false"),
    ("GIT_AUTHOR_NAME", "Ada Lovelace"),
    ("GIT_COMMITTER_EMAIL", "ada@example.com"),
    ("GIT_CONFIG_COUNT", "1"),
    ("GIT_CONFIG_KEY_0", "http.extraHeader"),
    ("GIT_CONFIG_VALUE_3", "User-Agent: agent/1.0"),
    ("GRANT_TYPE", "authorization_code"),
    ("MODE_DOC", "Bearer authentication is used"),
    ("COMMIT", "3f2a9c1e0b7d4a6f8e5c2b1a0d9e8f7c6b5a4d3e"),
    ("BUILD_ID", "123e4567-e89b-12d3-a456-426614174000"),
    ("HOSTNAME", "sandbox-7f9c"),
    ("EDITOR", "vim"),
    ("PAGER", "less -R"),
    ("VIRTUAL_ENV", "/workspace/.venv"),
    ("CI", "true"),
    ("XDG_RUNTIME_DIR", "/run/user/1000"),
    ("DISPLAY", ":0"),
    ("COLORTERM", "truecolor"),
    ("HISTFILE", "/home/agent/.bash_history"),
    ("PS1", "\\u@\\h:\\w\\$ "),
    ("MANPATH", "/usr/share/man"),
    ("PIP_INDEX_URL", "https://pypi.org/simple"),
    ("DOCS", "see https://example.com/services/billing/overview"),
    ("SKLEARN_MODE", "risk-assessment-model-v2"),
    ("NOTE", "the key-value store is ready"),
]


def test_every_token_format_has_a_sample_and_a_source() -> None:
    assert sorted(FORMAT_SAMPLES) == sorted(f.id for f in TOKEN_FORMATS)
    assert all(f.source for f in TOKEN_FORMATS)


@pytest.mark.parametrize(("fid", "sample"), sorted(FORMAT_SAMPLES.items()))
def test_each_sample_is_recognised_by_its_own_format(fid: str, sample: str) -> None:
    assert token_format(sample) == fid
    assert token_format(f"prefix {sample} suffix") == fid


@pytest.mark.parametrize(("name", "value", "cause"), REMOVED, ids=[c[0] for c in REMOVED])
def test_removed(name: str, value: str, cause: str) -> None:
    assert removal_cause(name, value) == cause


@pytest.mark.parametrize(("name", "value"), KEPT, ids=[c[0] for c in KEPT])
def test_kept(name: str, value: str) -> None:
    assert removal_cause(name, value) is None


def test_git_config_value_paired_with_a_credential_key_is_removed() -> None:
    environ = {
        "GIT_CONFIG_COUNT": "3",
        "GIT_CONFIG_KEY_0": "http.https://git.example.com/.extraheader",
        "GIT_CONFIG_VALUE_0": "X-Custom: opaque-value-without-a-known-shape",
        "GIT_CONFIG_KEY_1": "credential.https://git.example.com.username",
        "GIT_CONFIG_VALUE_1": "agent",
        "GIT_CONFIG_KEY_2": "core.editor",
        "GIT_CONFIG_VALUE_2": "vim",
    }
    sanitised = sanitise(environ)
    assert sanitised.removed == ("GIT_CONFIG_VALUE_0", "GIT_CONFIG_VALUE_1")
    # git refuses to start when a counted pair is missing: what is left is renumbered
    assert dict(sanitised.variables) == {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.editor",
        "GIT_CONFIG_VALUE_0": "vim",
    }
    redact = Redactor.from_environment(environ)
    assert redact("header X-Custom: opaque-value-without-a-known-shape") == "header [redacted]"


def test_a_real_hook_sees_none_of_the_misses(env: Env) -> None:
    hostile = {name: value for name, value, _ in REMOVED}
    friendly = dict(KEPT)
    out = env.root / "env.json"
    dumper = env.script(
        "dump.py", f"import json, os\nopen({str(out)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
    )
    env.hooks({"g": pre_group(rule("*", command(dumper)))})
    env.session(environ={**friendly, **hostile, **base_environ()}).pre("read_file", {"path": "x"})
    seen = json.loads(out.read_text())
    assert sorted(set(hostile) & set(seen)) == []
    plain = [k for k in friendly if k not in ("PATH", "HOME", "PWD") and "GIT_CONFIG" not in k]
    assert {k: seen[k] for k in plain} == {k: friendly[k] for k in plain}
    # GIT_CONFIG_VALUE_0 (an Authorization header) went, so its pair went with it
    assert {k: v for k, v in seen.items() if k.startswith("GIT_CONFIG")} == {
        "GIT_CONFIG_COUNT": "0"
    }


def test_value_scan_is_linear_on_hostile_input() -> None:
    """Patterns a backtracking engine would take quadratic time on; RE2 answers at once."""
    hostile = [
        "eyJ" * 40_000,  # JWT starts everywhere, no dot
        "eyJ" + "a" * 100_000 + ".eyJ" + "b" * 100_000,
        "ghp_" * 30_000,
        "Authorization:" + " " * 100_000,
        "https://hooks.slack.com/services/" * 3_000,
        "a" * 100_000,  # a scheme that never reaches "://" (17 s with Python's re on main)
        "?" + "a" * 100_000,
    ]
    assert [token_format(v) for v in hostile] == [None] * len(hostile)
    assert [removal_cause("VALUE", v) for v in hostile] == [None] * len(hostile)


def test_git_still_runs_in_a_hook_after_a_config_pair_is_removed(env: Env) -> None:
    """A real git in a real hook: the header is gone, the other pair still applies."""
    out = env.root / "git.txt"
    env.hooks(
        {"g": pre_group(rule("*", command(f"git config --get-regexp '^(user|http)' > {out} 2>&1")))}
    )
    # A HOME of the runner's own without a .gitconfig: the hook environment keeps such a
    # HOME and drops GIT_CONFIG_GLOBAL (hookrunner/enforce/isolation.py, D41).
    home = env.root.parent / "hook-home-git"
    home.mkdir(mode=0o700)
    environ = base_environ(
        HOME=str(home),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_COUNT="2",
        GIT_CONFIG_KEY_0="http.extraHeader",
        GIT_CONFIG_VALUE_0="Authorization: Bearer " + "t0k3n" * 5,
        GIT_CONFIG_KEY_1="user.name",
        GIT_CONFIG_VALUE_1="Ada",
    )
    env.session(environ=environ).pre("read_file", {"path": "x"})
    assert out.read_text() == "user.name Ada\n"
