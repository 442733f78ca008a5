"""What a sandbox file may read (issue 43, D340): no `${NAME}` of the node's
environment, and `${file:}` only its own files of `sandboxes.secrets`, after symlinks:
below `<secrets>/<sandbox-id>/`, or flat, `<secrets>/<sandbox-id>.<name>`.

A real directory tree in tmp_path, laid out as an attacker would want it: another
sandbox's secret beside this one's, the node's own secret file, symlinks out of the
directory (to another sandbox, to /proc/self/environ), `..`, a directory, a FIFO that
never ends, an oversized file, and a Kubernetes-style `..data` rotation that must keep
working. Each case names the exact problem, located in the file.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.config.loader import ConfigError
from sandbox_egress.proxy.tenancy.files import MAX_FILE_BYTES, Confined
from sandbox_egress.proxy.tenancy.sandboxes import parse_sandbox

ALPHA_VALUE, BETA_VALUE, NODE_VALUE = "alpha-own-secret-0001", "beta-secret-0002", "node-0003"
ROTATED_VALUE = "alpha-rotated-secret-0004"
FLAT_VALUE = "alpha-flat-secret-0005"


def layout(root: Path) -> Path:
    """`root/secrets/{alpha,beta}/...` and the node's secret beside it; the secrets dir."""
    secrets = root / "secrets"
    alpha, beta = secrets / "alpha", secrets / "beta"
    alpha.mkdir(parents=True)
    beta.mkdir()
    (alpha / "key").write_text(ALPHA_VALUE + "\n")
    (beta / "key").write_text(BETA_VALUE + "\n")
    (root / "node-secret").write_text(NODE_VALUE + "\n")
    (alpha / "to-beta").symlink_to("../beta/key")
    (alpha / "to-node").symlink_to(root / "node-secret")
    (alpha / "to-environ").symlink_to("/proc/self/environ")
    (alpha / "dir").mkdir()
    os.mkfifo(alpha / "fifo")
    (alpha / "big").write_text("x" * (MAX_FILE_BYTES + 1))
    (alpha / "empty").write_text("\n")
    # Kubernetes' atomic writer: ..data -> ..<timestamp>, each key a symlink through it.
    (alpha / "..2026_12_06").mkdir()
    (alpha / "..2026_12_06" / "rotated").write_text(ROTATED_VALUE)
    (alpha / "..data").symlink_to("..2026_12_06")
    (alpha / "rotated").symlink_to("..data/rotated")
    # The flat layout (one Kubernetes Secret's keys, `<id>.<name>`), rotated the same way.
    (secrets / "..2026_12_07").mkdir()
    (secrets / "..2026_12_07" / "alpha.token").write_text(FLAT_VALUE)
    (secrets / "..2026_12_07" / "beta.token").write_text(BETA_VALUE)
    (secrets / "..2026_12_07" / "alpha.b.token").write_text(BETA_VALUE)
    (secrets / "..data").symlink_to("..2026_12_07")
    for name in ("alpha.token", "beta.token", "alpha.b.token"):
        (secrets / name).symlink_to(f"..data/{name}")
    (secrets / "alpha.link").symlink_to("..data/beta.token")  # named alpha's, is beta's
    (secrets / "alpha.up").symlink_to("../node-secret")
    return secrets


@pytest.fixture
def secrets(tmp_path: Path) -> Path:
    return layout(tmp_path)


def sandbox_file(value: str) -> dict[str, Any]:
    return {
        "network": {
            "allowlist": [
                {
                    "domain": "api.openai.test",
                    "secrets": [{"placeholder": "sk-egress-placeholder-openai", "value": value}],
                }
            ]
        }
    }


def problems_of(value: str, files: Path | None, *, resolve: bool = True) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        parse_sandbox(sandbox_file(value), "alpha.yaml", "alpha", files, secrets=resolve)
    return [f"{p.location}: {p.message}" for p in refused.value.problems]


