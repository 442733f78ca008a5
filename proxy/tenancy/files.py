"""What a sandbox file may read (docs/configuration.md#sandboxes, docs/decisions.md D340):
no environment variable of the node proxy, and only its own files of the node's
`sandboxes.secrets`: below `<secrets>/<sandbox-id>/`, or `<secrets>/<sandbox-id>.<name>`
(a name without `.`: how one Kubernetes Secret's keys are mounted, flat).

`Confined` is the reference lookup a sandbox file is parsed with: it stands where the
node file's environment mapping stands (`proxy.references.resolve` asks it), holds no
variable, and reads a `${file:PATH}` only through `read`. `check_path` is the same rule
without touching the file's content (`egress-proxy check --no-secrets`, the DNS
responder).

Invariants:
* `${NAME}` in a sandbox file is refused, whatever the node's environment holds.
* A file is read only when its path is absolute, has no `..` leading out, its real path
  (symlinks followed) is below the real path of `<secrets>/<sandbox-id>/` (or, flat, below
  the real secrets directory and still named `<sandbox-id>.<name>`), and what the kernel
  opened is that (a symlink swapped between the check and the open is refused, not
  followed), and it has one name (a hard link is refused, D426): another sandbox's
  files, `/proc/self/environ` or the node's own secrets are never read.
* Only a regular file is read, opened non-blocking (a FIFO never stalls the scan), at
  most `MAX_FILE_BYTES`.
* A problem names the path as written, never a byte of any file.
* A sandbox file whose YAML aliases expand to more than `MAX_SANDBOX_NODES` values or
  `MAX_SANDBOX_CHARACTERS` characters is refused before it is parsed (an alias bomb
  would hang the scan and the node's start, or take its memory).
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_FILE_BYTES = 64 * 1024
MAX_SANDBOX_FILE_BYTES = 256 * 1024  # a sandbox file itself (its values are compiled, D341)
# Every secret value a sandbox file resolves, together: each sandbox compiles a matcher of
# every spelling of them (D425; about 11 µs per byte, D341), and RE2 holds up to 256 MiB.
MAX_SANDBOX_SECRET_BYTES = 256 * 1024
# Values a sandbox file's YAML may stand for, its aliases expanded (D426): a file without
# aliases holds fewer, one whose aliases nest stands for billions.
MAX_SANDBOX_NODES = MAX_SANDBOX_FILE_BYTES
MAX_SANDBOX_CHARACTERS = 4 * MAX_SANDBOX_FILE_BYTES  # its scalars' text, expanded
VARIABLE_REFUSED = "${%s} is refused in a sandbox file: it would read the node proxy's environment"
NO_SECRETS = "${file:...} in a sandbox file needs the node file's sandboxes.secrets"
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Confined(Mapping[str, str]):
    """The references of one sandbox's file: no variables, files of its own directory only.

    `secrets` is the node's `sandboxes.secrets` (None: no file may be read)."""

    def __init__(self, sandbox: str, secrets: Path | None) -> None:
        self.sandbox = sandbox
        self.secrets = None if secrets is None else Path(posixpath.normpath(secrets))

    # A Mapping with no keys: a variable is never found here (`variable_problem` says why).
    def __getitem__(self, key: str) -> str:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def variable_problem(self, name: str) -> str:
        return VARIABLE_REFUSED % name

    @property
    def allowed(self) -> str:
        """Where this sandbox's files are, as a problem says it."""
        return f"{self.secrets}/{self.sandbox}/ or {self.secrets}/{self.sandbox}.<name>"

    def check_path(self, path: str) -> str | None:
        """Why `${file:path}` is refused before anything is opened, or None."""
        if self.secrets is None:
            return NO_SECRETS
        if not posixpath.isabs(path):
            return f"${{file:{path}}}: a sandbox file's path is absolute, in {self.allowed}"
        if self._layout(posixpath.normpath(path)) is None:
            return f"${{file:{path}}} is outside this sandbox's secrets ({self.allowed})"
        return None

    def _layout(self, normal: str) -> Path | None:
        """The directory whose real path must hold the file (its own directory, or the
        secrets directory for a flat `<id>.<name>`), or None: not this sandbox's."""
        if self.secrets is None:
            return None
        own = self.secrets / self.sandbox
        if _below(normal, str(own)):
            return own
        folder, name = posixpath.split(normal)
        if folder == str(self.secrets) and flat_owner(name) == self.sandbox:
            return self.secrets
        return None

    def read(self, path: str) -> tuple[str, str | None]:
        """The file's text (one trailing newline stripped), or why it is refused."""
        problem = self.check_path(path)
        if problem is not None:
            return "", problem
        normal = posixpath.normpath(path)
        layout = self._layout(normal)
        if layout is None:  # checked above; kept for the type checker
            return "", NO_SECRETS
        # A flat file must be itself once symlinks are followed (its name names its owner).
        name = None if layout != self.secrets else posixpath.basename(normal)
        within = os.path.realpath(layout)

        def belongs(real: str) -> bool:
            return _below(real, within) and (name is None or posixpath.basename(real) == name)

        if not belongs(os.path.realpath(path)):
            return "", f"${{file:{path}}} leads outside this sandbox's secrets ({self.allowed})"
        try:
            data = _read_regular(os.path.realpath(path), belongs, MAX_FILE_BYTES)
        except _Refused as exc:
            return "", f"${{file:{path}}}: {exc}"
        except OSError as exc:
            return "", f"cannot read ${{file:{path}}}: {exc.strerror}"
        if len(data) > MAX_FILE_BYTES:
            return "", f"${{file:{path}}} is larger than {MAX_FILE_BYTES} bytes"
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return "", f"cannot read ${{file:{path}}}: not UTF-8 text"
        text = text[:-1] if text.endswith("\n") else text
        return text, None if text else f"${{file:{path}}} is empty"


