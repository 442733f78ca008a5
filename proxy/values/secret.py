"""A resolved credential value (a transform's or a placeholder's): shows itself as `***`
everywhere but `reveal()`, so no log line, message or repr carries it.
"""

from __future__ import annotations

from collections.abc import Mapping

from sandbox_egress.common.invariant import InvariantError


class Secret:
    """A transform value. Shows itself as `***` everywhere but `reveal()`.

    `parts` are the values its references resolved to (an environment variable,
    a file), kept so that an upstream echoing only the token can be redacted too.
    """

    __slots__ = ("_parts", "_value")
    deferred = False  # a `Template`: its value is known per request only

    def __init__(self, value: str, parts: tuple[str, ...] = ()) -> None:
        self._value = value
        self._parts = parts

    def reveal(self) -> str:
        return self._value

    def reveal_all(self) -> tuple[str, ...]:
        return (self._value, *self._parts)

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class Unresolved(Secret):
    """A transform value whose references were checked but not looked up (`secrets=False`).

    It holds no secret, and `reveal()` raises: such a configuration cannot inject.
    """

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("")

    def reveal(self) -> str:
        raise InvariantError("an unresolved transform value cannot be injected (secrets=False)")

    def reveal_all(self) -> tuple[str, ...]:
        return ()

    def __repr__(self) -> str:
        return "Unresolved()"

    __str__ = __repr__


class Template(Secret):
    """A value that names credentials (`${credential:NAME}`, docs/configuration.md#credentials):
    known only per request, once the credential cache gave each one (`render`).

    `segments` are literal text (its `${NAME}`/`${file:}` references already resolved) and
    credential names, in order; `reveal()` raises (the value is not known here), and
    `reveal_all()` gives the resolved referenced parts only (redacted like any other).
    """

    __slots__ = ("segments",)
    deferred = True

    def __init__(self, segments: tuple[tuple[str, bool], ...], parts: tuple[str, ...]) -> None:
        super().__init__("", parts)
        self.segments = segments  # (text, is_credential_name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(text for text, named in self.segments if named))

    def reveal(self) -> str:
        raise InvariantError("a value naming a credential is rendered per request")

    def render(self, values: Mapping[str, str]) -> Secret:
        """The value with each credential's current value (every name must be in `values`)."""
        text = "".join(values[t] if named else t for t, named in self.segments)
        return Secret(text, (*self._parts, *(values[name] for name in self.names)))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Template)
            and other.segments == self.segments
            and other._parts == self._parts
        )

    def __hash__(self) -> int:
        return hash(self.segments)

    def __repr__(self) -> str:
        return f"Template({', '.join(self.names)})"

    __str__ = __repr__
