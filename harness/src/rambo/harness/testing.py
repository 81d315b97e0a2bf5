"""Helpers for the tests of code that downloads and extracts (the harness's, retrieval's and
detection's download tests share them): a folder's listing, a file's MD5, a network that is
down and a small disk; and for the tests of what a refused run leaves: every file of a tree with
its MD5, and a folder claimed by another live process. Imported by tests only (it imports pytest);
a test module takes the `no_network` and `small_disk` fixtures by importing them
(`from rambo.harness.testing import no_network`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest


def listing(folder: str | Path) -> list[str]:
    """Every file and folder under `folder`, as sorted POSIX paths relative to it."""
    folder = Path(folder)
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*"))


def md5(data: bytes | str | Path) -> str:
    """The MD5 hex digest of `data` (bytes), or of the file at `data` (a path)."""
    return hashlib.md5(data if isinstance(data, bytes) else Path(data).read_bytes()).hexdigest()


def tree_digest(folder: str | Path) -> dict[str, str]:
    """Every file under `folder` (hidden ones too) as its POSIX path relative to `folder` and its
    MD5: equal before and after a command when the command changed no byte of any file there, and
    added or removed none."""
    folder = Path(folder)
    return {
        path.relative_to(folder).as_posix(): md5(path)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


_HOLDER = """import sys
from rambo.harness.claim import FolderClaim
claim = FolderClaim(sys.argv[1], sys.argv[2]).acquire()
print("held", flush=True)
sys.stdin.read()
claim.release()
"""


@contextlib.contextmanager
def held_by_another_process(folder: str | Path, run: str):
    """`folder` claimed ([`rambo.harness.claim`][rambo.harness.claim]) by another live process, as by a run named
    `run` that trains there, while the block runs; the value is the claim's record (host, pid,
    since, ...). The claim is given back when the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(folder), run], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout.readline() == "held\n", f"the holder of {folder} did not claim it"
        yield json.loads((Path(folder) / ".rambo-run.claim").read_text())
    finally:
        process.stdin.close()
        process.wait(timeout=60)


@pytest.fixture
def no_network(monkeypatch) -> list[str]:
    """Every URL fails as it does offline (`urllib.request.urlopen` raises `URLError`); the
    list of URLs tried is the fixture's value."""
    calls = []

    def offline(url, *args, **kwargs):
        calls.append(url)
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    return calls


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A folder on a file system of 1 MiB, empty (a tmpfs: mounting it needs root; the test is
    skipped where it cannot be mounted), unmounted when the test ends."""
    folder = tmp_path / "small"
    folder.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True, text=True
        )
    except FileNotFoundError:
        pytest.skip("no mount command here")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a 1 MiB tmpfs here (root only): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)
