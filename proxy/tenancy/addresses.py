"""A sandbox file's `addresses` (docs/configuration.md#sandboxes): the client addresses that
identify it with `identify: [source_address]`.

Invariants:
* An address is held in one spelling: an IPv4-mapped IPv6 address (`::ffff:10.1.2.3`, how
  a dual-stack listener sees an IPv4 client) is its IPv4 address, in a file and for a
  client (`client_address`), so no file claims another's address in another spelling
  (D429). An address with a zone (`fe80::1%eth0`) is refused.
* An address identifies at most one sandbox: `claims` says which a file may not take (a
  holder keeps its address), `rivals` which files read together claim one address
  nobody holds (none of them gets it: no file order decides, D429).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sandbox_egress.common.problems import Problem
from sandbox_egress.common.tokens import shown
from sandbox_egress.proxy.hosts import IPAddress

Report = Callable[[str, str], None]  # (location, message)


def parse_addresses(raw: Any, report: Report) -> frozenset[IPAddress]:
    found: set[IPAddress] = set()
    for index, text in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(text, str):
            continue  # refused by the schema
        try:
            address = ipaddress.ip_address(text.strip())
        except ValueError:
            report(f"addresses[{index}]", f"not an IP address (got {shown(text)})")
            continue
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
            report(f"addresses[{index}]", "an address with a zone (%...) cannot identify a sandbox")
            continue
        found.add(client_address(address))  # ::ffff:10.1.2.3 is 10.1.2.3 (D429)
    return frozenset(found)


def client_address(address: IPAddress) -> IPAddress:
    """`address` as it identifies a sandbox: an IPv4-mapped IPv6 address is its IPv4."""
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return address if mapped is None else mapped


def claims(
    sandbox: str, addresses: frozenset[IPAddress], path: Path, holders: Mapping[IPAddress, str]
) -> list[Problem]:
    """An address another sandbox holds cannot identify this one too."""
    problems = []
    for address in sorted(addresses, key=str):
        holder = holders.get(address)
        if holder is not None and holder != sandbox:
            message = f"{address} already identifies sandbox {holder}"
            problems.append(Problem(str(path), "addresses", message))
    return problems


def rivals(
    fresh: Mapping[str, tuple[Path, frozenset[IPAddress]]], holders: Mapping[IPAddress, str]
) -> dict[str, list[Problem]]:
    """The files read in one scan (id: path, addresses) that claim an address no sandbox
    holds and another of them claims too: no file order decides whose it is (a file named
    to sort first would win every start, D429), so none of them gets it."""
    claimants: dict[IPAddress, list[str]] = {}
    for sandbox, (_, addresses) in fresh.items():
        for address in addresses:
            if address not in holders:
                claimants.setdefault(address, []).append(sandbox)
    problems: dict[str, list[Problem]] = {}
    for address, named in sorted(claimants.items(), key=lambda item: str(item[0])):
        for sandbox in named if len(named) > 1 else ():
            others = ", ".join(sorted(n for n in named if n != sandbox))
            message = f"{address} is claimed by another new sandbox file too ({others})"
            problems.setdefault(sandbox, []).append(
                Problem(str(fresh[sandbox][0]), "addresses", message)
            )
    return problems
