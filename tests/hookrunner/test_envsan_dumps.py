"""Issue 20, item 5: the sanitiser against real-world environments.

Every line of ``tests/hookrunner/env_dumps/*.env`` (CI providers' documented
variables, common SDKs and CLIs, an ordinary developer shell) says whether the
variable must reach hooks and tools (``keep``) or is a secret (``drop``). Both
directions are asserted: secrets removed — the names and value shapes the
issue lists (``SSHPASS``, ``BW_SESSION``, ``OP_SESSION_*``, ``LDAP_BINDPW``,
``*_WRITEKEY``, a libpq ``password=``, a Kafka JAAS ``password=``, ``-D...
password=`` in ``MAVEN_OPTS``, ``Basic`` credentials) among them — and
ordinary variables (``PATH``, ``HOME``, ``CI=true``, ``GITHUB_SHA``...) kept.
A dropped value is also what the redactor hides in warning lines.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_egress.hookrunner.enforce.envsan import Redactor, removal_cause, sanitise

DUMPS = Path(__file__).parent / "env_dumps"


def lines() -> list[tuple[str, str, str, bool]]:
    found = []
    for dump in sorted(DUMPS.glob("*.env")):
        for number, line in enumerate(dump.read_text().splitlines(), 1):
            if not line or line.startswith("#"):
                continue
            verdict, _, assignment = line.partition(" ")
            name, _, value = assignment.partition("=")
            assert verdict in ("keep", "drop"), f"{dump.name}:{number}"
            found.append((f"{dump.stem}:{number}:{name}", name, value, verdict == "drop"))
    return found


LINES = lines()


@pytest.mark.parametrize(("where", "name", "value", "secret"), LINES, ids=[x[0] for x in LINES])
def test_each_variable(where: str, name: str, value: str, secret: bool) -> None:
    cause = removal_cause(name, value)
    if secret:
        assert cause in ("secret_name", "secret_value"), where
    else:
        assert cause is None, where


def test_the_dumps_are_real_sized() -> None:
    kept = [x for x in LINES if not x[3]]
    dropped = [x for x in LINES if x[3]]
    assert (len(kept) >= 100, len(dropped) >= 35) == (True, True), (len(kept), len(dropped))


def test_a_whole_dump_keeps_exactly_the_ordinary_variables() -> None:
    environ = {name: value for _, name, value, _ in LINES if not name.endswith("_PLAIN")}
    result = sanitise(environ)
    expected = {name for _, name, _, secret in LINES if not secret and name in environ}
    assert set(result.variables) == expected
    redact = Redactor.from_environment(environ)
    for _, name, value, secret in LINES:
        if secret and len(value) >= 6:
            assert value not in redact(f"hook said {value}"), name
