"""The AX Code / Claude Code lifecycle-hook dialect
(docs/hooks.md#the-ax-code--claude-code-dialect-ax-codehooksjson): ``.ax-code/hooks.json``.

A plug-in of the hook kernel (``hookrunner.kernel``): this package adds its
events, its files and their schema, the decoding of a hook's answer and the
decision of an event; the kernel gives it session setup, the environment,
spawning, the one ``Outcome`` set, reporting and metrics. The roles have the
names they have in the hooks.json dialect of ``hookrunner``:
Pure core: ``model`` (events, entries, the closed cause set), ``matcher``
(AX matchers), ``schema`` and ``loader`` (the file, trust), ``events`` (event
payloads), ``envelope`` (what a hook receives), ``decode`` (one hook's exit
status and output to its effect), ``aggregate`` (the decision of an event),
``feedback`` (the ``<hook_feedback>`` block).
Mechanisms: ``dispatch`` (one hook as a child process through the kernel),
``observe`` (the owned worker for observation-only events). Wiring:
``metrics`` (this dialect's series: ``hookrunner.cli`` registers them with
the kernel's ``metrics.register_dialect``, and every ``AxSession`` adds them
to its ``HookMetrics``), ``session`` (the Python API), ``cli``
(``hookrunner fire``) and ``firebound`` (the runner's boundary for Claude Code's
Bash, through ``updatedInput``). ``packs`` holds the five built-in packs; they run as
child processes with ``python -I -S``, so this ``__init__`` imports nothing.
See docs/hooks.md, "The AX Code / Claude Code dialect".
"""
