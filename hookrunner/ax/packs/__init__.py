"""The built-in packs of the AX Code dialect.

``catalogue`` (runner side) says what each pack hooks and builds the command
line; the other modules run in the pack's own child process (``main``), which
starts with ``python -I -S`` and imports only the standard library and this
package, lazily, so a pack costs little more than the interpreter's start.
"""
