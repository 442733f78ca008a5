"""The tool's mount namespace: the masks and the git guard, mounted before the tool user runs.

``code_execution`` runs in a mount namespace of its own (private propagation,
gone with its last process) in which, as root and before dropping to the tool
user with ``setpriv``:

* every protected file (``mask``) has ``/dev/null`` bind-mounted over it (D93);
* the real git binary is bind-mounted on a runner-owned file, and the guard's
  wrapper (``gitguard``) over every path the git binary is reached by (D185).

The tool user has no ``CAP_SYS_ADMIN`` and cannot unmount; in a user
namespace of its own the mounts are locked.

Invariants:
* a mount that fails stops the tool before the program runs (exit 125): never a
  tool run with a file left readable or git left unguarded;
* a runner that is not root makes the same namespace inside an unprivileged
  user namespace (and a PID namespace), then drops every capability before the
  program runs; the guard's directory and wrappers are read-only there (D190);
* when neither can be made the argv is returned unchanged, ``boundary`` is
  empty (the packs fail closed) and ``boundary_problem`` says why, once;
* the runner-owned directory of the guard is made once per process, owned by
  the runner, not writable by anyone else, and removed at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import stat
import sys
from collections.abc import Mapping, Sequence

from sandbox_egress.hookrunner.enforce import leanos
from sandbox_egress.hookrunner.enforce.gitfind import _SYSTEM_PATH as _SYSTEM_PATH
from sandbox_egress.hookrunner.enforce.gitfind import GIT_HOMES, git_paths

__all__ = ["GIT_HOMES", "git_paths"]  # found in ``gitfind``, named here as before

TYPE_CHECKING = False  # mypy reads the block below; at run time ``typing`` is not imported
if TYPE_CHECKING:
    from pathlib import Path

    from sandbox_egress.common.contain import Credentials

# Every Bash call of ``fire`` imports this module (``enforce.boundcall``, D430): only
# ``os``-level modules here (``leanos`` for shutil/tempfile/shlex and the capability
# check); ``subprocess`` and ``logging`` where used; the guard's modules are copied by
# path, not imported.
_HERE = os.path.dirname(os.path.abspath(__file__))
GUARD_MODULES = ("gitguard", "gitpush", "gitrun", "gitbroker", "gitclient")  # D370, D375
_CAP_SYS_ADMIN = 21
PYTHONS = ("/usr/bin/python3",)
# $1: mount; $2: stat; how many paths to bind read-only onto themselves (one ``mount``
# each: what runs before the next call's boundary, D435); the paths; how many (source,
# target) pairs follow; the pairs; how many checked (source, target, device:inode)
# triples follow: each bound onto the file its target opens only when that is the file
# the walk saw (D438); the triples; how many fresh tmpfs directories (the broker's
# socket); them; the broker (python, gitbroker.py, socket, real git, credentials) or "-";
# how many paths to make read-only; the paths; then the program.
SCRIPT = (
    'mount=$1; stat=$2; n=$3; shift 3; while [ "$n" -gt 0 ]; do '
    '"$mount" -o bind,ro "$1" "$1" || exit 125; shift; n=$((n - 1)); done; '
    'n=$1; shift; while [ "$n" -gt 0 ]; do '
    '"$mount" --bind "$1" "$2" || exit 125; shift 2; n=$((n - 1)); done; '
    'n=$1; shift; while [ "$n" -gt 0 ]; do '
    'command exec 9<"$2" || exit 125; '
    '[ "$("$stat" -Lc %d:%i /dev/fd/9)" = "$3" ] || '
    '{ echo "hookrunner boundary: $2 changed before it was masked" >&2; exit 125; }; '
    '"$mount" -c --bind "$1" /proc/self/fd/9 || exit 125; exec 9<&-; '
    "shift 3; n=$((n - 1)); done; "
    'n=$1; shift; while [ "$n" -gt 0 ]; do '
    '"$mount" -t tmpfs -o mode=0755,size=64k hookrunner "$1" || exit 125; shift; '
    "n=$((n - 1)); done; "
    'if [ "$1" = - ]; then shift; else "$1" -I -S -B "$2" "$3" "$4" "$5" || exit 125; shift 5; fi; '
    'n=$1; shift; while [ "$n" -gt 0 ]; do '
    '"$mount" -o remount,bind,ro "$1" || exit 125; shift; n=$((n - 1)); done; exec "$@"'
)
STAT = leanos.which("stat", _SYSTEM_PATH) or "/usr/bin/stat"


class Guard:
    """The git guard of this runner process: where its wrapper is and what it covers.

    In the namespace the real git is reachable only through the broker's descriptor
    (D375): its execute-only copy is in ``hidden`` (mode 0000, in the read-only
    directory: the tool user can neither traverse nor chmod it); ``run`` is a fresh
    tmpfs per namespace for the broker's socket. (A plain class, not a dataclass:
    ``dataclasses`` costs every Bash call ~20 ms of CPU, D430.)"""

    __slots__ = ("directory", "wrapper", "real", "python", "covered")

    def __init__(
        self, directory: str, wrapper: str, real: str, python: str, covered: tuple[str, ...]
    ) -> None:
        self.directory = directory  # runner-owned: the wrapper, the modules, run, hidden
        self.wrapper = wrapper  # runs ``gitclient.py`` with the broker's socket
        self.real = real  # the git binary (its copy is what the broker runs)
        self.python = python  # the interpreter of the broker and the client
        self.covered = covered  # every path of the git binary, the wrapper mounted over each

    @property
    def run(self) -> str:
        return os.path.join(self.directory, "run")

    @property
    def hidden(self) -> str:
        return os.path.join(self.directory, "hidden")

    def binds(self) -> list[tuple[str, str]]:
        wrappers = [(self.wrapper, path) for path in self.covered]
        return [(self.directory, self.directory), *wrappers]

    def read_only(self) -> list[str]:
        """Made read-only in the namespace: a runner that is not root runs the tool as its
        own user, who owns the directory and could otherwise rewrite the guard."""
        return [self.directory, *self.covered]

    def broker(self, credentials: str) -> list[str]:
        """The broker's words in ``SCRIPT`` (``UID:GID`` or ``-``: drop every capability)."""
        script = os.path.join(self.directory, "gitbroker.py")
        socket = os.path.join(self.run, "broker.sock")
        return [self.python, script, socket, os.path.join(self.hidden, "git"), credentials]


