"""bench.connmem's `--without` and bench.tlsmem's issue 49 variants (D595, D596): the
same run's figure with and without one change measures what it says."""

from __future__ import annotations

import pytest

from bench import connmem, tlsmem
from sandbox_egress.runtime.engine import lean


def test_without_makes_the_engine_without_that_addon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lean, "lean_addons", lean.lean_addons)
    every = [type(a).__name__ for a in lean.lean_addons()]
    connmem._without(["DropUpstreamChainCopy"])
    left = [type(a).__name__ for a in lean.lean_addons()]
    assert "DropUpstreamChainCopy" in every
    assert left == [name for name in every if name != "DropUpstreamChainCopy"]


def test_without_a_name_the_engine_does_not_have_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lean, "lean_addons", lean.lean_addons)
    connmem._without(["NoSuchAddon"])
    with pytest.raises(SystemExit, match="NoSuchAddon"):
        lean.lean_addons()


def test_the_free_buffers_variant_calls_openssl() -> None:
    """`SSL_free_buffers`, placed from the module's symbol table, answers 1 on an idle pair
    (it ran: D596's figure is not a no-op's)."""
    from OpenSSL import SSL

    from sandbox_egress.runtime.engine import tickets

    free_buffers = tlsmem._free_buffers()
    made = SSL.Connection(SSL.Context(SSL.TLS_CLIENT_METHOD))
    assert free_buffers(tickets._address(made._ssl)) == 1


@pytest.mark.parametrize("variant", ["pair, free buffers", "pair, upstream tickets"])
def test_each_variant_measures_a_tls13_pair(variant: str) -> None:
    found = tlsmem.measure(tlsmem.VARIANTS[variant], 5)
    assert found["group"] == "X25519MLKEM768"
    assert found["ssl"] == 2
    assert found["bytes"] > 0
