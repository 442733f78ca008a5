"""The llm scenario's client (bench/llmcost.py): `--calls` streamed chat completions with
the OpenAI Python SDK, one after another on one kept-alive connection, each asking for
the usage chunk (`stream_options.include_usage`), so the upstream sends the same bytes
whether or not the proxy meters. Each call is checked (the model server's text and a
final usage chunk, else exit 1: a failing call is never timed as a fast one); stdout is
`{"seconds": [...]}`, each call's wall time from the request to the stream's end."""

from __future__ import annotations

import argparse
import json
import time

from openai import DefaultHttpxClient, OpenAI

TEXT = "the quick brown fox jumps"  # testbed/model_server.py's answer
MODEL = "gpt-5-mini"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.llmclient")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--cafile", required=True)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--proxy")
    args = parser.parse_args(argv)
    http = DefaultHttpxClient(proxy=args.proxy, verify=args.cafile, trust_env=False)
    client = OpenAI(api_key="sk-bench-llm", base_url=args.base_url, http_client=http, max_retries=0)
    seconds = []
    for _ in range(args.calls):
        started = time.perf_counter()
        stream = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "next step?"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        seconds.append(time.perf_counter() - started)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        usage = chunks[-1].usage if chunks else None
        if text.strip() != TEXT or usage is None or not usage.total_tokens:
            raise SystemExit(f"llmclient: unexpected answer {text!r}, usage {usage!r}")
    print(json.dumps({"seconds": seconds}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
