"""Sandbox files, the watched directory, and identifying a client (1.12)."""

from __future__ import annotations

import base64
import ipaddress
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox_egress.proxy.config import ConfigError, parse
from sandbox_egress.proxy.hosts import canonical_host
from sandbox_egress.proxy.identity import Failure, Identity, credentials, identify
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.sandboxes import (
    Identify,
    SandboxDirectory,
    SandboxesSection,
    load_sandbox,
    node_section,
    parse_sandbox,
    parse_section,
)
from sandbox_egress.proxy.tenancy import Tenancy

TOKEN = "t0ken-of-sandbox-alpha"
NODE = Policy(parse({"network": {"allowlist": [{"domain": "*"}]}}, "node.yaml", {}))


def problems(document: Any) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_sandbox(document, "sbx.yaml", "sbx")
    return [str(p) for p in caught.value.problems]


def test_a_sandbox_file_parses_with_the_node_entry_parser(tmp_path: Path) -> None:
    (tmp_path / "alpha").mkdir()
    (tmp_path / "alpha" / "token").write_text(TOKEN + "\n")
    document = {
        "token": f"${{file:{tmp_path}/alpha/token}}",
        "class": "ci-runner",
        "addresses": ["198.18.0.2", " 2001:db8::2 "],
        "network": {"allowlist": [{"domain": "API.example.com", "transform": {"X-K": "v"}}]},
    }
    sandbox = parse_sandbox(document, "alpha.yaml", "alpha", tmp_path)
    assert sandbox.id == "alpha" and sandbox.sandbox_class == "ci-runner"
    assert sandbox.token is not None and sandbox.token.reveal() == TOKEN
    assert TOKEN not in repr(sandbox)
    assert sandbox.addresses == {
        ipaddress.ip_address("198.18.0.2"),
        ipaddress.ip_address("2001:db8::2"),
    }
    assert sandbox.network.allowlist[0].pattern == "api.example.com"
    bare = parse_sandbox({"network": None}, "b.yaml", "b")
    assert (bare.token, bare.sandbox_class, bare.network.allowlist) == (None, "default", ())


SANDBOX_PROBLEMS = [
    (
        "no-network",
        {"token": TOKEN},
        ["sbx.yaml: network: required: the sandbox's allowlist"],
    ),
    ("not-a-mapping", ["x"], ["sbx.yaml: the file must be a mapping with a 'network' section"]),
    (
        "unknown-key",
        {"network": {}, "tokne": "x"},
        [
            "sbx.yaml: tokne: unknown key (expected: addresses, class, network, token); did you mean 'token'?"
        ],
    ),
    (
        "entry-located",
        {"network": {"allowlist": [{"domain": "*foo.com"}]}},
        [
            "sbx.yaml: network.allowlist[0].domain: a wildcard may only be a single leading '*.' label, or '*' alone (got '*foo.com')"
        ],
    ),
    (
        "a-variable",
        {"token": "${HOME}", "network": {}},
        [
            "sbx.yaml: token: ${HOME} is refused in a sandbox file: it would read the node proxy's environment"
        ],
    ),
    (
        "short-token",
        {"token": "short", "network": {}},
        ["sbx.yaml: token: must be at least 16 characters, without ':', CR, LF, NUL"],
    ),
    (
        "colon-token",
        {"token": "abcdefgh:ijklmnopq", "network": {}},
        ["sbx.yaml: token: must be at least 16 characters, without ':', CR, LF, NUL"],
    ),
    (
        "bad-class",
        {"class": "CI Runner", "network": {}},
        [
            "sbx.yaml: class: must be lowercase letters, digits, '.', '_' or '-' (at most 63), starting with a letter or digit"
        ],
    ),
    (
        "bad-address",
        {"addresses": ["10.0.0.300"], "network": {}},
        ["sbx.yaml: addresses[0]: not an IP address (got '10.0.0.300')"],
    ),
    (
        "address-type",
        {"addresses": "10.0.0.1", "network": {}},
        ["sbx.yaml: addresses: must be a list of IP addresses"],
    ),
]


@pytest.mark.parametrize(
    ("document", "expected"),
    [c[1:] for c in SANDBOX_PROBLEMS],
    ids=[c[0] for c in SANDBOX_PROBLEMS],
)
def test_sandbox_problems_are_located(document: Any, expected: list[str]) -> None:
    assert problems(document) == expected


