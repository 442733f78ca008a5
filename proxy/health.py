"""`egress-proxy health`: one probe of the metrics listener's `/healthz`.

For container health checks and Kubernetes exec probes, so that they are one
short command instead of an inline script.

Invariants:
* Only the given address is contacted, directly: `http.client` never consults
  `HTTP_PROXY`/`HTTPS_PROXY`, so a sandbox-style environment cannot send the
  probe elsewhere.
* Healthy means exactly status 200; anything else (another status, a refused or
  timed-out connection) is unhealthy. The whole probe is bounded by `timeout`.
* A wildcard listen address (0.0.0.0, ::) is probed on the matching loopback,
  so `--metrics` can be copied from the `run` command unchanged.
"""

from __future__ import annotations

import http.client
from dataclasses import dataclass

from sandbox_egress.common.endpoint import format_endpoint

DEFAULT_TIMEOUT = 3.0
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


@dataclass(frozen=True)
class Health:
    """The outcome of one probe: `healthy` and a one-line description for humans."""

    healthy: bool
    detail: str


def probe(host: str, port: int, timeout: float = DEFAULT_TIMEOUT) -> Health:
    """GET http://host:port/healthz once; healthy when the answer is 200."""
    target = _WILDCARDS.get(host, host)
    connection = http.client.HTTPConnection(target, port, timeout=timeout)
    shown = format_endpoint(target, port)
    try:
        connection.request("GET", "/healthz", headers={"Connection": "close"})
        response = connection.getresponse()
        response.read(1024)
    except (OSError, http.client.HTTPException) as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
        message = getattr(exc, "strerror", None) or reason
        return Health(False, f"http://{shown}/healthz: {message}")
    finally:
        connection.close()
    detail = f"http://{shown}/healthz: {response.status} {response.reason}"
    return Health(response.status == 200, detail)
