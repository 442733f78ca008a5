"""The execution side: a hook kernel and the dialects that plug into it.

Kernel (knows no dialect): ``kernel`` (session setup, operator switches,
spawning a command hook), ``outcome`` (the one ``Outcome`` set, ``FAILURES``,
a mechanism's result to its outcome), ``report`` (warning and decision lines,
through ``logging`` unless given a stream), ``metrics`` (the registry, and the
registration of a dialect's series), ``console`` (what the command lines share).
Mechanisms: ``httpclient`` (https POST), ``proxyroute``, ``handlerhost``,
``tokens``. The enforcement layer is the subpackage ``enforce`` (``command``,
``contain``, ``envsan``, ``programs``, ``isolation``, ``mask``, ``beneath``,
``bounds``, ``tools``: where a hook's or a tool's process runs).
The hooks.json dialect (``.agents/hooks.json``, ``hookrunner run``): ``model``,
``matcher``, ``schema`` and ``loader``, ``decode`` (with ``decision``: a
handler's output), ``dispatch`` (one handler), ``aggregate`` (the decision of
an event), ``session`` (the Python API) and ``cli`` (the ``hookrunner``
command, which also wires the other dialect). ``ax`` is the AX Code / Claude
Code dialect (``.ax-code/hooks.json``, ``hookrunner fire``), with the same
module names for the same roles; ``bridge`` turns a Claude Code user's yes into a
grant of the egress proxy's approvals (issue 47). See docs/hooks.md.
"""