def test_a_secret_never_appears_in_a_problem() -> None:
    found = problems({"token": TOKEN, "network": {"allowlist": [{"domain": "x", "ports": [0]}]}})
    assert all(TOKEN not in p for p in found)


SECTIONS = [
    ("absent", {"network": {}}, None),
    (
        "defaults",
        {"sandboxes": {"directory": "/etc/egress/sandboxes"}},
        SandboxesSection(Path("/etc/egress/sandboxes")),
    ),
    (
        "address-only",
        {"sandboxes": {"directory": "/d", "identify": ["source_address"], "max_connections": 4}},
        SandboxesSection(Path("/d"), (Identify.SOURCE_ADDRESS,), 4),
    ),
]


@pytest.mark.parametrize(
    ("document", "expected"), [c[1:] for c in SECTIONS], ids=[c[0] for c in SECTIONS]
)
def test_node_section(document: Any, expected: SandboxesSection | None) -> None:
    assert parse_section(document, "node.yaml") == expected


SECTION_PROBLEMS = [
    (
        "no-directory",
        {"identify": ["proxy_auth"]},
        "node.yaml: sandboxes.directory: required: the directory of the sandbox files",
    ),
    (
        "bad-method",
        {"directory": "/d", "identify": ["password"]},
        "node.yaml: sandboxes.identify[0]: must be proxy_auth or source_address",
    ),
    (
        "empty-methods",
        {"directory": "/d", "identify": []},
        "node.yaml: sandboxes.identify: must be a non-empty list of proxy_auth, source_address",
    ),
    (
        "bound",
        {"directory": "/d", "max_connections": 0},
        "node.yaml: sandboxes.max_connections: must be a positive integer",
    ),
    (
        "unknown",
        {"directory": "/d", "dir": "/d"},
        "node.yaml: sandboxes.dir: unknown key (expected: directory, identify, max_connections, secrets)",
    ),
]


@pytest.mark.parametrize(
    ("raw", "expected"), [c[1:] for c in SECTION_PROBLEMS], ids=[c[0] for c in SECTION_PROBLEMS]
)
def test_node_section_problems(raw: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_section({"sandboxes": raw}, "node.yaml")
    assert [str(p) for p in caught.value.problems] == [expected]


def test_relative_directory_is_beside_the_node_file(tmp_path: Path) -> None:
    node = tmp_path / "node.yaml"
    node.write_text("network: {}\nsandboxes: {directory: sandboxes}\n")
    found = node_section(node)
    assert found is not None and found.directory == tmp_path / "sandboxes"


# -- the watched directory -------------------------------------------------------------------


def write(directory: Path, name: str, document: Any) -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(document))
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000))  # a visible change, always
    return path


def allow(*domains: str) -> dict[str, Any]:
    return {"network": {"allowlist": [{"domain": d} for d in domains]}}


def test_scan_adds_changes_removes_and_keeps_the_last_good(tmp_path: Path) -> None:
    directory = SandboxDirectory(tmp_path)
    write(tmp_path, "alpha.yaml", allow("a.example.com"))
    write(tmp_path, "beta.yaml", allow("b.example.com"))
    write(tmp_path, ".hidden.yaml", allow("x.example.com"))
    write(tmp_path, "notes.txt", "not a sandbox")
    first = directory.scan()
    assert (first.changed, first.removed, first.problems) == ({"alpha", "beta"}, set(), ())
    assert directory.scan().changed == set()  # nothing changed: nothing read
    write(tmp_path, "beta.yaml", allow("c.example.com"))
    assert directory.scan().changed == {"beta"}
    assert directory.sandboxes["beta"].network.allowlist[0].pattern == "c.example.com"
    write(tmp_path, "beta.yaml", {"network": {"allowlist": [{"domain": "**"}]}})
    invalid = directory.scan()
    assert invalid.changed == set() and [p.location for p in invalid.problems] == [
        "network.allowlist[0].domain"
    ]
    assert directory.sandboxes["beta"].network.allowlist[0].pattern == "c.example.com"  # last good
    assert directory.invalid == {"beta"}
    write(tmp_path, "gamma.yaml", {"network": {}, "class": "BAD"})
    assert directory.scan().problems[0].file == str(tmp_path / "gamma.yaml")
    assert "gamma" not in directory.sandboxes  # a new sandbox is refused
    (tmp_path / "alpha.yaml").unlink()
    removed = directory.scan()
    assert removed.removed == {"alpha"} and set(directory.sandboxes) == {"beta"}
    write(tmp_path, "beta.yaml", allow("d.example.com"))
    assert directory.scan().changed == {"beta"} and directory.invalid == {"gamma"}