class Programs:
    """The programs that make the namespace (a plain class, as ``Guard``)."""

    __slots__ = ("unshare", "mount", "setpriv", "unprivileged", "own_proc")

    def __init__(
        self, unshare: str, mount: str, setpriv: str, unprivileged: bool, own_proc: bool = True
    ) -> None:
        self.unshare = unshare
        self.mount = mount
        self.setpriv = setpriv
        self.unprivileged = unprivileged  # not root: an unprivileged user namespace (D190)
        # that namespace can mount its own /proc (not where /proc is partly covered, as in
        # many containers: the kernel refuses a new one there; D375)
        self.own_proc = own_proc

    def _key(self) -> tuple[str, str, str, bool, bool]:
        return (self.unshare, self.mount, self.setpriv, self.unprivileged, self.own_proc)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Programs) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


_probed: list[Programs | None] = []


def programs() -> Programs | None:
    """How the namespace is made here (probed once), or None when it cannot be."""
    if not _probed:
        _probed.append(_probe())
    return _probed[0]


def _probe() -> Programs | None:
    names = [leanos.which(n, _SYSTEM_PATH) for n in ("unshare", "mount", "setpriv")]
    unshare, mount, setpriv = names
    if unshare is None or mount is None or setpriv is None:
        return None
    if leanos.has_capability(_CAP_SYS_ADMIN):
        return Programs(unshare, mount, setpriv, unprivileged=False)
    import subprocess  # here: a root runner (every ``fire`` Bash call as root) never needs it

    for own_proc in (True, False):
        found = Programs(unshare, mount, setpriv, unprivileged=True, own_proc=own_proc)
        try:
            done = subprocess.run(probe_argv(found), capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode == 0:
            return found
    return None


def probe_argv(tools: Programs) -> list[str]:
    """A namespace made as the tools' would be, one bind and one read-only remount, no program."""
    return namespace_argv(["/bin/true"], [("/dev/null", "/dev/null")], ["/dev/null"], None, tools)


_NO_CAPABILITIES = ["--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", "--"]


def namespace_argv(
    argv: Sequence[str],
    binds: Sequence[tuple[str, str]],
    read_only: Sequence[str],
    user: Credentials | None,
    tools: Programs,
    guard: Guard | None = None,
    *,
    lasting: bool = False,
    checked: Sequence[tuple[str, str, str]] = (),
    kept: Sequence[str] = (),
) -> list[str]:
    """``argv`` run in a new mount namespace after ``binds`` and ``checked`` (source,
    target, ``device:inode`` the target must still be: D438), then ``read_only`` remounted
    so, as ``user`` (root's namespace) or without any capability (a user namespace, with
    its own ``/proc`` unless ``lasting``); with ``guard``, its broker started first;
    ``kept`` bound read-only onto themselves before anything (D435).

    ``lasting`` (the boundary of ``fire``, D381): what the program leaves running in the
    background outlives it (no PID namespace), and a root program without a ``user``
    keeps uid 0 but loses every capability (it cannot unmount a mask)."""
    program = list(argv)
    credentials = "-"  # the broker's workers: as the program runs (D375)
    if tools.unprivileged:  # root of the user namespace until here; no capability after
        program = [tools.setpriv, *_NO_CAPABILITIES, *program]
        unshare = [tools.unshare, "--user", "--map-root-user"]
        # its own /proc: no /proc/<pid>/root of a process outside leads to the host's git
        unshare += [] if lasting else ["--pid", "--fork", "--kill-child"]
        unshare += ["--mount-proc"] if tools.own_proc and not lasting else []
    else:
        unshare = [tools.unshare]
        if user is not None:
            ids = [f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--"]
            program = [tools.setpriv, *ids, *program]
            credentials = f"{user.uid}:{user.gid}"
        elif lasting:
            program = [tools.setpriv, *_NO_CAPABILITIES, *program]
        else:
            credentials = "0:0"  # the program itself runs as root with its capabilities
    pairs = [path for pair in binds for path in pair]
    triples = [part for triple in checked for part in triple]
    prefix = [*unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", SCRIPT]
    counts = [str(len(kept)), *kept, str(len(binds)), *pairs, str(len(checked)), *triples]
    if guard is None:
        counts += ["0", "-"]
    else:
        counts += ["1", guard.run, *guard.broker(credentials)]
        read_only = [*read_only, guard.run]  # its socket in place, nobody replaces it
    counts += [str(len(read_only)), *read_only]
    return [*prefix, "hookrunner-ns", tools.mount, STAT, *counts, *program]


def _world_reachable(path: str) -> bool:
    """Whether any user can run ``path``: it and every directory above it are o+x."""
    current = os.path.abspath(path)
    try:
        while True:
            if not os.stat(current).st_mode & stat.S_IXOTH:
                return False
            parent = os.path.dirname(current)
            if parent == current:
                return True
            current = parent
    except OSError:
        return False


def guard_python() -> str | None:
    """An interpreter the tool user can run and cannot change (the runner's, or the system's)."""
    for candidate in (os.path.realpath(sys.executable), *PYTHONS):
        real = os.path.realpath(candidate)
        info = os.stat(real) if os.path.exists(real) else None
        if info is None or info.st_uid not in (0, os.getuid()) or info.st_mode & 0o022:
            continue
        if _world_reachable(real):
            return real
    return None


_guards: dict[str, Guard | None] = {}


def git_guard(path_variable: str) -> Guard | None:
    """The guard for a tool PATH (made once per process), or None when git or Python is missing."""
    if path_variable in _guards:
        return _guards[path_variable]
    guard = _make_guard(path_variable)
    _guards[path_variable] = guard
    return guard


def remove_guard(directory: Path | str) -> None:
    with contextlib.suppress(OSError):
        os.chmod(os.path.join(directory, "hidden"), 0o700)  # 0000 (D375): a runner not root
    leanos.remove_tree(str(directory))


def _make_guard(path_variable: str) -> Guard | None:
    paths = git_paths(path_variable)
    python = guard_python()
    if paths is None or python is None:
        if paths is not None:
            import logging

            logging.getLogger("hookrunner").warning(
                "hookrunner: no interpreter the tool user can run; git is not guarded"
            )
        return None
    real, covered = paths
    directory = leanos.make_temp_dir("hookrunner-git-")
    atexit.register(remove_guard, directory)
    os.chmod(directory, 0o755)
    for module in GUARD_MODULES:
        copy = os.path.join(directory, f"{module}.py")
        leanos.copy_file(os.path.join(_HERE, f"{module}.py"), copy)
        os.chmod(copy, 0o644)
    os.mkdir(os.path.join(directory, "run"), 0o755)
    hidden = os.path.join(directory, "hidden")
    os.mkdir(hidden, 0o700)
    leanos.copy_file(real, os.path.join(hidden, "git"))
    os.chmod(os.path.join(hidden, "git"), 0o111)  # execute-only: a git run from it is not dumpable
    os.chmod(hidden, 0o000)  # the broker opens it with its capabilities; nobody else traverses it
    wrapper = os.path.join(directory, "git")
    socket = os.path.join(directory, "run", "broker.sock")
    client = os.path.join(directory, "gitclient.py")
    command = leanos.join([python, "-I", "-S", client, socket])
    with open(wrapper, "x", encoding="utf-8") as script:
        script.write(f'#!/bin/sh\nexec {command} "$0" "$@"\n')
    os.chmod(wrapper, 0o755)
    return Guard(directory, wrapper, real, python, tuple(covered))


def tool_namespace(
    argv: Sequence[str],
    binds: Sequence[tuple[str, str]],
    user: Credentials | None,
    env: Mapping[str, str],
    *,
    lasting: bool = False,
    keep: Sequence[str] = (),
    checked: Sequence[tuple[str, str, str]] = (),
) -> tuple[list[str], Credentials | None, bool]:
    """(argv, who ``run_process`` switches to, whether the namespace is made).

    ``binds`` are the masks; the git guard's are added. None for the user: the
    prefix drops to ``user`` itself. ``lasting``: see ``namespace_argv``. ``keep``: paths
    bound read-only onto themselves first (so a mask below one stays, D435); ``checked``:
    masks mounted only where their path still opens the file the walk saw (D438)."""
    tools = programs()
    if tools is None:
        return list(argv), user, False
    guard = git_guard(env.get("PATH", ""))
    every = [*(guard.binds() if guard is not None else ()), *binds]
    read_only = guard.read_only() if guard is not None else []
    made = namespace_argv(
        argv, every, read_only, user, tools, guard, lasting=lasting, checked=checked, kept=keep
    )
    return made, None, True


def boundary(env: Mapping[str, str]) -> str:
    """``HOOK_BOUNDARY`` for the packs judging a tool this runner runs: ``git`` when the
    guard is mounted, ``mask`` when the masks are (D194); empty when neither."""
    if programs() is None:
        return ""
    return "git,mask" if git_guard(env.get("PATH", "")) is not None else "mask"


def boundary_problem() -> str | None:
    """What to say once, at start, when no namespace can be made here."""
    if programs() is not None:
        return None
    return (
        "neither root's mount namespace nor an unprivileged user namespace can be made here "
        "(unshare, mount and setpriv, and kernel.unprivileged_userns_clone or "
        "user.max_user_namespaces): git is not guarded and .env files are not masked where the "
        "tools run; the packs are the only guard and refuse what they cannot read"
    )
