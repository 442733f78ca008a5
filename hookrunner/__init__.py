"""The execution side: runs hooks.json hooks around an agent's tool calls.

Pure core: ``model`` (frozen values, the ``Outcome`` set), ``matcher``,
``schema`` and ``loader`` (hooks.json to a snapshot), ``decision`` (exact
parsing of a handler's output), ``outcome`` (mechanism result to outcome),
``runner`` (aggregation), ``envsan`` (the handler environment),
``proxyroute`` (HTTPS_PROXY / NO_PROXY, CONNECT).
Mechanisms: ``command`` (child processes), ``httpclient`` (https POST),
``tools`` (the built-in tools). Wiring: ``dispatch``, ``report``, ``metrics``,
``api`` (the Python API) and ``cli`` (the ``hookrunner`` command).
``ax`` is the second dialect, AX Code / Claude Code lifecycle hooks
(``.ax-code/hooks.json``, ``hookrunner fire``), built on the same mechanisms.
See docs/hooks.md.
"""
