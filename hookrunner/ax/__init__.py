"""The AX Code / Claude Code lifecycle-hook dialect
(docs/hooks.md#the-ax-code--claude-code-dialect-ax-codehooksjson): ``.ax-code/hooks.json``.

Pure core: ``model`` (events, entries, the closed outcome and cause sets),
``matcher`` (AX matchers), ``schema`` and ``loader`` (the file, trust),
``events`` (event payloads, what a hook receives), ``decode`` (one hook's
exit status and output to its effect), ``aggregate`` (the decision of an
event), ``feedback`` (the ``<hook_feedback>`` block).
Mechanisms: ``fire`` (one hook as a child process through ``command``, with
the environment of ``envsan``), ``observe`` (the owned worker for
observation-only events). Wiring: ``session`` (the Python API) and ``cli``
(``hookrunner fire``). ``packs`` holds the five built-in packs; they run as
child processes with ``python -I -S``, so this package imports nothing here.
See docs/hooks.md, "The AX Code / Claude Code dialect".
"""
