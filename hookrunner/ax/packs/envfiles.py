"""protect-env-files: does a tool call read or write a ``.env`` file? (pure)

An env file is one whose name (the last path component, any case) is
``.env`` or starts with ``.env.`` (``.env.local``, ``.env.production``), but a
template that holds no secret (``.env.example``, ``.sample``, ``.template``,
``.dist``, ``.tmpl``, ``.tpl``: ``mask.is_template``, D385; the mask's own rule,
and a link so named that leads to an env file is judged by its target). ``.envrc``,
``prod.env`` and a directory called ``.env`` (a virtualenv: ``.env/bin/python``)
are not. A glob that starts with a dot and can expand to such a name counts
(``.env*``, ``.e*``, ``.*``); ``*`` does not (the shell does not expand it to
dot files).

Where it looks:
* file tools: every path argument (``filePath``, ``file_path``, ``path``,
  ``paths``, ``notebook_path``), grep's ``include`` glob when it names ``env``
  and can match an env file (``*.env``, ``.env*``), and the file names in a
  patch (``*** Update File: .env``, ``+++ b/.env``);
* shell commands: every word of every command, including values of
  ``--opt=value`` and ``NAME=value``, ``host:path`` and one level of brace
  expansion (``.{env,x}``), and every redirection target (``> .env``).
  Commands that only print or test a name (``echo``, ``printf``, ``ls``,
  ``test``, ``[``) do not read the file: only their redirections count, so
  ``echo .env`` is harmless but ``echo KEY=1 >> .env`` is a write;
* other code (``language: python``): any word that is an env-file path, e.g.
  ``open(".env")`` (a string that only mentions one counts too).

A command that reads whole directories (``grep -r``, ``tar c``, ``zip -r``,
``cp -r``, ``rg --hidden``: `recursive_operands`) reads the env files below
them: with a ``reach`` function (the pack passes a bounded walk of the
workspace) such a command counts when an env file is there. ``find ...
-exec CMD {}`` and ``xargs CMD`` give ``CMD`` a word shaped by ``-name``
(``'*env'`` can be ``.env``; no ``-name``: any file).

A link is what it points to: with a ``resolve`` function (the pack passes
``realpath`` from the workspace) every path and shell word is also judged by
the name of the file it resolves to, so ``notes.txt -> .env`` is an env file.
A shell word the shell still expands (``$F``, ``"$DIR"/x``, ``$(...)``) is
judged by its shape, each expansion read as any text: it counts when its last
component can be ``.env`` or ``.env.<a usual suffix>`` (``$F``, ``.$X``,
``$NAME.production``) but not when a literal name or extension follows the
expansion (``$DIR/config.yaml``, ``$NAME.txt``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

from sandbox_egress.hookrunner.ax.packs.commands import SUPPLIED, Command, basename, read_script
from sandbox_egress.hookrunner.ax.packs.words import Word, is_dynamic
from sandbox_egress.hookrunner.enforce.mask import is_template

Resolve = Callable[[str], "str | None"]
Reach = Callable[[str], "str | None"]  # a directory -> an env file somewhere below it

PATH_KEYS = ("filePath", "file_path", "path", "notebook_path")
LIST_KEYS = ("paths", "files")
PATCH_KEYS = ("patchText", "patch", "input", "diff")
GLOB_KEYS = ("include", "glob")
HARMLESS = frozenset(
    {"echo", "printf", "ls", "test", "[", "[[", "true", ":", "type", "which",
     "cd", "pushd", "popd", "export", "unset", "local", "declare", "readonly", "mkdir",
     "dirname", "basename", "realpath", "readlink", "kill"}
)  # fmt: skip
_PATCH_FILE = re.compile(
    r"^(?:\*\*\* (?:Add|Update|Delete) File: |\+\+\+ |--- )(?:[ab]/)?(.+?)\s*$"
)
_BRACE = re.compile(r"^(.*)\{([^{}]*,[^{}]*)\}(.*)$")
_CODE_WORD = re.compile(r"[^\s'\"(),\[\]{};=]+")
_GLOB_CHARS = frozenset("*?[")
_SAMPLES = (".env", ".env.local")
# What an expansion followed by a literal tail is checked against ($NAME.production).
_DYNAMIC_SAMPLES = (
    ".env", ".env.local", ".env.production", ".env.development", ".env.test",
    ".env.staging", ".env.prod", ".env.dev",
)  # fmt: skip


def _bash_brackets(pattern: str) -> str:
    """``pattern`` with each bracket expression ``fnmatch`` does not read as bash does
    (a class ``[[:lower:]]``, ``[[=e=]]``, ``[[.e.]]``, a negation ``[^x]``) as ``?``: such a
    glob is judged as if it could match any character there (stricter, never looser, D436)."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        j = i + 1
        if pattern[i] != "[":
            out.append(pattern[i])
            i = j
            continue
        special = pattern[j : j + 1] == "^"
        j += 1 if pattern[j : j + 1] in ("!", "^") else 0
        j += 1 if pattern[j : j + 1] == "]" else 0
        while j < len(pattern) and pattern[j] != "]":
            if pattern[j] == "[" and pattern[j + 1 : j + 2] in (":", "=", "."):
                end = pattern.find(pattern[j + 1] + "]", j + 2)
                if end < 0:
                    break
                special, j = True, end + 2
            else:
                j += 1
        if j >= len(pattern):  # not closed: a literal "[", as in bash
            out.append("[")
            i += 1
            continue
        out.append("?" if special else pattern[i : j + 1])
        i = j + 1
    return "".join(out)


