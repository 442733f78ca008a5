"""`make bench`: the proxy measured against direct, bare mitmproxy and squid in one run.

Set-up: `procs` (child processes, /proc readings), `netns` (the two namespaces),
`pki` (the upstream test CA, the proxies' shared CA), `allowlist` (the generated
policy, for egress-proxy and for squid), `upstream` (nginx, and `sink` for
uploads), `contenders` (mitmdump, squid, egress-proxy, socat forwarders for h2load),
`wire` (a raw HTTP/1.1 client) and `probe` (checks each contender before it is measured).
Scenarios: `throughput` with `loadgen` (hey, h2load), `decide`, `memory`, `hooks`,
`redact`, `idle` (memory per idle connection), `latency` (at low load), and `profile`
(py-spy). `report` renders a results file; `run` orchestrates.
System packages: `install-deps`. See docs/benchmarks.md.
"""
