"""Downloads killed mid-copy (SIGKILL, real processes): the rerun resumes or removes their partial
files, never the one of a download still running, and says which in its log.

The downloads are the real command ``python -m rambo.detection.download`` with ``--mirror``: a
mirror folder (``file://`` URLs) or a local HTTP server (``range_server.py``, started here on
127.0.0.1 and stopped by its process id). A download is killed either where the server stops
sending (the HTTP path) or where ``download_worker.py`` stops it after its first chunk (a mirror
folder copies too fast to be caught otherwise).
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from rambo.harness.download import CHUNK_BYTES, fetch_file

HERE = Path(__file__).resolve().parent
NAME = "VOCtest_06-Nov-2007.tar"  # the archive of `rambo.detection.download --sets voc2007-test`
READY = "VOCdevkit/VOC2007/ImageSets/Main/test.txt"
HOST = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def archive_bytes(seed: int = 0, filler: int = 3 << 20) -> bytes:
    """A stand-in VOC 2007 test tar: its image-set list and ``filler`` random bytes (several chunks)."""
    members = {READY: b"000001\n", "VOCdevkit/VOC2007/JPEGImages/000001.jpg": random.Random(seed).randbytes(filler)}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def make_mirror(folder: Path, data: bytes) -> Path:
    """A mirror folder holding the archive and its MD5SUMS."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / NAME).write_bytes(data)
    (folder / "MD5SUMS").write_text(f"{md5(data)}  {NAME}\n")
    return folder


def command(root: Path, mirror: str | Path) -> list[str]:
    return ["-m", "rambo.detection.download", str(root), "--sets", "voc2007-test", "--mirror", str(mirror), "--quiet"]


def download(root: Path, mirror: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *command(root, mirror)], capture_output=True, text=True, timeout=120)