def is_env_name(name: str, dotglob: bool = False) -> bool:
    """``dotglob``: globs match dot files here (``shopt -s dotglob``, ``GLOBIGNORE=x``)."""
    folded = name.casefold()
    if folded == ".env" or folded.startswith(".env."):
        return not is_template(folded)
    if (folded.startswith(".") or dotglob) and _GLOB_CHARS & set(folded):
        return any(fnmatchcase(sample, _bash_brackets(folded)) for sample in _SAMPLES)
    return False


def is_env_path(path: str, dotglob: bool = False) -> bool:
    return bool(path) and not path.endswith("/") and is_env_name(basename(path), dotglob)


def _candidates(word: str) -> Iterator[str]:
    match = _BRACE.match(word)
    if match is not None:
        for alternative in match.group(2).split(","):
            yield from _candidates(match.group(1) + alternative + match.group(3))
        return
    yield word
    if "=" in word:
        yield word.split("=", 1)[1]
    if ":" in word:
        yield word.rsplit(":", 1)[1]


def _glob_reaches_env(pattern: str) -> bool:
    """A search tool's file glob (ripgrep style: ``*`` also matches a leading dot)."""
    last = basename(pattern).casefold()
    if "env" not in last:
        return False  # "*" alone: hidden files are not searched by default
    return any(fnmatchcase(sample, _bash_brackets(last)) for sample in _SAMPLES)


def _dynamic_env(word: Word) -> bool:
    """Can this expanded word be an env file? (its shape's last component, see above)"""
    shapes = [word.shape]
    if "=" in word.shape:
        shapes.append(word.shape.split("=", 1)[1])
    for shape in shapes:
        last = shape.rstrip("/").rsplit("/", 1)[-1]
        glob = _bash_brackets(last)
        if "*" in last and any(fnmatchcase(s, glob) for s in _DYNAMIC_SAMPLES):
            return True
    return False


def env_word(
    word: str, resolve: Resolve | None = None, dotglob: bool = False, unseen: bool = True
) -> str | None:
    """The candidate of ``word`` that is an env file (by name, by what it links to), or None.
    ``unseen``: an expansion that could be one counts too (no mask below the pack, D196)."""
    if isinstance(word, Word) and word.expands:
        last = word.shape.rstrip("/").rsplit("/", 1)[-1]
        # "$DIR/.env", ".env.$STAGE": the name, or its ".env." start, is written out
        seen = ("*" not in last and is_env_name(last)) or last.casefold().startswith(".env.")
        return word if seen or (unseen and _dynamic_env(word)) else None
    for candidate in _candidates(word):
        if is_env_path(candidate, dotglob and is_dynamic(word)):
            return candidate
        if resolve is not None and not is_dynamic(word):
            target = resolve(candidate)
            if target is not None and is_env_path(target):
                return candidate
    return None


def in_shell(
    text: str, resolve: Resolve | None = None, reach: Reach | None = None, unseen: bool = True
) -> str | None:
    """The first env file a shell command line reads or writes, as written."""
    return in_commands(read_script(text).commands, resolve, reach, unseen)


def in_commands(
    commands: Iterable[Command],
    resolve: Resolve | None = None,
    reach: Reach | None = None,
    unseen: bool = True,
) -> str | None:
    for command in commands:
        for _operator, target in command.redirects:
            if env_word(target, resolve, command.dotglob, unseen):
                return target
        if command.program in HARMLESS:
            continue
        supplied = [w for w in command.argv if w is SUPPLIED]  # what xargs adds
        text = message_positions(command)
        unread = unseen and bool(command.argv)  # "F=$1" alone only stores a value
        for index, word in enumerate((*command.words, *supplied)):
            if index not in text and env_word(word, resolve, command.dotglob, unread):
                return word
        if reach is not None:
            for directory in recursive_operands(command):
                found = reach(directory)
                if found is not None:
                    return found
    return None


