"""One replica of the fleet test (tests/proxy/credentials/test_fleet.py), in its own
process: an `oauth2` refresh-token minter sharing a real Redis through `Fleet` (or, with
`--alone`, refreshing by itself as before issue 34's lock). Each line `fetch` on stdin
mints through the minter, calls the forge's API with the token, and prints one JSON line:
the API's status and the error, if any."""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import threading
import urllib.error
import urllib.request

from sandbox_egress.proxy.credentials.base import CacheSettings, CredentialError
from sandbox_egress.proxy.credentials.fleet import Fleet
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.credentials.oauth2 import OAuth2
from sandbox_egress.proxy.state.backends import open_state
from sandbox_egress.proxy.state.settings import StateConfig
from sandbox_egress.proxy.values.secret import Secret


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--forge", "--ca", "--redis", "--state-file"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--alone", action="store_true")
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    state = open_state(StateConfig("redis", args.redis, key_prefix="fleet", timeout_s=5.0))
    spec = OAuth2(
        "refresh_token",
        f"{args.forge}/token",
        Secret("client-1"),
        Secret("client-secret-1"),
        CacheSettings(refresh_before=0.0, timeout=10),
        refresh_token=Secret("refresh-0"),
        state_file=args.state_file,
    ).source(Https(args.ca))
    if not args.alone:
        spec = spec.shared("mail", Fleet(state, loop))
    context = ssl.create_default_context(cafile=args.ca)
    for line in sys.stdin:
        if line.strip() != "fetch":
            continue
        try:
            token = spec.fetch().value.reveal()
        except CredentialError as exc:
            print(json.dumps({"status": 0, "error": str(exc)}), flush=True)
            continue
        ask = urllib.request.Request(
            f"{args.forge}/api/me", headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(ask, context=context, timeout=10) as answer:
                status = answer.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        print(json.dumps({"status": status, "error": ""}), flush=True)


if __name__ == "__main__":
    main()