def tree_digest(folder: Path, leave_out: tuple[Path, ...] = ()) -> dict[str, str]:
    """``{path: SHA-256}`` of every file under ``folder``, but those under ``leave_out``."""
    digests = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not any(path.is_relative_to(other) for other in leave_out):
            digests[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def partials(folder: Path) -> list[Path]:
    return sorted(folder.glob(f".{NAME}.*.part"))


def wait_for(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def kill(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


@pytest.fixture
def scratch(tmp_path):
    folder = tmp_path / "scratch"  # the servers' and workers' own files, not compared
    folder.mkdir()
    return folder


@pytest.fixture
def serve(scratch):
    """``serve(folder, *flags) -> (base URL, log file)``: range_server.py on 127.0.0.1, stopped after the test."""
    servers = []

    def start(folder: Path, *flags: str) -> tuple[str, Path]:
        port_file, log = scratch / f"port{len(servers)}", scratch / f"requests{len(servers)}.log"
        log.write_text("")
        process = subprocess.Popen(
            [sys.executable, str(HERE / "range_server.py"), str(folder), str(port_file), str(log), *flags]
        )
        servers.append(process)
        wait_for(lambda: port_file.is_file() or process.poll() is not None, "the server's port")
        assert process.poll() is None, "the server did not start"
        return f"http://127.0.0.1:{port_file.read_text()}", log

    yield start
    for process in servers:
        kill(process)


def start_worker(root: Path, mirror: str | Path, scratch: Path) -> tuple[subprocess.Popen, Path]:
    """The download command stopped after its first chunk (download_worker.py); its partial file."""
    gate = scratch / f"gate{len(list(scratch.glob('gate*')))}"
    process = subprocess.Popen(
        [sys.executable, str(HERE / "download_worker.py"), str(gate), *command(root, mirror)[1:]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: gate.exists() or process.poll() is not None, "the worker's first chunk")
    assert process.poll() is None, "the worker ended before its first chunk"
    return process, own_partial(root, process.pid)


def own_partial(root: Path, pid: int) -> Path:
    """The partial file of process ``pid``: its name records the host, the process and its start."""
    found = [
        p
        for p in partials(root)
        if re.fullmatch(rf"\.{re.escape(NAME)}\.{HOST}-{pid}-\d+-[0-9a-f]{{12}}-[a-z0-9_]{{8}}\.part", p.name)
    ]
    assert len(found) == 1, partials(root)
    return found[0]


def assert_in_place(root: Path, data: bytes) -> None:
    assert md5((root / NAME).read_bytes()) == md5(data)
    assert (root / READY).read_text() == "000001\n"
    assert partials(root) == []


def test_a_copy_from_a_mirror_folder_killed_mid_copy_is_removed_by_the_rerun(tmp_path, scratch):
    data = archive_bytes()
    mirror, root = make_mirror(tmp_path / "mirror", data), tmp_path / "data"
    worker, partial = start_worker(root, mirror, scratch)
    kill(worker)
    assert partial.stat().st_size == CHUNK_BYTES  # what the killed copy left
    before = tree_digest(tmp_path, leave_out=(root, scratch))

    done = download(root, mirror)

    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{root / 'VOCdevkit/VOC2007'}\n"
    assert (
        f"removed {partial}: a partial download of {NAME} (1.0 MiB) by process {worker.pid}, which has ended"
        in done.stderr.splitlines()
    )
    assert_in_place(root, data)
    assert tree_digest(tmp_path, leave_out=(root, scratch)) == before


def test_a_download_from_a_url_killed_mid_copy_is_resumed_with_a_range_request(tmp_path, scratch, serve):
    data = archive_bytes()
    mirror, root = make_mirror(tmp_path / "mirror", data), tmp_path / "data"
    base, log = serve(mirror, "--stall", NAME, str(CHUNK_BYTES + CHUNK_BYTES // 2))
    first = subprocess.Popen([sys.executable, *command(root, base)], stderr=subprocess.DEVNULL)
    partial = wait_for(lambda: [p for p in partials(root) if p.stat().st_size >= CHUNK_BYTES], "the first chunk")[0]
    kill(first)
    assert partial == own_partial(root, first.pid) and partial.stat().st_size == CHUNK_BYTES
    before = tree_digest(tmp_path, leave_out=(root, scratch))

    done = download(root, base)

    assert done.returncode == 0, done.stderr
    assert (
        f"resuming {NAME} from {base}/{NAME} at byte {CHUNK_BYTES} (1.0 MiB): the partial download {partial} of "
        f"process {first.pid}, which has ended" in done.stderr.splitlines()
    )
    assert [line for line in log.read_text().splitlines() if NAME in line] == [
        f"/{NAME} -",  # the killed download
        f"/{NAME} bytes={CHUNK_BYTES}-",  # the rerun: only the rest
    ]
    assert_in_place(root, data)
    assert tree_digest(tmp_path, leave_out=(root, scratch)) == before


def test_a_server_without_ranges_sends_the_whole_file_again(tmp_path, scratch, serve):
    data = archive_bytes()
    mirror, root = make_mirror(tmp_path / "mirror", data), tmp_path / "data"
    base, _ = serve(mirror, "--no-range", "--stall", NAME, str(CHUNK_BYTES + CHUNK_BYTES // 2))
    first = subprocess.Popen([sys.executable, *command(root, base)], stderr=subprocess.DEVNULL)
    wait_for(lambda: [p for p in partials(root) if p.stat().st_size >= CHUNK_BYTES], "the first chunk")
    kill(first)
    before = tree_digest(tmp_path, leave_out=(root, scratch))

    done = download(root, base)

    assert done.returncode == 0, done.stderr
    assert (
        f"{base}/{NAME} sends the whole file, not the bytes from {CHUNK_BYTES} on: {NAME} is downloaded from the start"
        in done.stderr.splitlines()
    )
    assert_in_place(root, data)
    assert tree_digest(tmp_path, leave_out=(root, scratch)) == before


def test_a_resumed_file_with_the_wrong_checksum_is_downloaded_again_from_the_start(tmp_path, scratch, serve):
    old, new = archive_bytes(seed=0), archive_bytes(seed=1)
    assert len(old) == len(new) and old[:CHUNK_BYTES] != new[:CHUNK_BYTES]
    mirror, root = make_mirror(tmp_path / "mirror", old), tmp_path / "data"
    base, log = serve(mirror, "--stall", NAME, str(CHUNK_BYTES + CHUNK_BYTES // 2))
    first = subprocess.Popen([sys.executable, *command(root, base)], stderr=subprocess.DEVNULL)
    wait_for(lambda: [p for p in partials(root) if p.stat().st_size >= CHUNK_BYTES], "the first chunk")
    kill(first)
    make_mirror(mirror, new)  # the mirror's file changed meanwhile: the bytes kept are of the old one
    before = tree_digest(tmp_path, leave_out=(root, scratch))

    done = download(root, base)

    assert done.returncode == 0, done.stderr
    spliced = md5(old[:CHUNK_BYTES] + new[CHUNK_BYTES:])
    assert (
        f"{NAME} resumed from {base}/{NAME} has MD5 {spliced}, expected {md5(new)}: the bytes downloaded before may "
        f"be of another version of the file; it is downloaded again from the start" in done.stderr.splitlines()
    )
    assert [line for line in log.read_text().splitlines() if NAME in line] == [
        f"/{NAME} -",
        f"/{NAME} bytes={CHUNK_BYTES}-",
        f"/{NAME} -",
    ]
    assert_in_place(root, new)
    assert tree_digest(tmp_path, leave_out=(root, scratch)) == before


def test_a_download_killed_after_its_last_byte_is_used_without_downloading_again(tmp_path, scratch, serve):
    data = archive_bytes(filler=4096)  # one chunk: the worker stops once all of it is written
    mirror, root = make_mirror(tmp_path / "mirror", data), tmp_path / "data"
    base, log = serve(mirror)
    worker, partial = start_worker(root, base, scratch)
    kill(worker)
    assert partial.stat().st_size == len(data)
    before = tree_digest(tmp_path, leave_out=(root, scratch))

    done = download(root, base)

    assert done.returncode == 0, done.stderr
    assert (
        f"resuming {NAME} from {base}/{NAME} at byte {len(data)} (10.0 KiB): the partial download {partial} of "
        f"process {worker.pid}, which has ended" in done.stderr.splitlines()
    )
    assert [line for line in log.read_text().splitlines() if NAME in line] == [
        f"/{NAME} -",
        f"/{NAME} bytes={len(data)}-",  # answered 416: nothing left to send
    ]
    assert_in_place(root, data)
    assert tree_digest(tmp_path, leave_out=(root, scratch)) == before


def test_the_partial_file_of_a_live_download_is_never_removed(tmp_path, scratch):
    data = archive_bytes()
    mirror, root = make_mirror(tmp_path / "mirror", data), tmp_path / "data"
    worker, partial = start_worker(root, mirror, scratch)
    try:
        before = tree_digest(tmp_path, leave_out=(root, scratch))
        done = download(root, mirror)  # a second download of the same archive into the same folder
        assert done.returncode == 0, done.stderr
        assert (
            f"{partial} is left as it is: process {worker.pid} is downloading {NAME} into it"
            in done.stderr.splitlines()
        )
        assert partials(root) == [partial] and partial.stat().st_size == CHUNK_BYTES
        assert worker.poll() is None
        assert md5((root / NAME).read_bytes()) == md5(data) and (root / READY).is_file()
        assert tree_digest(tmp_path, leave_out=(root, scratch)) == before
    finally:
        kill(worker)
    again = download(root, mirror)  # the data is in place: the killed download's file is removed all the same

    assert again.returncode == 0, again.stderr
    assert (
        f"removed {partial}: a partial download of {NAME} (1.0 MiB) by process {worker.pid}, which has ended"
        in again.stderr.splitlines()
    )
    assert_in_place(root, data)


def test_partial_files_that_may_belong_to_a_running_download_elsewhere_are_left_with_a_warning(tmp_path):
    data = archive_bytes(filler=4096)
    mirror, root = make_mirror(tmp_path / "mirror", data), tmp_path / "data"
    root.mkdir()
    unrecorded = root / f".{NAME}.k2x9_q7a.part"  # an earlier version's name: no process recorded
    elsewhere = root / f".{NAME}.node-17.cluster-4242-1234567-0123456789ab-abcdefgh.part"
    unrecorded.write_bytes(b"a")
    elsewhere.write_bytes(b"b")
    before = tree_digest(tmp_path, leave_out=(root / NAME, root / "VOCdevkit"))

    done = download(root, mirror)

    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    for path, who in (
        (unrecorded, "a process an earlier version did not record"),
        (elsewhere, "process 4242 on node-17.cluster"),
    ):
        assert (
            f"warning: {path} is left as it is: a partial download of {NAME} by {who}, which may still run; "
            f"delete it if no download of {NAME} into {root} runs" in lines
        )
    assert md5((root / NAME).read_bytes()) == md5(data)
    assert tree_digest(tmp_path, leave_out=(root / NAME, root / "VOCdevkit")) == before


def test_without_a_pinned_checksum_a_killed_download_is_not_resumed_but_removed(tmp_path, scratch, serve, capsys):
    data = archive_bytes()
    mirror, root = make_mirror(tmp_path / "mirror", data), tmp_path / "data"
    base, log = serve(mirror, "--stall", NAME, str(CHUNK_BYTES + CHUNK_BYTES // 2))
    first = subprocess.Popen([sys.executable, *command(root, base)], stderr=subprocess.DEVNULL)
    partial = wait_for(lambda: [p for p in partials(root) if p.stat().st_size >= CHUNK_BYTES], "the first chunk")[0]
    kill(first)
    before = tree_digest(tmp_path, leave_out=(root, scratch))

    fetch_file(root / NAME, [f"{base}/{NAME}"], md5=None, show_progress=False)  # nothing verifies a resumed file

    assert capsys.readouterr().err.splitlines() == [
        f"removed {partial}: a partial download of {NAME} (1.0 MiB) by process {first.pid}, which has ended",
        f"{NAME}: MD5 {md5(data)} (not verified)",
    ]
    assert [line for line in log.read_text().splitlines() if NAME in line] == [f"/{NAME} -", f"/{NAME} -"]
    assert md5((root / NAME).read_bytes()) == md5(data) and partials(root) == []
    assert tree_digest(tmp_path, leave_out=(root, scratch)) == before
