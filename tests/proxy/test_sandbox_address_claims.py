"""A sandbox file cannot claim another sandbox's client address in another spelling
(D429): `::ffff:10.1.2.3` is 10.1.2.3 (a dual-stack listener sees IPv4 clients so), and
an address with a zone (`fe80::1%eth0`) identifies nothing."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.tenancy.sandboxes import SandboxDirectory, SandboxesSection
from sandbox_egress.proxy.tenancy.tenants import Tenancy

NETWORK = "network:\n  allowlist: [a.test]\n"


def test_an_ipv4_mapped_spelling_of_a_held_address_is_refused(tmp_path: Path) -> None:
    (tmp_path / "victim.yaml").write_text("addresses: [10.1.2.3]\n" + NETWORK)
    directory = SandboxDirectory(tmp_path)
    assert directory.scan().changed == {"victim"}
    (tmp_path / "thief.yaml").write_text("addresses: ['::ffff:10.1.2.3']\n" + NETWORK)
    found = directory.scan()
    assert directory.invalid == {"thief"} and "thief" not in directory.sandboxes
    assert [(p.location, p.message) for p in found.problems] == [
        ("addresses", "10.1.2.3 already identifies sandbox victim")
    ]
    node = Policy(parse({"network": {"allowlist": ["a.test"]}}, "node.yaml", {}))
    tenancy = Tenancy(SandboxesSection(tmp_path), node).rebuilt(
        directory.sandboxes, node, frozenset(directory.sandboxes)
    )
    for client in ("10.1.2.3", "::ffff:10.1.2.3"):
        assert tenancy.claimant(ipaddress.ip_address(client)) == "victim"


def test_a_mapped_address_identifies_its_ipv4_client(tmp_path: Path) -> None:
    (tmp_path / "one.yaml").write_text("addresses: ['::ffff:10.9.9.9']\n" + NETWORK)
    directory = SandboxDirectory(tmp_path)
    assert directory.scan().changed == {"one"}
    assert directory.sandboxes["one"].addresses == {ipaddress.ip_address("10.9.9.9")}


def test_an_address_with_a_zone_is_refused(tmp_path: Path) -> None:
    (tmp_path / "zoned.yaml").write_text("addresses: ['fe80::1%eth0']\n" + NETWORK)
    directory = SandboxDirectory(tmp_path)
    found = directory.scan()
    assert directory.invalid == {"zoned"}
    assert [(p.location, p.message) for p in found.problems] == [
        ("addresses[0]", "an address with a zone (%...) cannot identify a sandbox")
    ]


def test_an_address_two_new_files_claim_goes_to_neither(tmp_path: Path) -> None:
    """At start (or two files added at once) no file order decides whose an address is: a
    thief named to sort first would win every restart (D429). Both are refused."""
    (tmp_path / "zz-victim.yaml").write_text("addresses: [10.1.2.3, 10.1.2.4]\n" + NETWORK)
    (tmp_path / "aa-thief.yaml").write_text("addresses: [10.1.2.3]\n" + NETWORK)
    (tmp_path / "other.yaml").write_text("addresses: [10.1.2.9]\n" + NETWORK)
    directory = SandboxDirectory(tmp_path)
    found = directory.scan()
    assert set(directory.sandboxes) == {"other"}
    assert directory.invalid == {"aa-thief", "zz-victim"}
    messages = sorted((Path(p.file).name, p.message) for p in found.problems)
    assert messages == [
        ("aa-thief.yaml", "10.1.2.3 is claimed by another new sandbox file too (zz-victim)"),
        ("zz-victim.yaml", "10.1.2.3 is claimed by another new sandbox file too (aa-thief)"),
    ]
    # The thief's file removed: the victim's, unchanged, is read again at the next change.
    (tmp_path / "aa-thief.yaml").unlink()
    (tmp_path / "zz-victim.yaml").write_text("addresses: [10.1.2.3]\n" + NETWORK + "# again\n")
    assert directory.scan().changed == {"zz-victim"}
    # A holder keeps its address: a later claim is refused (the holder is not touched).
    (tmp_path / "aa-thief.yaml").write_text("addresses: [10.1.2.3]\n" + NETWORK)
    assert directory.scan().problems[0].message == "10.1.2.3 already identifies sandbox zz-victim"
    assert directory.sandboxes["zz-victim"].addresses == {ipaddress.ip_address("10.1.2.3")}
