"""What a refused sandbox file's problems print (/status, the log): never a value that looks
like a credential, whichever field it was misplaced in (D427). `shown()` hides such values;
these problems quoted them raw."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_egress.proxy.tenancy.sandboxes import SandboxDirectory

SECRET = "sk-live-TOPSECRET-abcdef0123456789"
ENTRY = "network:\n  allowlist:\n    - domain: {domain}\n{extra}"
FILES = {
    "addresses": f"addresses: [{SECRET}]\nnetwork: {{allowlist: []}}\n",
    "budget": ENTRY.format(domain="x.test", extra=f"      budget: {{requests: {SECRET}}}\n"),
    "path": ENTRY.format(domain=f"'{SECRET}/x'", extra=""),
    "url": ENTRY.format(domain=f"'https://{SECRET}/x'", extra=""),
}


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_misplaced_credential_is_never_printed(tmp_path: Path, name: str) -> None:
    (tmp_path / f"{name}.yaml").write_text(FILES[name])
    directory = SandboxDirectory(tmp_path)
    found = directory.scan()
    assert directory.invalid == {name}
    text = " ".join(str(p) for p in (*found.problems, *directory.refused()[name]))
    assert "not shown" in text, text
    assert "TOPSECRET" not in text, text
