"""The programs that run another program given on their command line, and their options (pure).

``commands._unwrap`` skips them so ``argv[0]`` is the program that runs.
"""

from __future__ import annotations

# Wrapper -> its options that take a separate value.
_WRAPPERS: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-R", "-T"}),
    "doas": frozenset({"-u", "-C"}),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir", "--split-string"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "nohup": frozenset(),
    "time": frozenset({"-f", "-o"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "setsid": frozenset(),
    "chronic": frozenset(),
    "unbuffer": frozenset(),
    "xargs": frozenset({"-a", "-d", "-E", "-e", "-I", "-i", "-L", "-l", "-n", "-P", "-s"}),
    "taskset": frozenset(),
    "chrt": frozenset(),
    "flock": frozenset({"-E", "-w", "--timeout", "--conflict-exit-code"}),
    "chroot": frozenset({"--userspec", "--groups"}),
    "unshare": frozenset({"-S", "-G", "--setuid", "--setgid"}),
    "nsenter": frozenset({"-t", "--target", "-S", "-G"}),
    "setpriv": frozenset({"--reuid", "--regid", "--groups", "--inh-caps", "--bounding-set"}),
    "runuser": frozenset({"-u", "-g", "-G", "--user", "--group"}),
    "strace": frozenset({"-e", "-o", "-p", "-s", "-u", "-E"}),
    "ltrace": frozenset({"-e", "-o", "-p", "-s", "-u"}),
    "prlimit": frozenset({"-p", "--pid"}),
    "caffeinate": frozenset(),
    "firejail": frozenset(),
    "setarch": frozenset(),
    "linux32": frozenset(),
    "linux64": frozenset(),
    "uname26": frozenset(),
}
_OPERANDS = {"timeout": 1, "taskset": 1, "chrt": 1, "flock": 1, "chroot": 1}  # before the command
_SCRIPT_OPTIONS = {"su": ("-c", "--command"), "script": ("-c", "--command"), "flock": ("-c",)}