WHERE = "network.allowlist[0].secrets[0].value"
# (id, the value as written ({s}: the secrets directory, {r}: its parent), the problem)
REFUSED = [
    ("a-variable", "${HOME}",
     "${HOME} is refused in a sandbox file: it would read the node proxy's environment"),
    ("a-variable-beside-text", "Bearer ${OPENAI_API_KEY}",
     "${OPENAI_API_KEY} is refused in a sandbox file: it would read the node proxy's "
     "environment"),
    ("relative", "${file:alpha/key}",
     "${file:alpha/key}: a sandbox file's path is absolute, in {A}"),
    ("another-sandboxs", "${file:{s}/beta/key}",
     "${file:{s}/beta/key} is outside this sandbox's secrets ({A})"),
    ("dot-dot-out", "${file:{s}/alpha/../beta/key}",
     "${file:{s}/alpha/../beta/key} is outside this sandbox's secrets ({A})"),
    ("the-nodes", "${file:{r}/node-secret}",
     "${file:{r}/node-secret} is outside this sandbox's secrets ({A})"),
    ("proc-environ", "${file:/proc/self/environ}",
     "${file:/proc/self/environ} is outside this sandbox's secrets ({A})"),
    ("its-own-directory", "${file:{s}/alpha}",
     "${file:{s}/alpha} is outside this sandbox's secrets ({A})"),
    ("symlink-to-another-sandbox", "${file:{s}/alpha/to-beta}",
     "${file:{s}/alpha/to-beta} leads outside this sandbox's secrets ({A})"),
    ("symlink-to-the-node", "${file:{s}/alpha/to-node}",
     "${file:{s}/alpha/to-node} leads outside this sandbox's secrets ({A})"),
    ("symlink-to-environ", "${file:{s}/alpha/to-environ}",
     "${file:{s}/alpha/to-environ} leads outside this sandbox's secrets ({A})"),
    ("flat-another-sandboxs", "${file:{s}/beta.token}",
     "${file:{s}/beta.token} is outside this sandbox's secrets ({A})"),
    ("flat-a-dotted-sandboxs", "${file:{s}/alpha.b.token}",  # sandbox alpha.b's, not alpha's
     "${file:{s}/alpha.b.token} is outside this sandbox's secrets ({A})"),
    ("flat-the-data-link", "${file:{s}/..data/alpha.token}",
     "${file:{s}/..data/alpha.token} is outside this sandbox's secrets ({A})"),
    ("flat-named-alpha-but-betas", "${file:{s}/alpha.link}",
     "${file:{s}/alpha.link} leads outside this sandbox's secrets ({A})"),
    ("flat-symlink-out", "${file:{s}/alpha.up}",
     "${file:{s}/alpha.up} leads outside this sandbox's secrets ({A})"),
    ("a-directory", "${file:{s}/alpha/dir}", "${file:{s}/alpha/dir}: not a regular file"),
    ("a-fifo", "${file:{s}/alpha/fifo}", "${file:{s}/alpha/fifo}: not a regular file"),
    ("oversized", "${file:{s}/alpha/big}",
     "${file:{s}/alpha/big} is larger than 65536 bytes"),
    ("empty", "${file:{s}/alpha/empty}", "${file:{s}/alpha/empty} is empty"),
    ("missing", "${file:{s}/alpha/nope}",
     "cannot read ${file:{s}/alpha/nope}: No such file or directory"),
    ("a-credential", "${credential:openai}",  # a sandbox file has no credentials: (as before)
     "unknown credential 'openai' (not in credentials:)"),
]  # fmt: skip


def spelled(text: str, secrets: Path) -> str:
    allowed = f"{secrets}/alpha/ or {secrets}/alpha.<name>"
    text = text.replace("{A}", allowed)
    return text.replace("{s}", str(secrets)).replace("{r}", str(secrets.parent))


@pytest.mark.parametrize(
    ("value", "problem"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_a_sandbox_file_reads_nothing_outside_its_own_secrets(
    secrets: Path, value: str, problem: str
) -> None:
    found: list[str] = []
    worker = threading.Thread(
        target=lambda: found.extend(problems_of(spelled(value, secrets), secrets)), daemon=True
    )
    worker.start()
    worker.join(10)  # a FIFO opened for reading would block here forever
    assert not worker.is_alive(), "the scan hung"
    assert found == [f"{WHERE}: {spelled(problem, secrets)}"]
    assert not any(v in " ".join(found) for v in (BETA_VALUE, NODE_VALUE, ALPHA_VALUE))


def test_without_sandboxes_secrets_no_file_is_read(secrets: Path) -> None:
    problem = "${file:...} in a sandbox file needs the node file's sandboxes.secrets"
    assert problems_of(f"${{file:{secrets}/alpha/key}}", None) == [f"{WHERE}: {problem}"]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("{s}/alpha/key", ALPHA_VALUE),
        ("{s}/alpha/./key", ALPHA_VALUE),
        ("{s}//alpha//key", ALPHA_VALUE),
        ("{s}/alpha/dir/../key", ALPHA_VALUE),
        ("{s}/alpha/rotated", ROTATED_VALUE),  # through ..data, as Kubernetes mounts it
        ("{s}/alpha.token", FLAT_VALUE),  # flat, through ..data
    ],
)
def test_its_own_files_are_read(secrets: Path, path: str, expected: str) -> None:
    value = f"Bearer ${{file:{spelled(path, secrets)}}}"
    sandbox = parse_sandbox(sandbox_file(value), "alpha.yaml", "alpha", secrets)
    secret = sandbox.network.allowlist[0].secrets[0].value
    assert secret.reveal() == f"Bearer {expected}"


def test_the_token_is_confined_too(secrets: Path) -> None:
    document = {"token": f"${{file:{secrets}/beta/key}}", "network": {}}
    with pytest.raises(ConfigError) as refused:
        parse_sandbox(document, "alpha.yaml", "alpha", secrets)
    assert [p.location for p in refused.value.problems] == ["token"]
    document = {"token": "${ALPHA_TOKEN}", "network": {}}
    with pytest.raises(ConfigError) as refused:
        parse_sandbox(document, "alpha.yaml", "alpha", secrets)
    assert [p.location for p in refused.value.problems] == ["token"]


