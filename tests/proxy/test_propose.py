"""`egress-proxy propose` (proxy/learn/propose.py): a table of named cases from audit lines to
proposals, the YAML it prints (valid for `check`), and the command itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import publicsuffixlist
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from publicsuffixlist import PublicSuffixList

from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.hosts import HostError, canonical_host
from sandbox_egress.proxy.learn.propose import Findings, Proposal, parse_lines, propose, render
from sandbox_egress.runtime.cli import main


def line(
    host: str,
    reason: str = "not_allowlisted",
    decision: str = "deny",
    port: int = 443,
    rule: str = "",
    **more: Any,
) -> dict[str, Any]:
    return {"host": host, "port": port, "decision": decision, "reason": reason, "rule": rule,
            "method": "CONNECT", **more}  # fmt: skip


CASES = [
    # (id, lines, wildcards, sandbox, proposals)
    ("one-host-counted", [line("api.example.com")] * 3, False, None,
     [Proposal("api.example.com", (443,), 3, 0)]),
    ("refused-and-reported", [line("a.example.com"), line("a.example.com", decision="would_deny",
                                                          port=8443)],
     False, None, [Proposal("a.example.com", (443, 8443), 1, 1)]),
    ("most-requested-first", [line("b.test"), line("a.test"), line("b.test")], False, None,
     [Proposal("b.test", (443,), 2, 0), Proposal("a.test", (443,), 1, 0)]),
    ("allowed-lines-ignored", [line("a.test", decision="allow", reason="allowlisted")], False,
     None, []),
    ("internal-never", [line("10.0.0.5"), line("169.254.169.254"), line("127.0.0.1"),
                        line("localhost"), line("x.localhost"), line("metadata.google.internal"),
                        line("::1"), line("fd00::1")], False, None, []),
    ("documentation-address-never", [line("203.0.113.7", port=22)], False, None, []),
    ("public-ip-proposed", [line("93.184.216.34", port=22)], False, None,
     [Proposal("93.184.216.34", (22,), 1, 0)]),
    ("security-refusals-not-proposed", [line("a.test", reason="host_mismatch"),
                                        line("a.test", reason="placeholder_elsewhere"),
                                        line("a.test", reason="internal_address")], False, None, []),
    ("port-extends-entry", [line("x.wild.test", reason="port_not_allowed", port=8080,
                                 rule="*.wild.test")], False, None,
     [Proposal("*.wild.test", (8080,), 1, 0, extends=True)]),
    ("port-on-star-never", [line("x.test", reason="port_not_allowed", rule="*")], False, None, []),
    ("siblings-kept-apart", [line("a.example.com"), line("b.example.com")], False, None,
     [Proposal("a.example.com", (443,), 1, 0), Proposal("b.example.com", (443,), 1, 0)]),
    ("siblings-grouped-when-asked", [line("a.example.com"), line("b.example.com", port=80),
                                     line("c.other.com")], True, None,
     [Proposal("*.example.com", (80, 443), 2, 0, covers=("a.example.com", "b.example.com")),
      Proposal("c.other.com", (443,), 1, 0)]),
    ("never-group-a-registry-suffix", [line("a.co.uk"), line("b.co.uk")], True, None,
     [Proposal("a.co.uk", (443,), 1, 0), Proposal("b.co.uk", (443,), 1, 0)]),
    ("never-group-a-tld", [line("a.com"), line("b.com")], True, None,
     [Proposal("a.com", (443,), 1, 0), Proposal("b.com", (443,), 1, 0)]),
    ("never-group-a-private-public-suffix", [line("alice.github.io"), line("bob.github.io"),
                                              line("x.workers.dev"), line("y.workers.dev")],
     True, None, [Proposal("alice.github.io", (443,), 1, 0), Proposal("bob.github.io", (443,), 1, 0),
                  Proposal("x.workers.dev", (443,), 1, 0), Proposal("y.workers.dev", (443,), 1, 0)]),
    ("never-group-under-a-wildcard-rule", [line("a.b.ck"), line("c.b.ck")], True, None,
     [Proposal("a.b.ck", (443,), 1, 0), Proposal("c.b.ck", (443,), 1, 0)]),  # PSL: *.ck
    ("one-owners-site-grouped", [line("a.alice.github.io"), line("b.alice.github.io")], True,
     None, [Proposal("*.alice.github.io", (443,), 2, 0,
                     covers=("a.alice.github.io", "b.alice.github.io"))]),
    ("addresses-not-grouped", [line("93.184.216.34"), line("93.184.216.35")], True, None,
     [Proposal("93.184.216.34", (443,), 1, 0), Proposal("93.184.216.35", (443,), 1, 0)]),
    ("one-sandbox", [line("a.test", sandbox="sbx-1"), line("b.test", sandbox="sbx-2"),
                     line("c.test")], False, "sbx-1", [Proposal("a.test", (443,), 1, 0)]),
    ("canonical-names", [line("API.Example.COM."), line("api.example.com")], False, None,
     [Proposal("api.example.com", (443,), 2, 0)]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("lines", "wildcards", "sandbox", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_propose(
    lines: list[dict[str, Any]], wildcards: bool, sandbox: str | None, expected: list[Proposal]
) -> None:
    assert propose(lines, Findings(), sandbox, wildcards) == expected


def test_findings_count_what_is_not_proposed() -> None:
    findings = Findings()
    text = [json.dumps(line("10.0.0.5")), "not json", "[1]", "",
            json.dumps(line("a.test", reason="host_mismatch"))]  # fmt: skip
    assert propose(parse_lines(text, findings), findings) == []
    assert (findings.lines, findings.unreadable) == (2, 2)
    assert findings.never == {"10.0.0.5": 1}
    assert findings.other == {"host_mismatch": 1}


def test_the_output_is_a_valid_environment_file_with_counts_and_flags() -> None:
    findings = Findings()
    lines = [line("a.example.com"), line("b.example.com", decision="would_deny"), line("10.1.1.1")]
    text = render(propose(lines, findings, wildcards=True), findings, "audit.jsonl")
    assert '    - domain: "*.example.com"  # 1 refused, 1 would_deny' in text
    assert "BROADER than seen: any name under example.com" in text
    assert "#   a.example.com" in text
    assert "never proposed (loopback, internal or metadata): '10.1.1.1' x1" in text
    config = parse(yaml.safe_load(text), "proposed.yaml", {})
    assert [(e.pattern, e.ports) for e in config.allowlist] == [("*.example.com", frozenset({443}))]


def test_nothing_to_propose_is_an_empty_allowlist() -> None:
    text = render([], Findings(), "audit.jsonl")
    assert parse(yaml.safe_load(text), "proposed.yaml", {}).allowlist == ()


def test_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    audit = tmp_path / "audit.jsonl"
    audit.write_text(
        "\n".join(json.dumps(x) for x in [line("pypi.org", sandbox="s1"),
                                           line("files.pythonhosted.org", sandbox="s2")]) + "\n"
    )  # fmt: skip
    assert main(["propose", "--audit-log", str(audit), "--sandbox", "s1"]) == 0
    out = capsys.readouterr().out
    assert '    - domain: "pypi.org"  # 1 refused\n      ports: [443]\n' in out
    assert "pythonhosted" not in out
    assert main(["propose", "--audit-log", str(tmp_path / "missing.jsonl")]) == 1
    assert "cannot read" in capsys.readouterr().err


def mismatch(method: str, path: str, rule: str = "api.github.com", **more: Any) -> dict[str, Any]:
    return line("api.github.com", reason="rule_mismatch", rule=rule, method=method, path=path,
                **more)  # fmt: skip


def test_rule_mismatch_lines_propose_rules_for_the_entry_that_refused() -> None:
    """`propose` said "no allowlist entry lifts it" where a rule would (issue 35)."""
    findings = Findings()
    lines = [
        mismatch("POST", "/repos/acme/web/issues?state=…"),
        mismatch("POST", "/repos/acme/web/issues"),
        mismatch("POST", "/repos/acme/api/issues"),
        mismatch("DELETE", "/repos/acme/web"),
        mismatch("GET", "/a/*/b"),  # a pattern would read the '*'
        mismatch("GET", "/cut" + "…"),
        mismatch("POST", "/x", rule="*", decision="would_deny"),
        line("a.test", reason="rule_mismatch", rule="a.test", method="GET"),  # no path: old line
    ]
    text = render(propose(lines, findings), findings, "audit.jsonl")
    assert findings.other == {"rule_mismatch": 1}
    assert "# refused as rule_mismatch x2: a path or method no rule can say literally" in text
    assert (
        '    - domain: "*"  # 1 rule_mismatch\n'
        "      # the entry exists: add these rules to its `rules`\n"
        "      rules:\n"
        "        - methods: [POST]  # 1 refused\n"
        "          paths:\n"
        '            - "/x"\n'
    ) in text
    assert (
        '    - domain: "api.github.com"  # 4 rule_mismatch\n'
        "      # the entry exists: add these rules to its `rules`\n"
        "      rules:\n"
        "        - methods: [POST]  # 3 refused\n"
        "          paths:\n"
        '            - "/repos/acme/web/issues"\n'
        '            - "/repos/acme/api/issues"\n'
        "        - methods: [DELETE]  # 1 refused\n"
        "          paths:\n"
        '            - "/repos/acme/web"\n'
    ) in text
    config = parse(yaml.safe_load(text), "proposed.yaml", {})
    (entry,) = [e for e in config.allowlist if e.pattern == "api.github.com"]
    assert entry.rules.active


def test_rule_proposals_are_bounded_per_method() -> None:
    findings = Findings()
    lines = [mismatch("GET", f"/p/{n}") for n in range(25)]
    text = render(propose(lines, findings), findings, "audit.jsonl")
    assert text.count('            - "/p/') == 20
    assert "# and 5 more paths: a pattern may say them" in text


def test_a_public_suffix_not_grouped_under_is_said() -> None:
    findings = Findings()
    lines = [line("alice.github.io"), line("bob.github.io")]
    text = render(propose(lines, findings, wildcards=True), findings, "audit.jsonl")
    assert "# not grouped under *.github.io: a public suffix, 2 names kept as seen" in text
    assert '    - domain: "alice.github.io"  # 1 refused' in text


def _suffix_rules() -> list[str]:
    """The Public Suffix List's rules as the package ships them (`*.ck` as `ck`)."""
    data = Path(publicsuffixlist.__file__).with_name("public_suffix_list.dat")
    rules = []
    for raw in data.read_text(encoding="utf-8").splitlines():
        rule = raw.strip()
        if rule and not rule.startswith(("//", "!")):
            rules.append(rule.removeprefix("*."))
    return sorted(rules)


