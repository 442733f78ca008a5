"""Validation of one parsed ``.ax-code/hooks.json`` into frozen entries.

The document: ``{"packs": [NAME...], "hooks": [{event, matcher, command,
blockOnFailure, protocol, timeout, pack}...]}``. Rules (docs/hooks.md):
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

import json
from typing import Any

from hookrunner.ax.matcher import compile_ax_matcher
from hookrunner.ax.model import BLOCKING_EVENTS, TOOL_EVENTS, AxEntry, AxEvent, Protocol
from hookrunner.ax.packs.catalogue import PACKS, pack_command
from hookrunner.model import Problem
from hookrunner.schema import DEFAULT_TIMEOUT, JsonObject, key_path, type_name

MAX_ENTRIES = 100  # AX Code's own limits
MAX_PACKS = 100
MAX_COMMAND_CHARS = 100_000
MAX_MATCHER_CHARS = 500
_ENTRY_KEYS = frozenset(
    {"event", "matcher", "command", "blockOnFailure", "protocol", "timeout", "pack"}
)
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
_EVENTS = {e.value: e for e in AxEvent}


class _Validator:
    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[Problem] = []

    def problem(self, path: str, reason: str) -> None:
        self.problems.append(Problem(self.file, path, reason))

    def unknown(self, path: str, key: str, what: str) -> None:
        folded = key.casefold().replace("-", "_")
        if folded in _ESCALATION_KEYS or folded.replace("_", "") in _ESCALATION_KEYS:
            self.problem(
                key_path(path, key),
                "a hooks file cannot choose the environment or trust; only the runner's own "
                "environment and flags can (ignored)",
            )
        else:
            self.problem(key_path(path, key), f"unknown key in {what} (ignored)")

    def document(self, doc: Any) -> list[AxEntry]:
        if not isinstance(doc, dict):
            self.problem("$", f"the document must be an object, got {type_name(doc)}")
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
                self.unknown("$", key, "the document")
        return packs + hooks

    def packs(self, value: Any, seen: set[str]) -> list[AxEntry]:
        if not isinstance(value, list):
            self.problem("$.packs", f"must be an array of pack names, got {type_name(value)}")
            return []
        entries: list[AxEntry] = []
        for index, name in enumerate(value):
            path = f"$.packs[{index}]"
            if index >= MAX_PACKS:
                self.problem(path, f"more than {MAX_PACKS} packs; skipped")
                break
            if not isinstance(name, str) or name not in PACKS:
                shown = json.dumps(name)[:60]
                self.problem(path, f"unknown pack {shown}; known: {', '.join(PACKS)}; skipped")
                continue
            if name in seen:
                self.problem(path, f"pack {name!r} listed twice; loaded once")
                continue
            seen.add(name)
            for hook in PACKS[name]:
                entries.append(
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
                )
        return entries

    def hooks(self, value: Any) -> list[AxEntry]:
        if not isinstance(value, list):
            self.problem("$.hooks", f"must be an array of entries, got {type_name(value)}")
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

    def skip(self, path: str, reason: str) -> None:
        self.problem(path, f"{reason}; entry skipped")

    def entry(self, value: Any, index: int) -> AxEntry | None:
        path = f"$.hooks[{index}]"
        if not isinstance(value, dict):
            self.skip(path, f"an entry must be an object, got {type_name(value)}")
            return None
        for key in value:
            if key not in _ENTRY_KEYS:
                self.unknown(path, key, "an entry")
        duplicates = getattr(value, "duplicates", ())
        for key in duplicates:
            self.skip(key_path(path, key), "key given twice")
        if duplicates:
            return None
        name = value.get("event")
        event = _EVENTS.get(name) if isinstance(name, str) else None
        if event is None:
            got = json.dumps(value.get("event"))[:40] if "event" in value else "missing"
            self.skip(key_path(path, "event"), f"must be one of {', '.join(_EVENTS)}, got {got}")
            return None
        command = value.get("command")
        if not isinstance(command, str) or not command.strip():
            self.skip(key_path(path, "command"), "must be a non-empty string")
            return None
        if "\x00" in command or len(command) > MAX_COMMAND_CHARS:
            self.skip(
                key_path(path, "command"),
                f"must have no NUL and at most {MAX_COMMAND_CHARS} characters",
            )
            return None
        pattern = value.get("matcher", "")
        if not isinstance(pattern, str) or len(pattern) > MAX_MATCHER_CHARS:
            self.skip(key_path(path, "matcher"), f"must be a string of at most {MAX_MATCHER_CHARS}")
            return None
        matcher = compile_ax_matcher(pattern)
        if matcher.problem:
            self.problem(key_path(path, "matcher"), matcher.problem)
        if not matcher.matches_all and event not in TOOL_EVENTS:
            self.problem(
                key_path(path, "matcher"),
                f'{event.value} has no tool, so only "" or "*" match it; this entry never runs',
            )
        block = value.get("blockOnFailure", False)
        if not isinstance(block, bool):
            self.skip(
                key_path(path, "blockOnFailure"), f"must be a boolean, got {type_name(block)}"
            )
            return None
        if "protocol" in value and value["protocol"] != Protocol.CLAUDE_CODE.value:
            shown = json.dumps(value["protocol"])[:40]
            self.skip(key_path(path, "protocol"), f'must be "claude-code", got {shown}')
            return None
        protocol = Protocol.CLAUDE_CODE if "protocol" in value else Protocol.LEGACY
        timeout = value.get("timeout", DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0:
            self.skip(key_path(path, "timeout"), "must be a positive integer of seconds")
            return None
        pack = value.get("pack", "")
        if not isinstance(pack, str):
            self.skip(key_path(path, "pack"), f"must be a string, got {type_name(pack)}")
            return None
        if block and event not in BLOCKING_EVENTS:
            self.problem(
                key_path(path, "blockOnFailure"),
                f"has no effect: {event.value} cannot block (ignored)",
            )
        elif block and protocol is Protocol.CLAUDE_CODE:
            self.problem(
                key_path(path, "blockOnFailure"),
                "has no effect: claude-code entries block by their exit status and output "
                "(ignored)",
            )
        return AxEntry(
            event=event,
            matcher=matcher,
            command=command,
            block_on_failure=block,
            protocol=protocol,
            timeout=timeout,
            pack=pack,
            source=f"hooks[{index}]",
            where=f"{self.file} {path}",
        )


def validate_ax_document(doc: Any, file: str) -> tuple[list[AxEntry], list[Problem]]:
    validator = _Validator(file)
    entries = validator.document(doc)
    return entries, validator.problems
