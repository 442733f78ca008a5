"""The environment a command handler (and the code_execution tool) runs with.

docs/hooks.md#decisions-where-the-specification-is-silent;
docs/hooks.md#the-ax-code--claude-code-dialect-ax-codehooksjson: handlers inherit the runner's
environment minus
* names that look like secrets (``*_TOKEN``, ``*SECRET*``, ``*PASSWORD*``,
  ``*_API_KEY``, ``AUTH``, ``CREDENTIALS``, ... as whole ``_``-separated words),
* a few names no word rule catches (``SSHPASS``, ``BW_SESSION``,
  ``OP_SESSION_*``, ``LDAP_BINDPW``),
* names split into words at ``_ - .`` and camelCase (``accessKey``), read also as
  run-together words (``STRIPEKEY``, ``GHTOKEN``; not ``MONKEY`` or ``KEYBOARD``);
  ``PWD`` counts inside a compound (``MYSQL_PWD``), not alone (``PWD``, ``OLDPWD``),
* values that carry credentials: URLs with a user-info part or a secret-looking
  query parameter, a secret-looking ``key=value`` inside the value (a libpq
  ``password=``, a Kafka JAAS ``password="..."``, ``-Drepo.password=`` in
  ``MAVEN_OPTS``), a ``Basic``/``Bearer`` credential, and the formats of
  `common.tokens` (private keys, vendor tokens, webhook URLs with the
  secret in the path, ``Authorization:`` headers),
* header lines with a secret name in header-carrying variables, and the
  ``GIT_CONFIG_VALUE_n`` of a ``GIT_CONFIG_KEY_n`` that names a header or credential,
* credential helpers (``SSH_AUTH_SOCK``, ``GPG_AGENT_INFO``, ``KRB5CCNAME``,
  ``*_ASKPASS``, ...),
* process-injection variables (``NODE_OPTIONS``, ``LD_PRELOAD``,
  ``PYTHONPATH``, ``BASH_ENV``, exported shell functions, ...),
* any inherited ``HOOK_*`` variable;
then the ``HOOK_*`` protocol variables are added. The operator switch
(``--full-env`` / ``HOOKRUNNER_FULL_ENV=1``, and ``AX_CODE_HOOKS_FULL_ENV=1``
for the AX Code dialect) keeps everything except inherited ``HOOK_*``. Both
dialects use this one sanitiser. The removed values also feed a ``Redactor`` so that no
warning can repeat them. Work per variable is linear in its length: names by a
fixed number of string tests per word, values with RE2 (`common.tokens`) and
regular expressions without nested repetition.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import re2

from sandbox_egress.common.tokens import token_format

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
        "WEBHOOK",
        "WEBHOOKS",
    }
)
_SECRET_INFIXES = ("SECRET", "PASSWORD", "PASSWD", "APIKEY", "CREDENTIAL", "PRIVATEKEY", "WEBHOOK")
_SECRET_SUFFIXES = ("TOKEN", "TOKENS", "AUTH")
# A run-together word ending in KEY(S) is a secret when what precedes KEY names a kind of
# key or a service that issues them (STRIPEKEY, ACCESSKEY); MONKEY, HOTKEY, LESSKEY and
# KEYBOARD are not. Stems are at least three letters, so ADDKEY-like words stay.
_KEY_STEMS = (
    "API", "ACCESS", "SECRET", "PRIVATE", "MASTER", "SIGNING", "ENCRYPTION", "CLIENT",
    "APP", "SERVICE", "SESSION", "LICENSE", "DEPLOY", "SSH", "GPG", "PGP", "HMAC", "JWT",
    "ADMIN", "STRIPE", "OPENAI", "ANTHROPIC", "CLAUDE", "AWS", "GITHUB", "GITLAB",
    "SLACK", "TWILIO", "SENDGRID", "MAILGUN", "GOOGLE", "GCP", "GEMINI", "AZURE",
    "DATADOG", "SENTRY", "HEROKU", "NPM", "PYPI", "DOCKER", "CLOUDFLARE", "MAPBOX",
    "ALGOLIA", "SHOPIFY", "PAYPAL", "HUGGINGFACE", "MISTRAL", "COHERE", "GROQ",
    "REPLICATE", "PINECONE", "SUPABASE", "FIREBASE", "VERCEL", "NETLIFY", "LINEAR",
    "NOTION", "AIRTABLE", "WRITE", "INGEST",
)  # fmt: skip
# Secrets whose name no word rule catches: sshpass(1), the Bitwarden and 1Password CLIs'
# session keys (OP_SESSION_<account>), OpenLDAP's bind password.
_SECRET_NAMES = frozenset({"SSHPASS", "BW_SESSION", "LDAP_BINDPW", "BW_CLIENTSECRET"})
_SECRET_NAME_PREFIXES = ("OP_SESSION_",)
# PWD is a password word (MYSQL_PWD, DB_PWD) unless it is the whole name (PWD, OLDPWD).
_PASSWORD_WORD_IN_COMPOUNDS = "PWD"
_CAMEL_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_HEADER = re.compile(r"\s*([A-Za-z][A-Za-z0-9-]{0,63})\s*:\s*\S")
_GIT_CONFIG_PAIR = re.compile(r"GIT_CONFIG_(?:KEY|VALUE)_([0-9]{1,4})")
# git configuration keys whose value is a credential or a header (http.<url>.extraHeader).
_GIT_SECRET_KEY = re.compile(r"(?i)^http\..*extraheader$|^credential\.|(?:password|token)$")
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
# RE2: Python's re takes quadratic time on a long run of scheme characters.
_URL_WITH_USERINFO = re2.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s@]+@")
_QUERY_PARAM = re2.compile(r"[?&]([A-Za-z0-9_.-]+)=[^&\s#]+")
# key=value inside a value: a libpq conninfo (password=...), a Kafka JAAS line
# (password="..."), a JVM option (-Drepo.password=..., -DproxyPassword=...), OTLP headers.
_ASSIGNMENT = re2.compile(
    r"(?:^|[\s;,(])(?:-D)?([A-Za-z][A-Za-z0-9_.\-]{0,63})\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s;,&\"']+)"
)
_HARMLESS = frozenset({"", "true", "false", "yes", "no", "on", "off", "0", "1", "none", "null"})
# A Basic or Bearer credential anywhere in a value (a header kept in a variable): Basic is
# base64 of "user:password"; a bearer token is long and has a digit ("Bearer auth" is text).
_BASIC = re2.compile(r"(?i)\bbasic\s+([A-Za-z0-9+/]{4,}={0,2})")
_BEARER = re2.compile(r"(?i)\bbearer\s+([A-Za-z0-9+/._~-]{16,}=*)")
_MIN_REDACT_CHARS = 6


def _words(name: str) -> list[str]:
    """Upper-cased words split at ``_ - .``, plus the parts of camelCase words.

    ``secretAccessKey`` gives ``SECRETACCESSKEY`` (read as one run-together word)
    and ``SECRET``, ``ACCESS``, ``KEY``.
    """
    words: list[str] = []
    for word in (w for w in re.split(r"[_\-.]+", name) if w):
        words.append(word.upper())
        parts = _CAMEL_PART.findall(word)
        if len(parts) > 1:
            words.extend(p.upper() for p in parts)
    return words


def _secret_word(word: str) -> bool:
    if word in _SECRET_WORDS or any(infix in word for infix in _SECRET_INFIXES):
        return True
    if word.endswith(_SECRET_SUFFIXES):
        return True
    if len(word) > 2 and word.endswith("PW"):  # BINDPW, ROOTPW (PWD alone is the directory)
        return True
    stem = word.removesuffix("S").removesuffix("KEY") if word.endswith(("KEY", "KEYS")) else ""
    return bool(stem) and stem != word and stem.endswith(_KEY_STEMS)


def secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret (linear in its length)."""
    upper = name.upper()
    if upper in _SECRET_NAMES or upper.startswith(_SECRET_NAME_PREFIXES):
        return True
    words = _words(name)
    if len(words) > 1 and _PASSWORD_WORD_IN_COMPOUNDS in words:
        return True
    return any(_secret_word(word) for word in words)