# Options whose value is text (a message, a title), never a file, by program and subcommand:
# git commit -m "$(cat <<'EOF' ...)" and gh pr create --body "$(cat <<'EOF' ...)" are Claude
# Code's own idioms (D197). (--body-file, -F read files: not here.)
_TEXT_OPTIONS = {
    "git": ({"commit", "tag", "merge", "stash", "notes"}, {"-m", "--message"}),
    "gh": ({"pr", "issue", "release"}, {"-t", "--title", "-b", "--body", "-n", "--notes"}),
    "glab": (
        {"mr", "issue", "release"},
        {"-t", "--title", "-d", "--description", "-m", "--message"},
    ),
}
_GIT_GLOBAL_VALUES = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})


def message_positions(command: Command) -> set[int]:
    """The indexes in ``command.words`` of option values that are text, not paths."""
    table = _TEXT_OPTIONS.get(command.program)
    if table is None:
        return set()
    subcommands, options = table
    start = len(command.words) - len(command.argv)
    sub = start + 1
    while sub < len(command.words) and command.words[sub].startswith("-"):
        sub += 2 if command.words[sub] in _GIT_GLOBAL_VALUES else 1
    if sub >= len(command.words) or command.words[sub] not in subcommands:
        return set()
    found: set[int] = set()
    for index in range(sub + 1, len(command.words)):
        word = command.words[index]
        short_m = command.program == "git" and re.fullmatch(r"-[a-zA-Z]*m", word) is not None
        if word.split("=", 1)[0] in options and "=" in word and word.startswith("--"):
            found.add(index)
        elif (word in options or short_m) and not is_dynamic(word):
            found.add(index + 1)
    return found


def _short_flags(args: Sequence[str]) -> set[str]:
    flags: set[str] = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and not arg.startswith("--"):
            flags.update(arg[1:])
    return flags


def recursive_operands(command: Command) -> list[str]:
    """The directories a command reads every file of, hidden ones included (``grep -r``,
    ``tar c``, ``zip -r``, ``cp -r``, ``rg --hidden``...); a word bash still expands is
    read as the workspace (``.``)."""
    program, args = command.program, list(command.argv[1:])
    longs = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    shorts = _short_flags(args)
    operands = [a for a in args if not a.startswith("-")]
    recursive: bool
    if program in ("grep", "egrep", "fgrep", "zgrep"):
        recursive = bool(shorts & {"r", "R"} or longs & {"--recursive", "--dereference-recursive"})
        recursive = recursive or "--directories=recurse" in args
        patterned = shorts & {"e", "f"} or longs & {"--regexp", "--file"}
        paths = operands if patterned else operands[1:]
    elif program in ("rg", "ag"):
        hidden = longs & {"--hidden", "--unrestricted", "--no-ignore-dot"} or "." in shorts
        recursive = bool(hidden) or any(a.startswith("-uu") for a in args)
        recursive = recursive or (program == "ag" and "u" in shorts)
        paths = operands[1:]
    elif program in ("tar", "bsdtar"):
        mode = args[0].lstrip("-") if args else ""
        recursive = bool(set(mode) & {"c", "r", "u"} or longs & {"--create", "--append"})
        paths = operands[1:] if args and not args[0].startswith("-") else operands
    elif program in ("zip", "cp", "scp", "rsync", "7z", "cpio", "pax"):
        recursive = bool(shorts & {"r", "R", "a"} or longs & {"--recursive", "--archive"})
        recursive = recursive or program in ("7z", "rsync")
        paths = operands
    else:
        return []
    if not recursive:
        return []
    return [("." if is_dynamic(p) else p) for p in paths] or ["."]


def in_code(text: str) -> str | None:
    return next((w for w in _CODE_WORD.findall(text) if env_word(w)), None)


def _names_env(path: str, resolve: Resolve | None) -> bool:
    if is_env_path(path):
        return True
    target = resolve(path) if resolve is not None else None
    return target is not None and is_env_path(target)


def in_arguments(args: Mapping[str, Any], resolve: Resolve | None = None) -> str | None:
    """The first env file named by a file tool's arguments (or reached through a link)."""
    for key in PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and (env_word(value) or _names_env(value, resolve)):
            return value
    for key in LIST_KEYS:
        values = args.get(key)
        if isinstance(values, list):
            for value in values:
                if isinstance(value, str) and (env_word(value) or _names_env(value, resolve)):
                    return value
    for key in GLOB_KEYS:
        value = args.get(key)
        if isinstance(value, str) and _glob_reaches_env(value):
            return value
    for key in PATCH_KEYS:
        value = args.get(key)
        if isinstance(value, str):
            for line in value.splitlines():
                match = _PATCH_FILE.match(line)
                if match is not None and _names_env(match.group(1), resolve):
                    return match.group(1)
    return None
