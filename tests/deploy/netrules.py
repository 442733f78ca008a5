"""The iptables rules of a transparent-mode init script, parsed for the deploy tests.

`check_transparent_rules` states what every such script must do: in the nat
table, every DNS query (UDP and TCP 53, to any server) not sent by the proxy's
uid reaches a REDIRECT to the DNS responder (`egress-proxy dns`) and every
other TCP connection a REDIRECT to the proxy's listener, the only exemptions
being that uid and loopback; in the filter table (IPv4 and IPv6), traffic of
other uids ends in DROP, the only uid accepted is the proxy's, and no resolver
but the responder is reachable.
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


def check_transparent_rules(
    script: str, *, listen_port: int, proxy_uid: int, dns_port: int
) -> None:
    rules = parse_rules(script)
    assert all(r.action in ("-A", "-N") or _first_in_nat_output(r) for r in rules), (
        "rules must be appended in order (only the nat OUTPUT jump may be inserted first)"
    )

    # nat OUTPUT: one jump, for every protocol (TCP and DNS over UDP), into the redirect chain.
    nat_output = chain(rules, "iptables", "nat", "OUTPUT")
    assert len(nat_output) == 1, nat_output
    jump = nat_output[0]
    assert jump.option("-p") is None, "UDP must enter the chain too (DNS)"
    redirect_chain = jump.target
    assert redirect_chain is not None
    assert any(
        r.action == "-N" and r.table == "nat" and r.chain == redirect_chain for r in rules
    ), f"chain {redirect_chain} is never created"

    steps = chain(rules, "iptables", "nat", redirect_chain)
    # First the proxy's uid (the proxy and the responder resolve and connect as it: a
    # redirect of their own queries would loop), then DNS to the responder from any
    # destination (before the loopback exemption: Docker's resolver is on 127.0.0.11),
    # then loopback, then every other TCP connection to the listener.
    assert [r.target for r in steps] == ["RETURN", "REDIRECT", "REDIRECT", "RETURN", "REDIRECT"]
    owner, dns_udp, dns_tcp, loopback, last = steps
    assert owner.option("-m") == "owner", owner
    assert owner.option("--uid-owner") == str(proxy_uid), owner
    for rule, protocol in ((dns_udp, "udp"), (dns_tcp, "tcp")):
        assert rule.option("-p") == protocol, rule
        assert rule.option("--dport") == "53", rule
        assert rule.option("--to-ports") == str(dns_port), rule
        assert rule.option("-d") is None, "DNS to every server goes to the responder"
    assert loopback.args == ("-o", "lo", "-j", "RETURN"), loopback
    assert last.option("-p") == "tcp", last
    assert last.option("--to-ports") == str(listen_port), last
    assert last.option("-d") is None, last
    assert last.option("--dport") is None, last

    # filter OUTPUT: the redirected packets themselves must be let through. Without
    # this rule every redirected connect times out (seen with the compose stack running).
    filter_output = chain(rules, "iptables", "filter", "OUTPUT")
    landings = {
        (r.option("-p"), r.option("--dport")) for r in filter_output if _lands_on_loopback(r)
    }
    assert ("tcp", str(listen_port)) in landings, (
        f"no ACCEPT for connections redirected to 127.0.0.1:{listen_port}"
    )
    assert {("udp", str(dns_port)), ("tcp", str(dns_port))} <= landings, (
        f"no ACCEPT for DNS redirected to 127.0.0.1:{dns_port}"
    )
    assert landings <= {("tcp", str(listen_port)), ("udp", str(dns_port)), ("tcp", str(dns_port))}

    # filter OUTPUT, both families: accept the proxy's uid, end in DROP; other uids reach
    # only the local host's own loopback address (never 127.0.0.11, Docker's resolver)
    # and no resolver on port 53 at all.
    for tool, local in (("iptables", "127.0.0.1"), ("ip6tables", "::1")):
        output = chain(rules, tool, "filter", "OUTPUT")
        assert output, f"{tool}: no filter OUTPUT rules"
        assert output[-1].args == ("-j", "DROP"), f"{tool}: OUTPUT must end in DROP"
        owners = [r.option("--uid-owner") for r in output if r.option("-m") == "owner"]
        assert owners == [str(proxy_uid)], f"{tool}: accepted uids {owners}"
        for rule in output[:-1]:
            assert rule.target == "ACCEPT", rule
            assert rule.option("--dport") != "53", f"{tool}: a resolver other than the responder"
            allowed = (
                rule.option("--uid-owner") == str(proxy_uid)
                or (rule.option("-o") == "lo" and rule.option("-d") == local)
                or rule.option("--ctstate") == "ESTABLISHED,RELATED"
                or (tool == "iptables" and _lands_on_loopback(rule))
            )
            assert allowed, f"{tool}: unexpected ACCEPT {rule}"


def _first_in_nat_output(rule: Rule) -> bool:
    """`iptables -t nat -I OUTPUT 1 ...`: ahead of rules the runtime put there (Docker's
    DNAT of its resolver address)."""
    return (
        rule.action == "-I"
        and rule.table == "nat"
        and rule.chain == "OUTPUT"
        and (rule.args[:1] == ("1",))
    )


def _lands_on_loopback(rule: Rule) -> bool:
    """An ACCEPT for redirected packets: filter OUTPUT still sees their original
    interface (not `lo`), so they are accepted by the address REDIRECT gave them."""
    return (
        rule.option("-d") == "127.0.0.1"
        and rule.option("-p") in ("tcp", "udp")
        and rule.option("--dport") is not None
        and rule.option("-o") is None
    )
