"""`${NAME}` and `${file:/path}` in transform and secret values, resolved into `Secret`s
(docs/configuration.md#transform).

Invariants:
* A problem names the reference (a variable name, a file path), never a value.
* With no environment (`environ` None, a configuration loaded with `secrets=False`,
  docs/decisions.md D83) no variable is read and no file opened: references are checked
  for syntax only and the value is `Unresolved`.
* A sandbox file's references are resolved by a `Confined` lookup (D340): `${NAME}` is
  refused there, and `${file:}` reads only the sandbox's own files of `sandboxes.secrets`.
* A resolved value is never empty and holds no CR, LF or NUL (it becomes a header value).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from sandbox_egress.proxy.tenancy.files import Confined
from sandbox_egress.proxy.values.secret import Secret, Template, Unresolved

Report = Callable[[str, str], None]  # (location, message)

REFERENCE = re.compile(r"\$\{([^}]*)\}")
CREDENTIAL = re.compile(r"\$\{credential:([^}]*)\}")
_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FRAMING = "\r\n\0"


def secret_value(
    value: str,
    where: str,
    environ: Mapping[str, str] | None,
    report: Report,
    credentials: Collection[str] | None = None,
) -> Secret | None:
    """`value` with its references resolved, checked; None when refused (reported at `where`).

    `environ` None: references are checked for syntax only and the value is `Unresolved`.
    `credentials`: the names `${credential:NAME}` may name (docs/configuration.md#credentials);
    such a value is a `Template`, rendered per request. None: no credential may be named here.
    """
    if CREDENTIAL.search(value):
        return _template(value, where, environ, report, credentials)
    if environ is None:
        return Unresolved() if check_unresolved(value, where, report) else None
    resolution = resolve(value, where, environ, report)
    if resolution is None:
        return None
    if any(c in resolution[0] for c in _FRAMING):
        report(where, "value contains CR, LF or NUL (after resolving references)")
        return None
    if not resolution[0]:
        report(where, "value is empty (after resolving references)")
        return None
    return Secret(*resolution)


def _template(
    value: str,
    where: str,
    environ: Mapping[str, str] | None,
    report: Report,
    credentials: Collection[str] | None,
) -> Secret | None:
    """A value naming credentials: its literal pieces resolved, its names checked."""
    segments: list[tuple[str, bool]] = []
    parts: list[str] = []
    ok, position = True, 0
    pieces: list[str] = []
    for match in CREDENTIAL.finditer(value):
        pieces.append(value[position : match.start()])
        name = match.group(1)
        if credentials is None:
            report(where, "${credential:...} is valid only in transform and secret values")
            ok = False
        elif name not in credentials:
            report(where, f"unknown credential {name!r} (not in credentials:)")
            ok = False
        segments.append(("", False))  # the piece before, filled below
        segments.append((name, True))
        position = match.end()
    pieces.append(value[position:])
    segments.append(("", False))
    resolved: list[str] = []
    for piece in pieces:
        if not piece:
            resolved.append("")
        elif environ is None:
            ok = check_unresolved(piece, where, report) and ok
            resolved.append("")
        elif (resolution := resolve(piece, where, environ, report)) is None:
            ok = False
        elif any(c in resolution[0] for c in _FRAMING):
            report(where, "value contains CR, LF or NUL (after resolving references)")
            ok = False
        else:
            resolved.append(resolution[0])
            parts.extend(resolution[1])
    if not ok:
        return None
    if environ is None:
        return Unresolved()
    texts = iter(resolved)
    filled = tuple((t, True) if named else (next(texts), False) for t, named in segments)
    return Template(tuple(s for s in filled if s[0]), tuple(parts))


def check_unresolved(value: str, where: str, report: Report) -> bool:
    """The checks of `secret_value` that need no reference's value."""
    ok = True
    for match in REFERENCE.finditer(value):
        ref = match.group(1)
        if not ref.startswith("file:") and not _VAR_NAME.match(ref):
            report(where, _invalid_reference(ref))
            ok = False
    if not ok:
        return False
    if any(c in REFERENCE.sub("", value) for c in _FRAMING):
        report(where, "value contains CR, LF or NUL (after resolving references)")
        return False
    if not value:
        report(where, "value is empty (after resolving references)")
        return False
    return True


def resolve(
    value: str, where: str, environ: Mapping[str, str], report: Report
) -> tuple[str, tuple[str, ...]] | None:
    """Replace `${NAME}` and `${file:/path}`; return the value and what each reference gave.

    Problems name the reference, never a value.
    """
    failed = False
    parts: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        nonlocal failed
        ref = match.group(1)
        if isinstance(environ, Confined):  # a sandbox file's (D340)
            content, problem = (
                environ.read(ref[5:])
                if ref.startswith("file:")
                else ("", _confined_variable(ref, environ))
            )
        else:
            content, problem = (
                _file_reference(ref[5:])
                if ref.startswith("file:")
                else (_variable_reference(ref, environ))
            )
        if problem is not None:
            report(where, problem)
            failed = True
        parts.append(content)
        return content

    resolved = REFERENCE.sub(substitute, value)
    return None if failed else (resolved, tuple(parts))


def referenced_files(allowlist: Any) -> tuple[str, ...]:
    """The paths of every `${file:...}` in transform and secret values (already checked)."""
    values: list[str] = []
    for raw in allowlist if isinstance(allowlist, list) else []:
        values += (raw.get("transform") or {}).values()
        values += (s["value"] for s in raw.get("secrets") or ())
    refs = (m.group(1) for v in values for m in REFERENCE.finditer(v))
    return tuple(dict.fromkeys(r[5:] for r in refs if r.startswith("file:")))


def _file_reference(path: str) -> tuple[str, str | None]:
    """What `${file:PATH}` gives (without one final newline), or why it cannot be used."""
    try:
        content = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        return "", f"cannot read ${{file:{path}}}: {exc.strerror}"
    except UnicodeDecodeError:
        return "", f"cannot read ${{file:{path}}}: not UTF-8 text"
    content = content[:-1] if content.endswith("\n") else content
    return content, None if content else f"${{file:{path}}} is empty"


def check_confined(value: str, where: str, confined: Confined, report: Report) -> bool:
    """A sandbox file's references checked without opening a file (`secrets=False`)."""
    ok = True
    for match in REFERENCE.finditer(value):
        ref = match.group(1)
        problem = (
            confined.check_path(ref[5:])
            if ref.startswith("file:")
            else _confined_variable(ref, confined)
        )
        if problem is not None and not CREDENTIAL.fullmatch(match.group(0)):
            report(where, problem)
            ok = False
    return ok


def _confined_variable(name: str, confined: Confined) -> str:
    return confined.variable_problem(name) if _VAR_NAME.match(name) else _invalid_reference(name)


def _invalid_reference(ref: str) -> str:
    return f"invalid reference ${{{ref}}} (expected ${{NAME}} or ${{file:/path}})"


def _variable_reference(name: str, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """What `${NAME}` gives, or why it cannot be used."""
    if not _VAR_NAME.match(name):
        return "", _invalid_reference(name)
    if name not in environ:
        return "", f"environment variable {name} is not set"
    value = environ[name]
    return value, None if value else f"environment variable {name} is empty"