LEXICAL = [c for c in REFUSED if "leads outside" not in c[2] and c[0] not in
           ("a-directory", "a-fifo", "oversized", "empty", "missing")]  # fmt: skip


@pytest.mark.parametrize(
    ("value", "problem"), [c[1:] for c in LEXICAL], ids=[c[0] for c in LEXICAL]
)
def test_check_without_secrets_refuses_the_same_spellings(
    secrets: Path, value: str, problem: str
) -> None:
    """`check --no-secrets`, the DNS responder, the workers' parent: no file opened, the
    same refusal for what can be told from the text."""
    found = problems_of(spelled(value, secrets), secrets, resolve=False)
    assert found == [f"{WHERE}: {spelled(problem, secrets)}"]


def test_a_directory_swapped_for_a_symlink_while_read_is_refused(
    secrets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The swap an attacker with write access to its own directory would race: the path
    checked is inside, but by the time it is opened a component leads to another
    sandbox's. What the kernel opened is checked, so nothing of beta's is read."""
    inner = secrets / "alpha" / "sub"
    inner.mkdir()
    (inner / "key").write_text("alpha-sub-value-0005")
    real_open = os.open

    def swapping_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path) == str(inner / "key"):
            inner.rename(secrets / "alpha" / "sub.old")
            inner.symlink_to(secrets / "beta")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swapping_open)
    found = problems_of(f"${{file:{inner}/key}}", secrets)
    assert found == [
        f"{WHERE}: ${{file:{inner}/key}}: changed while it was read; it now leads elsewhere"
    ]


def segments() -> st.SearchStrategy[str]:
    parts = st.sampled_from(["..", ".", "", "alpha", "beta", "key", "to-beta", "to-node",
                             "rotated", "..data", "dir", "secrets", "node-secret", "alpha.token",
                             "beta.token", "alpha.b.token", "alpha.link", "alpha.up",
                             "..2026_12_07"])  # fmt: skip
    return st.lists(parts, min_size=1, max_size=7).map("/".join)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield layout(tmp_path_factory.mktemp("tree"))


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tail=segments(), absolute=st.booleans())
def test_whatever_the_spelling_only_its_own_values_are_ever_read(
    tree: Path, tail: str, absolute: bool
) -> None:
    path = f"{tree.parent}/{tail}" if absolute else tail
    value, problem = Confined("alpha", tree).read(path)
    if problem is None:
        assert value in (ALPHA_VALUE, ROTATED_VALUE, FLAT_VALUE)
        real = os.path.realpath(path)
        assert real.startswith(f"{os.path.realpath(tree / 'alpha')}/") or (
            real.startswith(f"{os.path.realpath(tree)}/") and real.endswith("/alpha.token")
        )
    else:
        assert value == ""
        for other in (BETA_VALUE, NODE_VALUE, ALPHA_VALUE, ROTATED_VALUE, FLAT_VALUE):
            assert other not in problem


def test_a_yaml_sandbox_file_names_the_refused_reference_at_its_key(secrets: Path) -> None:
    text = f"""\
token: "${{file:{secrets}/alpha/key}}-and-more"
network:
  allowlist:
    - domain: api.openai.test
      transform:
        X-Key: "${{NODE_KEY}}"
"""
    with pytest.raises(ConfigError) as refused:
        parse_sandbox(yaml.safe_load(text), "alpha.yaml", "alpha", secrets)
    assert [(p.location, p.message) for p in refused.value.problems] == [
        (
            "network.allowlist[0].transform.X-Key",
            "${NODE_KEY} is refused in a sandbox file: it would read the node proxy's environment",
        )
    ]


def test_a_sandbox_whose_secret_values_total_over_the_bound_is_refused(secrets: Path) -> None:
    """Each sandbox compiles its own matcher of every spelling of its values (D425): five
    files of 60 KiB each (300 KiB together) are refused, a located problem without a value."""
    values = []
    for number in range(5):
        value = f"v{number}-" + os.urandom(30 * 1024).hex()
        (secrets / "alpha" / f"big{number}").write_text(value)
        values.append(value)
    document = {
        "network": {
            "allowlist": [
                {
                    "domain": "api.openai.test",
                    "secrets": [
                        {
                            "placeholder": f"sk-egress-placeholder-{n}",
                            "value": f"${{file:{secrets}/alpha/big{n}}}",
                        }
                        for n in range(5)
                    ],
                }
            ]
        }
    }
    with pytest.raises(ConfigError) as refused:
        parse_sandbox(document, "alpha.yaml", "alpha", secrets)
    said = [f"{p.location}: {p.message}" for p in refused.value.problems]
    total = sum(len(value) for value in values)
    assert said == [f"network: its secret values total {total} bytes, more than {256 * 1024}"]
    assert not any(value[:40] in text for value in values for text in said)