SUFFIX_RULES = _suffix_rules()
PSL = PublicSuffixList()
LABEL = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    suffixes=st.lists(st.sampled_from(SUFFIX_RULES), min_size=1, max_size=3),
    labels=st.lists(st.tuples(LABEL, st.booleans(), LABEL), min_size=2, max_size=8),
)
def test_a_wildcard_is_never_proposed_over_a_public_suffix(
    suffixes: list[str], labels: list[tuple[str, bool, str]]
) -> None:
    """For names under public suffixes (one or two labels in front of any rule of the list),
    a wildcard proposal's remainder is never a public suffix, and every name seen is
    proposed, exactly or under a wildcard that says it covers it."""
    names = []
    for number, (first, deeper, second) in enumerate(labels):
        suffix = suffixes[number % len(suffixes)]
        names.append(f"{first}.{second}.{suffix}" if deeper else f"{first}.{suffix}")
    lines = []
    for name in names:
        try:
            lines.append(line(str(canonical_host(name))))
        except HostError:
            continue  # a rule whose IDNA form is not a valid host name here
    proposals = propose(lines, Findings(), wildcards=True)
    for proposal in proposals:
        if proposal.domain.startswith("*."):
            assert not PSL.is_public(proposal.domain[2:]), proposal
            assert proposal.covers
    proposed = {n for p in proposals for n in (p.covers or (p.domain,))}
    assert proposed == {str(line_["host"]) for line_ in lines}