def test_an_address_identifies_one_sandbox(tmp_path: Path) -> None:
    directory = SandboxDirectory(tmp_path)
    write(tmp_path, "alpha.yaml", {**allow(), "addresses": ["198.18.0.2"]})
    directory.scan()
    write(tmp_path, "beta.yaml", {**allow(), "addresses": ["198.18.0.2"]})
    found = directory.scan()
    assert [str(p) for p in found.problems] == [
        f"{tmp_path / 'beta.yaml'}: addresses: 198.18.0.2 already identifies sandbox alpha"
    ]
    assert set(directory.sandboxes) == {"alpha"}


def test_an_unlistable_directory_keeps_every_sandbox(tmp_path: Path) -> None:
    directory = SandboxDirectory(tmp_path / "sub")
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "alpha.yaml", allow())
    directory.scan()
    (tmp_path / "sub" / "alpha.yaml").rename(tmp_path / "alpha.yaml")
    (tmp_path / "sub").rmdir()
    assert directory.scan().problems[0].message.startswith("cannot list")
    assert set(directory.sandboxes) == {"alpha"}


def test_a_file_not_named_like_a_sandbox_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "bad name.yaml", allow())
    with pytest.raises(ConfigError):
        load_sandbox(path)


# -- identity --------------------------------------------------------------------------------


