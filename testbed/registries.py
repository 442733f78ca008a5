"""Static content for the real-client suite: a download, a package index, a git repository
and an npm registry, laid out as files that nginx serves unchanged.

* `big.bin`: 32 MiB of random bytes (its SHA-256 in `Content.big_sha256`);
* `simple/egress-demo/index.html` and `packages/egress_demo-1.0-py3-none-any.whl`: a PEP
  503 simple index with one pure-Python wheel, linked with its `#sha256=` (pip checks it);
* `git/demo.git`: a bare repository with one commit, prepared for git's "dumb" HTTP
  protocol (`git update-server-info`), which needs nothing but static files;
* `npm/egress-demo.json` and `npm/egress-demo/-/egress-demo-1.0.0.tgz`: an npm packument
  and its tarball with `dist.integrity` (npm checks it); nginx serves the packument at
  `/npm/egress-demo`.

Every URL in the index and the packument names `base_url`, the host the clients ask for.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

BIG_BYTES = 32 * 1024 * 1024
PY_PACKAGE, PY_VERSION = "egress-demo", "1.0"
NPM_PACKAGE, NPM_VERSION = "egress-demo", "1.0.0"
GIT_FILE, GIT_TEXT = "README.md", "cloned through the egress proxy\n"
MODULE_TEXT = 'GREETING = "installed through the egress proxy"\n'


@dataclass(frozen=True)
class Content:
    root: Path
    big_sha256: str
    wheel: str  # the wheel's file name


def build(root: Path, base_url: str) -> Content:
    root.mkdir(parents=True, exist_ok=True)
    big = os.urandom(BIG_BYTES)
    (root / "big.bin").write_bytes(big)
    wheel = _python_index(root, base_url)
    _git_repository(root / "git" / "demo.git")
    _npm_registry(root / "npm", base_url)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # nginx workers run as www-data
    return Content(root, hashlib.sha256(big).hexdigest(), wheel)


def _python_index(root: Path, base_url: str) -> str:
    name = PY_PACKAGE.replace("-", "_")
    dist_info = f"{name}-{PY_VERSION}.dist-info"
    files = {
        f"{name}.py": MODULE_TEXT.encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {PY_PACKAGE}\nVersion: {PY_VERSION}\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: egress-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = "".join(f"{path},sha256={_b64(hashlib.sha256(data).digest())},{len(data)}\n"
                     for path, data in files.items())  # fmt: skip
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    wheel = f"{name}-{PY_VERSION}-py3-none-any.whl"
    data = buffer.getvalue()
    (root / "packages").mkdir()
    (root / "packages" / wheel).write_bytes(data)
    index = root / "simple" / PY_PACKAGE
    index.mkdir(parents=True)
    link = f"{base_url}/packages/{wheel}#sha256={hashlib.sha256(data).hexdigest()}"
    (index / "index.html").write_text(
        f'<!DOCTYPE html>\n<html><body><a href="{link}">{wheel}</a></body></html>\n'
    )
    return wheel


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _git_repository(bare: Path) -> None:
    work = bare.parent / "demo-work"
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "egress tests",
        "GIT_AUTHOR_EMAIL": "tests@example.invalid",
        "GIT_COMMITTER_NAME": "egress tests",
        "GIT_COMMITTER_EMAIL": "tests@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(bare.parent),
    }

    def git(*args: str, cwd: Path) -> None:
        subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                       timeout=60)  # fmt: skip

    work.mkdir(parents=True)
    git("init", "-q", "-b", "main", ".", cwd=work)
    (work / GIT_FILE).write_text(GIT_TEXT)
    git("add", GIT_FILE, cwd=work)
    git("commit", "-q", "-m", "first", cwd=work)
    git("clone", "-q", "--bare", str(work), str(bare), cwd=bare.parent)
    git("update-server-info", cwd=bare)


def _npm_registry(npm: Path, base_url: str) -> None:
    buffer = io.BytesIO()
    package_json = json.dumps(
        {"name": NPM_PACKAGE, "version": NPM_VERSION, "main": "index.js"}
    ).encode()
    index_js = b'module.exports = "installed through the egress proxy";\n'
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, data in (("package/package.json", package_json), ("package/index.js", index_js)):
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    tarball = buffer.getvalue()
    tgz_dir = npm / NPM_PACKAGE / "-"
    tgz_dir.mkdir(parents=True)
    tgz_name = f"{NPM_PACKAGE}-{NPM_VERSION}.tgz"
    (tgz_dir / tgz_name).write_bytes(tarball)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    version = {
        "name": NPM_PACKAGE,
        "version": NPM_VERSION,
        "main": "index.js",
        "dist": {
            "tarball": f"{base_url}/npm/{NPM_PACKAGE}/-/{tgz_name}",
            "integrity": integrity,
            "shasum": hashlib.sha1(tarball).hexdigest(),  # noqa: S324 - npm's own field
        },
    }
    packument = {
        "name": NPM_PACKAGE,
        "dist-tags": {"latest": NPM_VERSION},
        "versions": {NPM_VERSION: version},
    }
    (npm / f"{NPM_PACKAGE}.json").write_text(json.dumps(packument))
