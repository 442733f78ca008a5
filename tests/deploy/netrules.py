"""The iptables rules of a transparent-mode init script, parsed for the deploy tests.

`check_transparent_rules` states what every such script must do, whatever
else it does: in the nat table, every TCP connection not opened by the
proxy's uid reaches a REDIRECT to the proxy's listener, and the only
exemptions are that uid, loopback and DNS; in the filter table (IPv4 and
IPv6), traffic of other uids ends in DROP, and the only uid accepted is the
proxy's.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

CHAIN_ACTIONS = ("-A", "-N", "-I")


@dataclass(frozen=True)
class Rule:
    tool: str  # "iptables" or "ip6tables"
    table: str
    action: str  # -A, -N or -I
    chain: str
    args: tuple[str, ...]

    def option(self, name: str) -> str | None:
        if name not in self.args:
            return None
        index = self.args.index(name)
        return self.args[index + 1] if index + 1 < len(self.args) else ""

    @property
    def target(self) -> str | None:
        return self.option("-j")


def parse_rules(script: str) -> list[Rule]:
    """Every `iptables`/`ip6tables` line of a shell script, in order."""
    rules: list[Rule] = []
    for raw in script.splitlines():
        line = raw.strip()
        if not line.startswith(("iptables ", "ip6tables ")):
            continue
        words = shlex.split(line)
        tool, rest = words[0], words[1:]
        table = "filter"
        if rest[:1] == ["-t"]:
            table, rest = rest[1], rest[2:]
        action, chain, args = rest[0], rest[1], tuple(rest[2:])
        assert action in CHAIN_ACTIONS, f"unexpected iptables action in {line!r}"
        rules.append(Rule(tool, table, action, chain, args))
    return rules


def chain(rules: list[Rule], tool: str, table: str, name: str) -> list[Rule]:
    return [
        r
        for r in rules
        if r.tool == tool and r.table == table and r.chain == name and r.action != "-N"
    ]


def check_transparent_rules(script: str, *, listen_port: int, proxy_uid: int) -> None:
    rules = parse_rules(script)
    assert all(r.action == "-A" or r.action == "-N" for r in rules), (
        "rules must be appended in order"
    )

    # nat OUTPUT: one jump for all TCP into the redirect chain.
    nat_output = chain(rules, "iptables", "nat", "OUTPUT")
    assert len(nat_output) == 1, nat_output
    jump = nat_output[0]
    assert jump.option("-p") == "tcp"
    redirect_chain = jump.target
    assert redirect_chain is not None
    assert any(
        r.action == "-N" and r.table == "nat" and r.chain == redirect_chain for r in rules
    ), f"chain {redirect_chain} is never created"

    steps = chain(rules, "iptables", "nat", redirect_chain)
    last = steps[-1]
    assert last.target == "REDIRECT"
    assert last.option("-p") == "tcp"
    assert last.option("--to-ports") == str(listen_port)
    assert [r.option("-m") for r in steps[:-1]].count("owner") == 1
    for rule in steps[:-1]:
        assert rule.target == "RETURN", f"only exemptions may precede the redirect: {rule}"
        if rule.option("-m") == "owner":
            assert rule.option("--uid-owner") == str(proxy_uid)
        else:
            assert rule.option("-o") == "lo" or rule.option("--dport") == "53", rule

    # filter OUTPUT: the redirected connections themselves must be let through. Without
    # this rule every redirected connect times out (seen with the compose stack running).
    filter_output = chain(rules, "iptables", "filter", "OUTPUT")
    assert any(_lands_on_listener(r, "iptables", listen_port) for r in filter_output), (
        f"no ACCEPT for connections redirected to 127.0.0.1:{listen_port}"
    )

    # filter OUTPUT, both families: accept the proxy's uid, end in DROP.
    for tool in ("iptables", "ip6tables"):
        output = chain(rules, tool, "filter", "OUTPUT")
        assert output, f"{tool}: no filter OUTPUT rules"
        assert output[-1].args == ("-j", "DROP"), f"{tool}: OUTPUT must end in DROP"
        owners = [r.option("--uid-owner") for r in output if r.option("-m") == "owner"]
        assert owners == [str(proxy_uid)], f"{tool}: accepted uids {owners}"
        for rule in output[:-1]:
            assert rule.target == "ACCEPT", rule
            allowed = (
                rule.option("--uid-owner") == str(proxy_uid)
                or rule.option("-o") == "lo"
                or rule.option("--ctstate") == "ESTABLISHED,RELATED"
                or rule.option("--dport") == "53"
                or _lands_on_listener(rule, tool, listen_port)
            )
            assert allowed, f"{tool}: unexpected ACCEPT {rule}"


def _lands_on_listener(rule: Rule, tool: str, listen_port: int) -> bool:
    """The ACCEPT for redirected connections: filter OUTPUT still sees their original
    interface (not `lo`), so they are accepted by the address REDIRECT gave them."""
    return (
        tool == "iptables"
        and rule.option("-d") == "127.0.0.1"
        and rule.option("-p") == "tcp"
        and rule.option("--dport") == str(listen_port)
    )
