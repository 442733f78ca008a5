"""An AI SDK as a sandbox runs it, holding only a placeholder key:
`python sdk_client.py openai|anthropic BASE_URL KEY`.

The SDK takes the proxy from `HTTPS_PROXY` and the CA from `SSL_CERT_FILE` (httpx,
trust_env), sends one chat/messages request with KEY as its API key, and prints one
JSON line: `{"status", "body"}` (the answer as text, unparsed: the test upstream echoes
the request rather than speaking the API), or `{"error": "..."}` (exit 1).
"""

from __future__ import annotations

import json
import sys
from typing import Any

MESSAGES: list[Any] = [{"role": "user", "content": "hello"}]


def with_openai(base_url: str, key: str) -> tuple[int, str]:
    import openai

    client = openai.OpenAI(api_key=key, base_url=base_url, max_retries=0, timeout=60)
    try:
        raw = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)
    except openai.APIStatusError as exc:
        return exc.status_code, exc.response.text
    return raw.http_response.status_code, raw.http_response.text


def with_anthropic(base_url: str, key: str) -> tuple[int, str]:
    import anthropic

    client = anthropic.Anthropic(api_key=key, base_url=base_url, max_retries=0, timeout=60)
    try:
        raw = client.messages.with_raw_response.create(model="m", max_tokens=1, messages=MESSAGES)
    except anthropic.APIStatusError as exc:
        return exc.status_code, exc.response.text
    return raw.http_response.status_code, raw.http_response.text


def main() -> int:
    sdk, base_url, key = sys.argv[1:4]
    try:
        status, body = (with_openai if sdk == "openai" else with_anthropic)(base_url, key)
    except Exception as exc:  # noqa: BLE001 (the test reads the failure)
        causes = [exc]
        while causes[-1].__cause__ is not None and len(causes) < 5:
            causes.append(causes[-1].__cause__)
        print(json.dumps({"error": " <- ".join(f"{type(e).__name__}: {e}" for e in causes)}))
        return 1
    print(json.dumps({"status": status, "body": body}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
