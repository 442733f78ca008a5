"""Well-known credential formats, recognised in a value whatever its variable is called.

Both halves use it: the hook runner's environment sanitiser, and every message that shows a
value from a configuration file (`shown`: a pasted token is named by its format, never echoed).

A table, one row per format: an id, an RE2 pattern and where the format comes
from. Most rows follow the rule of the same purpose in gitleaks' default
configuration (``config/gitleaks.toml``, rule id given), loosened where a
shorter or longer token of the same prefix is still a token; the others cite
the vendor's or the standard's documentation.

Invariants:
* Every pattern is RE2 (``google-re2``): matching is linear in the length of
  the value, so a hostile value (``eyJ`` repeated 100,000 times) costs one
  pass, not the quadratic backtracking of Python's ``re``.
* Patterns carry no capturing groups of their own; the combined pattern has
  one group per row, in table order, to say which format matched.
* Only formats with a distinctive prefix or shape are here: a bare 32-hex
  string (a git object id, an MD5) is not a secret by itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import re2


@dataclass(frozen=True)
class TokenFormat:
    id: str
    pattern: str  # RE2 syntax, no capturing groups
    source: str


_GL = "gitleaks config/gitleaks.toml rule"

TOKEN_FORMATS: tuple[TokenFormat, ...] = (
    TokenFormat(
        "private-key",
        r"-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----",
        f"{_GL} private-key (PEM, OpenSSH, PGP armour)",
    ),
    TokenFormat("github-pat", r"\bghp_[A-Za-z0-9]{20,}", f"{_GL} github-pat"),
    TokenFormat("github-oauth", r"\bgho_[A-Za-z0-9]{20,}", f"{_GL} github-oauth"),
    TokenFormat("github-app-token", r"\bgh[us]_[A-Za-z0-9]{20,}", f"{_GL} github-app-token"),
    TokenFormat("github-refresh-token", r"\bghr_[A-Za-z0-9]{20,}", f"{_GL} github-refresh-token"),
    TokenFormat(
        "github-fine-grained-pat",
        r"\bgithub_pat_[A-Za-z0-9_]{20,}",
        f"{_GL} github-fine-grained-pat",
    ),
    TokenFormat(
        "gitlab-token",
        r"\bgl(?:pat|ptt|dt|rt|soat|cbt|imt|ft|agent)-[A-Za-z0-9_-]{20,}",
        f"{_GL} gitlab-pat, gitlab-ptt, gitlab-deploy-token, gitlab-runner-authentication-token",
    ),
    TokenFormat(
        "slack-token",
        r"\bxox[abposre]-[A-Za-z0-9-]{10,}",
        f"{_GL} slack-bot-token, slack-user-token",
    ),
    TokenFormat(
        "slack-app-token", r"(?i)\bxapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+", f"{_GL} slack-app-token"
    ),
    TokenFormat(
        "slack-webhook-url",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{40,}",
        f"{_GL} slack-webhook-url (the secret is in the path)",
    ),
    TokenFormat(
        "discord-webhook-url",
        r"discord(?:app)?\.com/api/webhooks/[0-9]{15,22}/[A-Za-z0-9_-]{40,}",
        "Discord developer docs, Webhook resource: /webhooks/{id}/{token}",
    ),
    TokenFormat(
        "teams-webhook-url",
        r"\.webhook\.office\.com/webhookb2/[A-Za-z0-9@/_-]{20,}"
        r"|outlook\.office(?:365)?\.com/webhook/[A-Za-z0-9@/_-]{20,}",
        f"{_GL} microsoft-teams-webhook",
    ),
    TokenFormat(
        "aws-access-key-id",
        r"\b(?:AKIA|A3T[A-Z0-9]|ABIA|ACCA)[0-9A-Z]{16}\b",
        f"{_GL} aws-access-token",
    ),
    TokenFormat(
        "aws-temporary-access-key-id", r"\bASIA[0-9A-Z]{16}\b", f"{_GL} aws-access-token (STS)"
    ),
    TokenFormat(
        "stripe-secret-key",
        r"\bsk_(?:live|test|prod)_[A-Za-z0-9]{10,}",
        f"{_GL} stripe-access-token",
    ),
    TokenFormat(
        "stripe-restricted-key",
        r"\brk_(?:live|test|prod)_[A-Za-z0-9]{10,}",
        f"{_GL} stripe-access-token (restricted keys)",
    ),
    TokenFormat(
        "openai-or-anthropic-key",
        r"\bsk-[A-Za-z0-9_-]{20,}",
        f"{_GL} openai-api-key, anthropic-api-key (sk-, sk-proj-, sk-ant-)",
    ),
    TokenFormat("google-api-key", r"\bAIza[0-9A-Za-z_-]{35}", f"{_GL} gcp-api-key"),
    TokenFormat("npm-access-token", r"\bnpm_[A-Za-z0-9]{36}", f"{_GL} npm-access-token"),
    TokenFormat(
        "pypi-upload-token", r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}", f"{_GL} pypi-upload-token"
    ),
    TokenFormat(
        "sendgrid-api-key",
        r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}",
        f"{_GL} sendgrid-api-token",
    ),
    TokenFormat(
        "shopify-token",
        r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",
        f"{_GL} shopify-access-token, shopify-shared-secret, ...",
    ),
    TokenFormat(
        "digitalocean-token",
        r"\bdo[opr]_v1_[a-f0-9]{64}",
        f"{_GL} digitalocean-pat, digitalocean-access-token, digitalocean-refresh-token",
    ),
    TokenFormat(
        "vault-token",
        r"\bhv[sb]\.[A-Za-z0-9_-]{90,}",
        f"{_GL} vault-service-token, vault-batch-token",
    ),
    TokenFormat("huggingface-token", r"\bhf_[A-Za-z]{34}", f"{_GL} huggingface-access-token"),
    TokenFormat("databricks-token", r"\bdapi[a-f0-9]{32}", f"{_GL} databricks-api-token"),
    TokenFormat("twilio-api-key", r"\bSK[0-9a-fA-F]{32}\b", f"{_GL} twilio-api-key"),
    TokenFormat("mailgun-api-key", r"\bkey-[0-9a-f]{32}\b", f"{_GL} mailgun-private-api-token"),
    TokenFormat("linear-api-key", r"\blin_api_[A-Za-z0-9]{40}", f"{_GL} linear-api-key"),
    TokenFormat("doppler-token", r"\bdp\.pt\.[A-Za-z0-9]{43}", f"{_GL} doppler-api-token"),
    TokenFormat("postman-api-key", r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}", f"{_GL} postman-api-token"),
    TokenFormat(
        "grafana-token",
        r"\bglsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|\bglc_[A-Za-z0-9+/]{32,}",
        f"{_GL} grafana-service-account-token, grafana-cloud-api-token",
    ),
    TokenFormat(
        "age-secret-key",
        r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
        f"{_GL} age-secret-key",
    ),
    TokenFormat(
        "jwt",
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.",
        f"{_GL} jwt (RFC 7519: base64url JSON header and claims)",
    ),
    TokenFormat(
        "authorization-header",
        r"(?i)\b(?:proxy-)?authorization\s*:\s*\S",
        "RFC 9110 11.6.2 / 11.7.2; git-config http.extraHeader (GIT_CONFIG_VALUE_n)",
    ),
    TokenFormat(
        "bearer-credential",
        r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{16,}",
        "RFC 6750 2.1 (b64token after 'Bearer')",
    ),
    TokenFormat(
        "connection-string-password",
        r"(?i)(?:^|;)\s*(?:password|pwd)\s*=\s*[^;\s]",
        "Microsoft docs, SqlConnection.ConnectionString / ODBC (Password=, PWD=)",
    ),
    TokenFormat(
        "azure-storage-account-key",
        r"(?i)\b(?:AccountKey|SharedAccessKey)=[A-Za-z0-9+/=]{20,}",
        "Azure docs, storage and Service Bus connection strings",
    ),
)

_COMBINED = re2.compile("|".join(f"({f.pattern})" for f in TOKEN_FORMATS))


def token_format(value: str) -> str | None:
    """The id of the leftmost known credential format in ``value``, or None."""
    match = _COMBINED.search(value)
    if match is None:
        return None
    for index, found in enumerate(match.groups()):
        if found is not None:
            return TOKEN_FORMATS[index].id
    return None  # unreachable: one group always took part in a match


def shown(value: object, limit: int = 40) -> str:
    """`repr(value)` cut to `limit` characters, or a placeholder when it holds a credential."""
    text = value if isinstance(value, str) else repr(value)
    found = token_format(text)
    if found is not None:
        return f"<not shown: a credential ({found})>"
    return repr(value)[:limit]
