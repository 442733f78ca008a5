"""The enforcement layer: where a hook's or a tool's process runs, and what it can reach.

The kernel decides; this package holds what makes a decision hold where the
command actually runs (docs/hooks.md#which-layer-stops-what): ``command`` (one child process with a
deadline, bounded output, no leftovers), ``contain`` (cgroup / PID namespace /
process group, the tool user's credentials), ``envsan`` (the sanitised
environment), ``programs`` (PATH entries the agent cannot have written),
``isolation`` (the environment and files the agent cannot have prepared),
``mask`` (which files a tool's processes see as empty), ``toolns`` (the tool's
mount namespace: the masks and the git guard, with or without root),
``gitguard`` (the judgement of a git command there), ``gitpush`` (a push judged on
pinned object ids), ``gitrun`` (running the real git), ``gitbroker`` (the only holder
of the real git, which runs the guard as the tool user) and ``gitclient`` (what ``git``
is for the tool: a client of the broker), ``beneath``
(opening below a directory without following symlinks), ``bounds`` (the one
bound on every payload), ``tools`` (the built-in tools of ``hookrunner
exec``) and ``bound`` (the same boundary around a shell command another
program runs: Claude Code's Bash, through ``fire``). Nothing here knows a
dialect. See docs/hooks.md.
"""
