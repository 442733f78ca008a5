"""Validation of one parsed ``.ax-code/hooks.json`` into frozen entries.

The document: ``{"packs": [NAME...], "hooks": [{event, matcher, command,
blockOnFailure, protocol, timeout, pack}...]}``; its structure is the JSON Schema
``common/schemas/ax-hooks.schema.json`` (checked by ``common.problems``, whose
``x-problem`` words the messages); what no schema says is the named checks below:
repeated keys, escalation keys, packs listed twice, matchers, the per-event rules.
Rules (docs/hooks.md):
* every problem is collected with its JSON path; nothing stops at the first;
* an entry with a missing or invalid field is skipped whole, never repaired
  (an unknown ``protocol`` skips the entry: decoding a Claude Code hook the
  legacy way would let its blocks through);
* an unknown key is reported and ignored; keys that try to choose the
  environment or trust (``env``, ``fullEnv``, ``AX_CODE_HOOKS_FULL_ENV``...)
  are reported as such and ignored: only the runner's own environment and
  flags decide them;
* a repeated ``packs`` or ``hooks`` key is reported and both lists load, in
  order; a repeated key inside an entry makes it ambiguous, so it is skipped;
* an unknown pack is reported and skipped; a pack listed twice loads once;
* packs come first (in the listed order), then the custom entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sandbox_egress.common.problems import Found, Unknown, schema_errors, schema_validator
from sandbox_egress.hookrunner.ax.eventtable import spec_of
from sandbox_egress.hookrunner.ax.matcher import AxMatcher, compile_ax_matcher
from sandbox_egress.hookrunner.ax.model import (
    BLOCKING_EVENTS,
    TOOL_EVENTS,
    AxEntry,
    AxEvent,
    Protocol,
)
from sandbox_egress.hookrunner.ax.packs.catalogue import PACKS, pack_command
from sandbox_egress.hookrunner.model import Problem
from sandbox_egress.hookrunner.schema import (
    CLAUDE_SETTINGS_HERE,
    DEFAULT_TIMEOUT,
    JsonObject,
    is_claude_settings,
    json_path,
    key_path,
    type_name,
)

MAX_ENTRIES = 100  # AX Code's own limits
MAX_PACKS = 100
_ESCALATION_KEYS = frozenset(
    {
        "ax_code_hooks_full_env",
        "ax_code_trust_project_config",
        "hookrunner_full_env",
        "fullenv",
        "full_env",
        "env",
        "environment",
        "trust",
        "trusted",
        "trustprojectconfig",
    }
)


def unknown_key(what: str) -> Unknown:
    """The message of an unknown key: an escalation attempt says so (named check)."""

    def message(path: Sequence[str | int], key: str) -> str:
        folded = key.casefold().replace("-", "_")
        if folded in _ESCALATION_KEYS or folded.replace("_", "") in _ESCALATION_KEYS:
            return (
                "a hooks file cannot choose the environment or trust; only the runner's own "
                "environment and flags can (ignored)"
            )
        return f"unknown key in {what} (ignored)"

    return message


class _Validator:
    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[Problem] = []

    def problem(self, path: str, reason: str) -> None:
        self.problems.append(Problem(self.file, path, reason))

    def found(self, root: str, found: list[Found]) -> None:
        for item in found:
            self.problem(json_path(root, item.path), item.message)

    def document(self, doc: Any) -> list[AxEntry]:
        if not isinstance(doc, dict):
            self.problem("$", f"the document must be an object, got {type_name(doc)}")
            return []
        if is_claude_settings(doc):
            self.problem("$.hooks", CLAUDE_SETTINGS_HERE)
            return []
        pairs = doc.pairs if isinstance(doc, JsonObject) else list(doc.items())
        for key in getattr(doc, "duplicates", ()):
            self.problem(key_path("$", key), "key given twice; both lists are loaded, in order")
        packs: list[AxEntry] = []
        hooks: list[AxEntry] = []
        seen_packs: set[str] = set()
        for key, value in pairs:
            if key == "packs":
                packs.extend(self.packs(value, seen_packs))
            elif key == "hooks":
                hooks.extend(self.hooks(value))
            else:
                self.problem(key_path("$", key), unknown_key("the document")((), key))
        return packs + hooks

    def packs(self, value: Any, seen: set[str]) -> list[AxEntry]:
        found = schema_errors(schema_validator("ax-hooks", "packs"), value)
        if not isinstance(value, list):
            self.found("$.packs", found)
            return []
        entries: list[AxEntry] = []
        for index, name in enumerate(value):
            path = f"$.packs[{index}]"
            if index >= MAX_PACKS:
                self.problem(path, f"more than {MAX_PACKS} packs; skipped")
                break
            errors = [item for item in found if item.path[:1] == (index,)]
            self.found("$.packs", errors)
            if errors:
                continue
            if name in seen:
                self.problem(path, f"pack {name!r} listed twice; loaded once")
                continue
            seen.add(name)
            entries.extend(self.pack(name, path))
        return entries

    def pack(self, name: str, path: str) -> list[AxEntry]:
        return [
            AxEntry(
                event=AxEvent(hook.event),
                matcher=compile_ax_matcher(hook.matcher),
                command=pack_command(name),
                block_on_failure=hook.block_on_failure,
                protocol=Protocol.LEGACY,
                timeout=hook.timeout,
                pack=name,
                source=name,
                where=f"{self.file} {path}",
            )
            for hook in PACKS[name]
        ]

    def hooks(self, value: Any) -> list[AxEntry]:
        if not isinstance(value, list):
            self.found("$.hooks", schema_errors(schema_validator("ax-hooks", "hooks"), value))
            return []
        entries = []
        for index, item in enumerate(value):
            if index >= MAX_ENTRIES:
                self.problem(f"$.hooks[{index}]", f"more than {MAX_ENTRIES} entries; skipped")
                break
            entry = self.entry(item, index)
            if entry is not None:
                entries.append(entry)
        return entries

    def entry(self, value: Any, index: int) -> AxEntry | None:
        """One entry: the schema's structure, then the checks it cannot express."""
        path = f"$.hooks[{index}]"
        validator = schema_validator("ax-hooks", "entry")
        found = schema_errors(validator, value, unknown_key("an entry"))
        self.found(path, [item for item in found if item.keyword == "additionalProperties"])
        duplicates = getattr(value, "duplicates", ())
        for key in duplicates:
            self.problem(key_path(path, key), "key given twice; entry skipped")
        skipped = [item for item in found if item.keyword != "additionalProperties"]
        if duplicates or skipped:
            self.found(path, [] if duplicates else skipped)
            return None
        event = AxEvent(value["event"])
        protocol = Protocol.CLAUDE_CODE if "protocol" in value else Protocol.LEGACY
        matcher = compile_ax_matcher(value.get("matcher", ""))
        block = value.get("blockOnFailure", False)
        for key, message in entry_notes(event, protocol, matcher, block):
            self.problem(key_path(path, key), message)
        return AxEntry(
            event=event,
            matcher=matcher,
            command=value["command"],
            block_on_failure=block,
            protocol=protocol,
            timeout=value.get("timeout", DEFAULT_TIMEOUT),
            pack=value.get("pack", ""),
            source=f"hooks[{index}]",
            where=f"{self.file} {path}",
        )


def entry_notes(
    event: AxEvent, protocol: Protocol, matcher: AxMatcher, block: bool
) -> list[tuple[str, str]]:
    """What a valid entry does not do as written: (key, message); the entry still loads."""
    notes = []
    if matcher.problem:
        notes.append(("matcher", matcher.problem))
    if not matcher.matches_all and event not in TOOL_EVENTS and not spec_of(event).subject:
        notes.append(
            (
                "matcher",
                f'{event.value} has no tool, so only "" or "*" match it; this entry never runs',
            )
        )
    if block and event not in BLOCKING_EVENTS:
        notes.append(("blockOnFailure", f"has no effect: {event.value} cannot block (ignored)"))
    return notes


def validate_ax_document(doc: Any, file: str) -> tuple[list[AxEntry], list[Problem]]:
    validator = _Validator(file)
    entries = validator.document(doc)
    return entries, validator.problems