def basic(user: str, token: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()


def tenancy(*identify_by: Identify) -> Tenancy:
    alpha = parse_sandbox(
        {"token": TOKEN, "addresses": ["198.18.0.2"], **allow("a.example.com")}, "a", "alpha"
    )
    beta = parse_sandbox({"token": "t0ken-of-sandbox-beta", **allow()}, "b", "beta")
    section = SandboxesSection(Path("/d"), identify_by or tuple(Identify))
    return Tenancy(section, NODE).rebuilt({"alpha": alpha, "beta": beta}, NODE, frozenset())


A = ipaddress.ip_address("198.18.0.2")
OTHER = ipaddress.ip_address("198.18.0.9")
BOTH = tenancy()
AUTH_ONLY = tenancy(Identify.PROXY_AUTH)
ADDRESS_ONLY = tenancy(Identify.SOURCE_ADDRESS)
REQUIRED, UNKNOWN = Identity(failure=Failure.AUTH_REQUIRED), Identity(failure=Failure.UNKNOWN)

IDENTITIES = [
    # (id, tenancy, Proxy-Authorization, client address, transparent, expected)
    ("credentials", BOTH, basic("alpha", TOKEN), OTHER, False, Identity("alpha")),
    (
        "other-sandbox-credentials",
        BOTH,
        basic("beta", "t0ken-of-sandbox-beta"),
        A,
        False,
        Identity("beta"),
    ),
    ("wrong-token", BOTH, basic("alpha", "t0ken-of-sandbox-beta"), A, False, REQUIRED),
    ("another-sandbox-token", BOTH, basic("beta", TOKEN), OTHER, False, REQUIRED),
    ("unknown-id", BOTH, basic("gamma", TOKEN), OTHER, False, REQUIRED),
    ("token-prefix", BOTH, basic("alpha", TOKEN[:-1]), OTHER, False, REQUIRED),
    ("not-basic", BOTH, "Bearer " + TOKEN, OTHER, False, REQUIRED),
    ("not-base64", BOTH, "Basic !!!", OTHER, False, REQUIRED),
    ("no-colon", BOTH, "Basic " + base64.b64encode(b"alpha").decode(), OTHER, False, REQUIRED),
    ("no-credentials-address", BOTH, None, A, False, Identity("alpha")),
    ("no-credentials-unknown-address", BOTH, None, OTHER, False, REQUIRED),
    ("auth-only-ignores-address", AUTH_ONLY, None, A, False, REQUIRED),
    (
        "address-only-ignores-credentials",
        ADDRESS_ONLY,
        basic("beta", "t0ken-of-sandbox-beta"),
        A,
        False,
        Identity("alpha"),
    ),
    ("address-only-unknown", ADDRESS_ONLY, None, OTHER, False, UNKNOWN),
    ("transparent-address", BOTH, None, A, True, Identity("alpha")),
    ("transparent-unknown", BOTH, None, OTHER, True, UNKNOWN),
    ("transparent-no-address", BOTH, None, None, True, UNKNOWN),
]


@pytest.mark.parametrize(
    ("tenancy", "header", "address", "transparent", "expected"),
    [c[1:] for c in IDENTITIES],
    ids=[c[0] for c in IDENTITIES],
)
def test_identify(
    tenancy: Tenancy, header: str | None, address: Any, transparent: bool, expected: Identity
) -> None:
    assert identify(tenancy, header, address, transparent) == expected


def test_credentials_parse() -> None:
    assert credentials(basic("sbx-42", "tok:en")) == ("sbx-42", b"tok:en")
    assert credentials("basic   " + base64.b64encode(b"a:b").decode()) == ("a", b"b")
    assert credentials("Basic " + base64.b64encode(b"\xff:b").decode()) is None


def test_the_policy_follows_the_identity() -> None:
    alpha = BOTH.policy("alpha")
    assert alpha.decide(canonical_host("a.example.com"), 443, tls=True).allowed


def test_a_file_no_parser_survives_is_refused_and_the_others_load(tmp_path: Path) -> None:
    """Issue 43: a bad sandbox file never stops the node. A file nested deeper than the
    parser's recursion limit raised RecursionError out of the scan (at start: the node
    exited; in the watch: the watch died). It is refused like any invalid file."""
    (tmp_path / "deep.yaml").write_text("network: " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp_path / "deeper.yaml").write_text(
        "network:\n  allowlist:\n    - domain: a.test\n      transform: {X: "
        + "{a: " * 3000
        + "1"
        + "}" * 3000
        + "}\n"
    )
    write(tmp_path, "alpha.yaml", allow("a.example.com"))
    directory = SandboxDirectory(tmp_path)
    found = directory.scan()
    assert found.changed == {"alpha"}
    assert sorted((Path(p.file).name, p.location, p.message) for p in found.problems) == [
        ("deep.yaml", "", "cannot be read: nested too deeply"),
        ("deeper.yaml", "", "cannot be read: nested too deeply"),
    ]
    assert directory.invalid == {"deep", "deeper"}


def test_a_sandbox_file_that_is_not_a_plain_file_of_the_directory_is_refused(
    tmp_path: Path,
) -> None:
    """Issue 43: whoever writes sandbox files can put a FIFO (the scan blocked forever on
    it: at start the node never listened), a link to /dev/zero (read without end), a
    link out of the directory, a directory or a huge file there. Each is refused; the
    others load."""
    import threading

    directory = tmp_path / "sandboxes"
    directory.mkdir()
    write(directory, "alpha.yaml", allow("a.example.com"))
    os.mkfifo(directory / "fifo.yaml")
    (directory / "zero.yaml").symlink_to("/dev/zero")
    write(tmp_path, "outside.yaml", allow("b.example.com"))
    (directory / "out.yaml").symlink_to("../outside.yaml")
    (directory / "dir.yaml").mkdir()
    (directory / "big.yaml").write_text("network: {}\n" + "#" * (256 * 1024) + "\n")
    (directory / "..2026_12_06").mkdir()  # Kubernetes' rotation inside: still read
    write(directory / "..2026_12_06", "rotated.yaml", allow("c.example.com"))
    (directory / "rotated.yaml").symlink_to("..2026_12_06/rotated.yaml")
    found: list[Any] = []
    scanner = SandboxDirectory(directory)
    worker = threading.Thread(target=lambda: found.append(scanner.scan()), daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "the scan hung"
    (scan,) = found
    assert scan.changed == {"alpha", "rotated"}
    assert sorted((Path(p.file).name, p.message) for p in scan.problems) == [
        ("big.yaml", "cannot read file: larger than 262144 bytes"),
        ("dir.yaml", "cannot read file: not a regular file"),
        ("fifo.yaml", "cannot read file: not a regular file"),
        ("out.yaml", "cannot read file: it leads outside the sandboxes directory"),
        ("zero.yaml", "cannot read file: it leads outside the sandboxes directory"),
    ]
