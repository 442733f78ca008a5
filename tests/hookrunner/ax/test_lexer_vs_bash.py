"""The packs' shell lexer against real bash, on generated command lines (hypothesis).

The subset the lexer claims to read exactly as bash does (docs/hooks.md,
"The shell the packs read"):
* words of bare characters, backslash escapes (any character, and the line
  continuation), single quotes, double quotes (with ``\\"`` ``\\\\`` ``\\$``
  ``\\``` and a literal backslash before anything else), ANSI-C quotes
  ``$'...'`` (every escape of the bash manual) and locale quotes ``$"..."``,
  concatenated into one word;
* simple commands separated by ``;``, ``&&`` and newlines.
Each generated line is a list of ``printf '%s\\0' WORDS`` commands; bash
prints the words it built, NUL-separated, and they must equal, byte for
byte, the words the lexer returns (encoded as ``os.fsencode`` does).

For what it does not expand (parameter expansion, command substitution,
globs) the lexer must fail safe: the word is marked ``dynamic`` and its
``shape`` (each expansion read as ``*``) matches what bash made of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from fnmatch import fnmatchcase

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sandbox_egress.hookrunner.ax.packs.commands import read_script
from sandbox_egress.hookrunner.ax.packs.shell import split_commands
from sandbox_egress.hookrunner.ax.packs.words import Word

BASH = shutil.which("bash")  # part of every supported base image; a missing one fails loudly
ENVIRON = {"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"}
PRINT = "printf '%s\\0' @"  # "@": printf with no word would still print one empty one

_ASCII = "".join(chr(c) for c in range(0x20, 0x7F))
_WIDE = "éßЖ日😀"
_BARE = st.text(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./+=,@%^:" + _WIDE,
    min_size=1,
    max_size=6,
)
_QUOTABLE = _ASCII + _WIDE + "\t\n"


def _double_body() -> st.SearchStrategy[str]:
    plain = st.sampled_from([c for c in _QUOTABLE if c not in '"\\$`'])
    escaped = st.sampled_from(['\\"', "\\\\", "\\$", "\\`", "\\\n", "\\a", "\\n", "\\'"])
    return st.lists(st.one_of(plain, escaped), max_size=6).map("".join)


def _ansi_c_piece() -> st.SearchStrategy[str]:
    plain = st.sampled_from([c for c in _QUOTABLE if c not in "'\\"])
    simple = st.sampled_from([f"\\{c}" for c in "abeEfnrtv\\'\"?"] + ["\\z", "\\q"])
    octal = st.integers(1, 0o377).flatmap(lambda n: st.sampled_from([f"\\{n:o}", f"\\{n:03o}"]))
    hexa = st.integers(1, 0xFF).flatmap(lambda n: st.sampled_from([f"\\x{n:x}", f"\\x{n:02X}"]))
    uni = st.integers(1, 0xFFFF).map(lambda n: f"\\u{n:x}")
    big = st.one_of(st.integers(1, 0xD7FF), st.integers(0xE000, 0x10FFFF)).map(
        lambda n: f"\\U{n:08x}"
    )
    control = st.sampled_from([f"\\c{c}" for c in "aAzZjm?"])
    return st.one_of(plain, simple, octal, hexa, uni, big, control)


SEGMENT = st.one_of(
    _BARE,
    st.sampled_from(_ASCII.replace("\n", "")).map(lambda c: "\\" + c),
    st.just("\\\n"),
    st.text(st.sampled_from([c for c in _QUOTABLE if c != "'"]), max_size=6).map(
        lambda t: f"'{t}'"
    ),
    _double_body().map(lambda t: f'"{t}"'),
    st.lists(_ansi_c_piece(), max_size=5).map(lambda p: "$'" + "".join(p) + "'"),
    _double_body().map(lambda t: f'$"{t}"'),
)
WORD = st.lists(SEGMENT, min_size=1, max_size=4).map("".join)
COMMAND = st.lists(WORD, min_size=1, max_size=5).map(lambda ws: " ".join([PRINT, *ws]))
LINE = st.tuples(
    st.lists(COMMAND, min_size=1, max_size=3),
    st.sampled_from(["; ", " && ", "\n", " ;"]),
).map(lambda t: t[1].join(t[0]))


def bash_words(line: str, **variables: str) -> list[bytes]:
    assert BASH is not None
    done = subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", line],
        env={**ENVIRON, **variables},
        capture_output=True,
        timeout=10,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split(b"\0")[:-1]


def lexer_words(line: str) -> list[str]:
    found, nested = split_commands(line)
    assert nested == []
    words: list[str] = []
    for argv, redirects in found:
        assert (argv[:2], redirects) == (["printf", "%s\\0"], [])
        words.extend(argv[2:])  # "@" included: bash prints it too
    return words


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(LINE)
@example(f"{PRINT} $'-f' $'\\x2eenv' $'\\056env' $'\\u002e\\U00000065nv'")
@example(f"{PRINT} $'a\\x00b'c $'\\cA\\c?' $'\\z' $'\\xe9\\351' $'\\ud800' $'\\101\\0101'")
@example(f'{PRINT} $"x\\"y" "$\'no\'" a\\ b \'\' ""')
@example(f"{PRINT} @ $'\\\\'; {PRINT} @ \\'")  # one ANSI-C string to tree-sitter-bash
def test_the_lexer_reads_words_as_bash_does(line: str) -> None:
    ours = [os.fsencode(w) for w in lexer_words(line)]
    theirs = bash_words(line)
    assert ours == theirs
    assert not any(isinstance(w, Word) and w.dynamic for w in lexer_words(line))
    seen = grammar_words(line)  # the packs' reader: the same words, or a refusal
    assert seen is None or [os.fsencode(w) for w in seen] == theirs


def grammar_words(line: str) -> list[str] | None:
    """The words the packs see (tree-sitter structure, lexer words, braces expanded), or
    None when they cannot vouch for the line (the blocking packs refuse it)."""
    script = read_script(line)
    if not script.complete:
        return None
    words: list[str] = []
    for command in (c for c in script.commands if not c.later):  # not quoted text's commands
        assert list(command.words[:2]) == ["printf", "%s\\0"]
        words.extend(command.words[2:])
    return words


_BRACE_PART = st.one_of(
    _BARE.filter(lambda t: not set(t) & set("{},")), st.sampled_from(["", "'a,b'", '"{x}"', "\\,"])
)
BRACES = st.recursive(
    _BRACE_PART,
    lambda inner: (
        st.lists(inner, min_size=2, max_size=3).map(lambda ps: "{" + ",".join(ps) + "}")
        | st.tuples(inner, inner).map("".join)
        | st.sampled_from(["{1..3}", "{a..c}", "{05..1..2}", "{x}", "{,}"])
    ),
    max_leaves=6,
)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(st.lists(BRACES.filter(lambda w: w != ""), min_size=1, max_size=3))
@example(["git", "{push,-f}", "origin", "{-f,main}"])
@example(["a{b,c{d,e}}f", "x{1..10..3}", "'{a,b}'", "{a}", "{a,b"])
def test_brace_expansion_as_bash_does(words: list[str]) -> None:
    line = " ".join([PRINT, *words])
    seen = grammar_words(line)
    assert seen is not None
    assert [os.fsencode(w) for w in seen] == bash_words(line)


_VALUE = st.text("abcdefghij.-_/0123456789", min_size=1, max_size=8)
EXPANSION = st.sampled_from(
    ["$X", "${X}", '"$X"', '$(printf %s "$X")', '"`printf %s "$X"`"', '${X:-"}"}', "${X:-${Y}}"]
)
_STATIC = st.one_of(_BARE, st.text("abc.*?", max_size=4).map(lambda t: f"'{t}'"))


@settings(max_examples=80, deadline=None, derandomize=True)
@given(_STATIC, EXPANSION, _STATIC, _VALUE)
def test_what_it_does_not_expand_is_marked_and_shaped(
    before: str, expansion: str, after: str, value: str
) -> None:
    """``shape`` (an expansion is ``*``) matches the word bash built, whatever the value."""
    line = f"{PRINT} {before}{expansion}{after}"
    found, _ = split_commands(line)
    [(argv, _)] = found
    assert len(argv) == 4, argv  # printf, its format, "@", the one word
    word = argv[3]
    assert isinstance(word, Word)
    assert word.dynamic
    assert word.expands
    [_, built] = bash_words(line, X=value)
    assert fnmatchcase(os.fsdecode(built), word.shape), (built, word.shape)


@pytest.mark.parametrize("glob", ["-?", "-[f]", "*", "x*y"])
def test_an_unquoted_glob_is_dynamic_and_a_quoted_one_is_not(glob: str) -> None:
    [(words, _)], _ = split_commands(f"git push {glob} '{glob}'")
    unquoted, quoted = words[2], words[3]  # no printf here: git push GLOB 'GLOB'
    assert (str(unquoted), str(quoted)) == (glob, glob)
    assert isinstance(unquoted, Word)
    assert (unquoted.dynamic, unquoted.expands) == (True, False)
    assert isinstance(quoted, Word)
    assert not quoted.dynamic
