"""The environment a command handler (and the code_execution tool) runs with.

SPEC 2.6 and 4: handlers inherit the runner's environment minus
* names that look like secrets (``*_TOKEN``, ``*SECRET*``, ``*PASSWORD*``,
  ``*_API_KEY``, ``AUTH``, ``CREDENTIALS``, ... as whole ``_``-separated words),
* values that carry credentials: URLs with a user-info part or a secret-looking
  query parameter, private keys, and well-known token formats,
* credential helpers (``SSH_AUTH_SOCK``, ``GPG_AGENT_INFO``, ``KRB5CCNAME``,
  ``*_ASKPASS``, ...),
* process-injection variables (``NODE_OPTIONS``, ``LD_PRELOAD``,
  ``PYTHONPATH``, ``BASH_ENV``, exported shell functions, ...),
* any inherited ``HOOK_*`` variable;
then the ``HOOK_*`` protocol variables are added. The operator switch
(``--full-env`` / ``HOOKRUNNER_FULL_ENV=1``, and ``AX_CODE_HOOKS_FULL_ENV=1``
for the AX Code dialect) keeps everything except inherited ``HOOK_*``. Both
dialects use this one sanitiser. The removed values also feed a ``Redactor`` so that no
warning can repeat them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

HOOK_ARGS_JSON_LIMIT = 32 * 1024

_SECRET_WORDS = frozenset(
    {
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWORDS",
        "PASSWD",
        "PASSPHRASE",
        "PASS",
        "PW",
        "CREDENTIAL",
        "CREDENTIALS",
        "CREDS",
        "APIKEY",
        "AUTH",
        "KEY",
        "KEYS",
        "PRIVATE",
        "COOKIE",
        "COOKIES",
        "BEARER",
        "JWT",
        "DSN",
        "PAT",
        "SIGNATURE",
        "SESSIONID",
    }
)
_SECRET_INFIXES = ("SECRET", "PASSWORD", "PASSWD", "APIKEY", "CREDENTIAL", "PRIVATEKEY")
_SECRET_SUFFIXES = ("TOKEN", "TOKENS", "AUTH")
CREDENTIAL_HELPERS = frozenset(
    {
        "SSH_AUTH_SOCK",
        "SSH_AGENT_PID",
        "GPG_AGENT_INFO",
        "KRB5CCNAME",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        "NETRC",
        "DOCKER_CONFIG",
    }
)
INJECTION_VARIABLES = frozenset(
    {
        "NODE_OPTIONS",
        "NODE_PATH",
        "LD_PRELOAD",
        "LD_AUDIT",
        "LD_LIBRARY_PATH",
        "GCONV_PATH",
        "GLIBC_TUNABLES",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONINSPECT",
        "PYTHONBREAKPOINT",
        "PERL5OPT",
        "PERL5LIB",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PROMPT_COMMAND",
        "PS4",
        "IFS",
        "CDPATH",
    }
)
_INJECTION_PREFIXES = ("DYLD_", "BASH_FUNC_")
_URL_WITH_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s@]+@")
_QUERY_PARAM = re.compile(r"[?&]([A-Za-z0-9_.-]+)=[^&\s#]+")
_TOKEN_VALUE = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|\b(?:ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{20,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bglpat-[A-Za-z0-9_-]{20,}"
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bsk-[A-Za-z0-9_-]{20,}"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\."
)
_MIN_REDACT_CHARS = 6


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[_\-.]+", name.upper()) if w]


def secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret."""
    for word in _words(name):
        if word in _SECRET_WORDS:
            return True
        if any(infix in word for infix in _SECRET_INFIXES):
            return True
        if word.endswith(_SECRET_SUFFIXES):
            return True
    return False


def secret_value(value: str) -> bool:
    """Whether a value carries a credential whatever its variable is called."""
    if _URL_WITH_USERINFO.search(value) or _TOKEN_VALUE.search(value):
        return True
    return any(secret_name(m.group(1)) for m in _QUERY_PARAM.finditer(value))


def removal_cause(name: str, value: str) -> str | None:
    """Why a variable is removed from a handler's environment, or None to keep it."""
    upper = name.upper()
    if upper.startswith("HOOK_"):
        return "hook_protocol"
    if upper in CREDENTIAL_HELPERS or upper.endswith("_ASKPASS"):
        return "credential_helper"
    if upper in INJECTION_VARIABLES or upper.startswith(_INJECTION_PREFIXES):
        return "process_injection"
    if secret_name(name):
        return "secret_name"
    if secret_value(value):
        return "secret_value"
    return None


@dataclass(frozen=True)
class SanitisedEnvironment:
    variables: Mapping[str, str]
    removed: tuple[str, ...]  # names only, never values


def sanitise(environ: Mapping[str, str], *, full_env: bool = False) -> SanitisedEnvironment:
    """The base environment for handlers and tools (without the HOOK_* additions)."""
    kept: dict[str, str] = {}
    removed: list[str] = []
    for name, value in environ.items():
        cause = removal_cause(name, value)
        if cause is None or (full_env and cause != "hook_protocol"):
            kept[name] = value
        else:
            removed.append(name)
    return SanitisedEnvironment(kept, tuple(sorted(removed)))


def args_json(args: Mapping[str, Any]) -> str:
    """Compact JSON of the arguments; ASCII escapes when a lone surrogate cannot be UTF-8."""
    text = json.dumps(dict(args), ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(dict(args), ensure_ascii=True, separators=(",", ":"))
    return text


def hook_variables(
    event: str,
    tool: str,
    args: Mapping[str, Any],
    *,
    session_id: str | None = None,
    pack: str | None = None,
) -> dict[str, str]:
    """The HOOK_* variables, added after sanitisation.

    ``HOOK_SESSION_ID`` and ``HOOK_PACK`` belong to the AX Code dialect and are
    set only when given.
    """
    text = args_json(args)
    size = len(text.encode("utf-8"))
    variables = {
        "HOOK_EVENT": event,
        "HOOK_TOOL": tool,
        "HOOK_ARGS_JSON": text if size <= HOOK_ARGS_JSON_LIMIT else "",
        "HOOK_ARGS_STDIN": "1",
    }
    if session_id is not None:
        variables["HOOK_SESSION_ID"] = session_id
    if pack is not None:
        variables["HOOK_PACK"] = pack
    return variables


class Redactor:
    """Replaces every secret value of the runner's environment in a text with ``[redacted]``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        unique = {s for s in secrets if len(s) >= _MIN_REDACT_CHARS}
        self._secrets = sorted(unique, key=len, reverse=True)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Redactor:
        secrets: list[str] = []
        for name, value in environ.items():
            cause = removal_cause(name, value)
            if cause in ("secret_name", "secret_value", "credential_helper"):
                secrets.append(value)
                secrets.extend(m.group(0) for m in _URL_WITH_USERINFO.finditer(value))
        return cls(secrets)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "[redacted]")
        return text
