"""The programs that run another program given on their command line, and their options (pure).

``commands._unwrap`` skips them so ``argv[0]`` is the program that runs.
"""

from __future__ import annotations

import re

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "{", "}", "!", "coproc"}
)


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


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _unwrap(words: list[str]) -> tuple[list[str], list[str], bool]:
    """Skip assignments, keywords and wrappers: (argv, scripts, xargs seen)."""
    i, scripts, supplied = 0, [], False
    while i < len(words):
        word, name = words[i], basename(words[i])
        if word in _KEYWORDS or _ASSIGNMENT.match(word):
            i += 1
            continue
        if name not in _WRAPPERS:
            break
        i += 1
        if name == "setarch" and i < len(words) and not words[i].startswith("-"):
            i += 1  # setarch ARCH [options] PROGRAM
        supplied |= name == "xargs"
        takes = _WRAPPERS[name]
        script_options = _SCRIPT_OPTIONS.get(name, ())
        while i < len(words) and (
            words[i].startswith("-") or (name == "env" and _ASSIGNMENT.match(words[i]))
        ):
            option = words[i]
            if name == "env" and option in ("-S", "--split-string") and i + 1 < len(words):
                scripts.append(words[i + 1])
            if option in script_options and i + 1 < len(words):
                scripts.append(words[i + 1])
                return [], scripts, supplied
            if option == "--":
                i += 1
                break
            i += 2 if option in takes else 1
        i += _OPERANDS.get(name, 0)
        if i + 1 < len(words) and words[i] in script_options:  # flock FILE -c CMD
            return [], [*scripts, words[i + 1]], supplied
    return words[i:], scripts, supplied
