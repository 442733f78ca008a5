"""A resolved credential value (a transform's or a placeholder's): shows itself as `***`
everywhere but `reveal()`, so no log line, message or repr carries it.
"""

from __future__ import annotations

from sandbox_egress.common.invariant import InvariantError


class Secret:
    """A transform value. Shows itself as `***` everywhere but `reveal()`.

    `parts` are the values its references resolved to (an environment variable,
    a file), kept so that an upstream echoing only the token can be redacted too.
    """

    __slots__ = ("_parts", "_value")

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