def secret_value(value: str) -> bool:
    """Whether a value carries a credential whatever its variable is called."""
    if _URL_WITH_USERINFO.search(value) or token_format(value) is not None:
        return True
    if any(_basic_pair(m.group(1)) for m in _BASIC.finditer(value)):
        return True
    if any(any(c.isdigit() for c in m.group(1)) for m in _BEARER.finditer(value)):
        return True
    if any(secret_name(m.group(1)) for m in _QUERY_PARAM.finditer(value)):
        return True
    return any(
        secret_name(m.group(1)) and m.group(2).strip("\"'").lower() not in _HARMLESS
        for m in _ASSIGNMENT.finditer(value)
    )


def _basic_pair(encoded: str) -> bool:
    """Whether base64 text decodes to ``user:password`` (a Basic credential)."""
    try:
        decoded = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


def _secret_header(name: str, value: str) -> bool:
    """A header line (``PRIVATE-TOKEN: ...``) in a variable that carries headers to a client."""
    upper = name.upper()
    if not (upper.startswith("GIT_CONFIG_VALUE_") or "HEADER" in upper):
        return False
    header = _HEADER.match(value)
    return header is not None and (
        secret_name(header.group(1)) or header.group(1).lower() == "cookie"
    )


def paired_secrets(environ: Mapping[str, str]) -> frozenset[str]:
    """``GIT_CONFIG_VALUE_n`` whose ``GIT_CONFIG_KEY_n`` names a header or a credential.

    ``GIT_CONFIG_KEY_0=http.extraHeader`` makes ``GIT_CONFIG_VALUE_0`` a header sent
    to every remote, whatever its text looks like.
    """
    names: set[str] = set()
    for name, value in environ.items():
        pair = _GIT_CONFIG_PAIR.fullmatch(name.upper())
        is_key = pair is not None and name.upper().startswith("GIT_CONFIG_KEY_")
        if pair and is_key and _GIT_SECRET_KEY.search(value.strip()):
            names.add(f"GIT_CONFIG_VALUE_{pair.group(1)}")
    return frozenset(n for n in environ if n.upper() in names)


