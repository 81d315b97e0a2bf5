"""Helpers for the tests of code that downloads and extracts (the harness's, retrieval's and
detection's download tests share them): a folder's listing, a file's MD5, a network that is
down and a small disk. Imported by tests only (it imports pytest); a test module takes the
``no_network`` and ``small_disk`` fixtures by importing them
(``from rambo.harness.testing import no_network``)."""

from __future__ import annotations

import hashlib
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest


def listing(folder: str | Path) -> list[str]:
    """Every file and folder under ``folder``, as sorted POSIX paths relative to it."""
    folder = Path(folder)
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*"))


def md5(data: bytes | str | Path) -> str:
    """The MD5 hex digest of ``data`` (bytes), or of the file at ``data`` (a path)."""
    return hashlib.md5(data if isinstance(data, bytes) else Path(data).read_bytes()).hexdigest()


@pytest.fixture
def no_network(monkeypatch) -> list[str]:
    """Every URL fails as it does offline (``urllib.request.urlopen`` raises ``URLError``); the
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