def flat_owner(name: str) -> str | None:
    """The sandbox a flat secret file `<id>.<name>` belongs to: its name without the last
    `.<name>` (a name has no `.`, so `a.b.token` is `a.b`'s, never `a`'s: unambiguous)."""
    owner, dot, rest = name.rpartition(".")
    return owner if dot and owner and rest else None


def references(document: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(location, text) of every value of a sandbox file that may hold references: its
    token, and its entries' transform and secret values (checked without opening a file,
    `proxy.references.check_confined`)."""
    found: list[tuple[str, str]] = []
    if isinstance(document.get("token"), str):
        found.append(("token", document["token"]))
    network = document.get("network")
    allowlist = network.get("allowlist") if isinstance(network, dict) else None
    for index, raw in enumerate(allowlist if isinstance(allowlist, list) else []):
        where = f"network.allowlist[{index}]"
        transform = raw.get("transform") if isinstance(raw, dict) else None
        for name, value in (transform if isinstance(transform, dict) else {}).items():
            if isinstance(value, str):
                found.append((f"{where}.transform.{name}", value))
        secrets = raw.get("secrets") if isinstance(raw, dict) else None
        for number, item in enumerate(secrets if isinstance(secrets, list) else []):
            if isinstance(item, dict) and isinstance(item.get("value"), str):
                found.append((f"{where}.secrets[{number}].value", item["value"]))
    return found


class _Refused(Exception):
    """The path reached something that is not a plain file of the directory."""


class Unreadable(Exception):
    """A sandbox file that is not a plain file of its directory (`read_sandbox_file`)."""


def read_sandbox_file(path: Path) -> str:
    """The text of the sandbox file `path`, read the way its secrets are (D341): its real
    path in its directory (Kubernetes' `..data` links stay inside), a regular file opened
    non-blocking (a FIFO never stalls the scan, `/dev/zero` is outside), at most
    `MAX_SANDBOX_FILE_BYTES`; else Unreadable, saying why."""
    within = os.path.realpath(path.parent)

    def belongs(real: str) -> bool:
        return _below(real, within)

    real = os.path.realpath(path)
    if not belongs(real):
        raise Unreadable("it leads outside the sandboxes directory")
    try:
        data = _read_regular(real, belongs, MAX_SANDBOX_FILE_BYTES)
    except _Refused as exc:
        raise Unreadable(str(exc)) from None
    except OSError as exc:
        raise Unreadable(exc.strerror or "unreadable") from None
    if len(data) > MAX_SANDBOX_FILE_BYTES:
        raise Unreadable(f"larger than {MAX_SANDBOX_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable("not UTF-8 text") from None
    nodes, characters = _expanded(text)
    if nodes > MAX_SANDBOX_NODES or characters > MAX_SANDBOX_CHARACTERS:
        limits = f"{MAX_SANDBOX_NODES} values or {MAX_SANDBOX_CHARACTERS} characters"
        raise Unreadable(f"its YAML aliases expand to more than {limits}")
    return text


def _expanded(text: str) -> tuple[int, int]:
    """How many YAML nodes, and scalar characters, `text` stands for once its aliases are
    expanded (each distinct node counted once, so this costs what the file's size does; a
    syntax error counts 0: the loader reports it), each capped just above its bound."""
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError:
        return 0, 0
    sizes: dict[int, tuple[int, int]] = {}
    over = (MAX_SANDBOX_NODES + 1, MAX_SANDBOX_CHARACTERS + 1)

    def size(node: yaml.Node) -> tuple[int, int]:
        known = sizes.get(id(node))
        if known is not None:
            return known if known[0] >= 0 else over  # an alias of its own parent
        sizes[id(node)] = (-1, -1)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        nodes, characters = 1, len(node.value) if isinstance(node, yaml.ScalarNode) else 0
        for child in children:
            more = size(child)
            nodes, characters = min(nodes + more[0], over[0]), min(characters + more[1], over[1])
        sizes[id(node)] = (nodes, characters)
        return nodes, characters

    return (0, 0) if root is None else size(root)


def _below(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip("/") + "/")


def _read_regular(real: str, belongs: Callable[[str], bool], limit: int) -> bytes:
    """The bytes of the regular file at `real` (a path without symlinks), once the kernel
    confirms that what was opened `belongs`: a component swapped for a symlink after
    `realpath` is refused, never followed out."""
    descriptor = os.open(real, _OPEN_FLAGS | os.O_NOFOLLOW)
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise _Refused("not a regular file")
        if status.st_nlink > 1:  # a hard link: its path is inside, its content anyone's (D426)
            raise _Refused("a hard link (a file with more than one name) is not read")
        try:
            opened = os.readlink(f"/proc/self/fd/{descriptor}")
        except OSError:
            raise _Refused("cannot tell where it leads (/proc is not mounted)") from None
        if not belongs(opened):
            raise _Refused("changed while it was read; it now leads elsewhere")
        os.set_blocking(descriptor, True)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(descriptor, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(descriptor)