def removal_cause(name: str, value: str, paired: frozenset[str] = frozenset()) -> str | None:
    """Why a variable is removed from a handler's environment, or None to keep it.

    ``paired`` is `paired_secrets` of the whole environment, for the variables whose
    meaning depends on another one.
    """
    upper = name.upper()
    if upper.startswith("HOOK_"):
        return "hook_protocol"
    if upper in CREDENTIAL_HELPERS or upper.endswith("_ASKPASS"):
        return "credential_helper"
    if upper in INJECTION_VARIABLES or upper.startswith(_INJECTION_PREFIXES):
        return "process_injection"
    if secret_name(name) and not _GIT_CONFIG_PAIR.fullmatch(upper):
        return "secret_name"
    if secret_value(value) or _secret_header(name, value) or name in paired:
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
    paired = paired_secrets(environ)
    for name, value in environ.items():
        cause = removal_cause(name, value, paired)
        if cause is None or (full_env and cause != "hook_protocol"):
            kept[name] = value
        else:
            removed.append(name)
    if removed and not full_env:
        kept = _renumber_git_config(kept)
    return SanitisedEnvironment(kept, tuple(sorted(removed)))


def _renumber_git_config(kept: dict[str, str]) -> dict[str, str]:
    """Close the gaps a removed ``GIT_CONFIG_VALUE_n`` leaves, so git still starts.

    git refuses to run when ``GIT_CONFIG_COUNT`` names a pair that is missing; the
    pairs left are renumbered from 0 and the count set to how many there are.
    """
    count = kept.get("GIT_CONFIG_COUNT", "")
    if not (count.isascii() and count.isdigit()) or len(count) > 4:
        return kept
    pairs = [
        (kept[f"GIT_CONFIG_KEY_{i}"], kept[f"GIT_CONFIG_VALUE_{i}"])
        for i in range(int(count))
        if f"GIT_CONFIG_KEY_{i}" in kept and f"GIT_CONFIG_VALUE_{i}" in kept
    ]
    if len(pairs) == int(count):
        return kept
    result = {k: v for k, v in kept.items() if not _GIT_CONFIG_PAIR.fullmatch(k)}
    for i, (key, value) in enumerate(pairs):
        result[f"GIT_CONFIG_KEY_{i}"] = key
        result[f"GIT_CONFIG_VALUE_{i}"] = value
    result["GIT_CONFIG_COUNT"] = str(len(pairs))
    return result


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
    boundary: str | None = None,
) -> dict[str, str]:
    """The HOOK_* variables, added after sanitisation.

    ``HOOK_SESSION_ID`` and ``HOOK_PACK`` belong to the AX Code dialect and are
    set only when given; ``HOOK_BOUNDARY`` only for a pre event of a tool the
    runner itself runs in its namespace (``toolns.boundary``, D194).
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
    if boundary:
        variables["HOOK_BOUNDARY"] = boundary
    return variables


class Redactor:
    """Replaces every secret value of the runner's environment in a text with ``[redacted]``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        unique = {s for s in secrets if len(s) >= _MIN_REDACT_CHARS}
        self._secrets = sorted(unique, key=len, reverse=True)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Redactor:
        secrets: list[str] = []
        paired = paired_secrets(environ)
        for name, value in environ.items():
            cause = removal_cause(name, value, paired)
            if cause in ("secret_name", "secret_value", "credential_helper"):
                secrets.append(value)
                secrets.extend(m.group(0) for m in _URL_WITH_USERINFO.finditer(value))
        return cls(secrets)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "[redacted]")
        return text
