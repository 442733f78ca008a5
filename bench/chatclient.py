"""The replayed session's chat part (bench/session.py): `--calls` streamed chat
completions with the OpenAI Python SDK, one after another, as an agent makes them."""

from __future__ import annotations

import argparse

from openai import DefaultHttpxClient, OpenAI


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--cafile", required=True)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--proxy")
    args = parser.parse_args()
    http = DefaultHttpxClient(proxy=args.proxy, verify=args.cafile, trust_env=False)
    client = OpenAI(api_key="sk-bench-session", base_url=args.base_url, http_client=http)
    words = 0
    for _ in range(args.calls):
        stream = client.chat.completions.create(
            model="bench-model",
            messages=[{"role": "user", "content": "next step?"}],
            stream=True,
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                words += 1
    if words != args.calls * 20:
        raise SystemExit(f"chatclient: {words} deltas, expected {args.calls * 20}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
