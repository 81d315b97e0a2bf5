import os
import stat

import pytest
import torch

from rambo.harness.atomic import atomic_path, save_torch, write_json, write_text


def test_write_text_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "metrics.json"
    write_text(path, "one")
    write_text(path, "two")
    assert path.read_text() == "two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["metrics.json"]


def test_files_are_readable_like_any_other_output(tmp_path):
    """mkstemp creates 0600 files; an output must get 0666 less the umask (0644 under umask 022)."""
    previous = os.umask(0o022)
    try:
        write_json(tmp_path / "metrics.json", {"b": 1, "a": 2})
        save_torch({"epoch": 1}, tmp_path / "checkpoint.pt")
    finally:
        os.umask(previous)
    for name in ("metrics.json", "checkpoint.pt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
    assert (tmp_path / "metrics.json").read_text() == '{\n  "a": 2,\n  "b": 1\n}'  # sorted keys: stable diffs


def test_a_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_torch({"epoch": 1}, path)

    def crash(obj, f):
        f.write(b"half a file")  # through the open temporary file
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        save_torch({"epoch": 2}, path)
    monkeypatch.undo()
    assert torch.load(path)["epoch"] == 1
    assert os.listdir(tmp_path) == ["checkpoint.pt"]


def test_atomic_path_keeps_the_suffix_a_writer_needs(tmp_path):
    with atomic_path(tmp_path / "scores.npz", suffix=".npz") as temporary:
        assert temporary.suffix == ".npz" and temporary.parent == tmp_path
        temporary.write_bytes(b"x")
    assert (tmp_path / "scores.npz").read_bytes() == b"x"


def test_folders_made_by_mkdtemp_get_default_permissions(tmp_path):
    import tempfile

    from rambo.harness.atomic import give_default_permissions

    folder = tempfile.mkdtemp(dir=tmp_path)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    previous = os.umask(0o022)
    try:
        give_default_permissions(folder)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o755


def test_a_run_removes_the_temporaries_of_killed_writes_in_its_own_folder_only(tmp_path):
    """A save killed by SIGKILL (here: the saving process kills itself mid-write) leaves
    ``.checkpoint.pt.<random>.tmp``; the next run's start removes it and the one of its headline
    (in a folder the seeds share), and nothing else: not another seed's, another folder's, a
    subfolder's, or a file that only looks temporary."""
    import signal
    import subprocess
    import sys

    from omegaconf import OmegaConf

    from rambo.harness.run import TrainingRun

    run, other, headlines = tmp_path / "run", tmp_path / "other", tmp_path / "headlines"
    for path in (run / "checkpoint.pt", other / "checkpoint.pt", headlines / "seed0.json", headlines / "seed1.json"):
        killed = subprocess.run(
            [
                sys.executable,
                "-c",
                "import os, signal\n"
                "from rambo.harness.atomic import atomic_path\n"
                f"with atomic_path({str(path)!r}) as temporary:\n"
                "    temporary.write_bytes(b'half a checkpoint')\n"
                "    os.kill(os.getpid(), signal.SIGKILL)\n",
            ],
            timeout=60,
        )
        assert killed.returncode == -signal.SIGKILL
    (run / "sub").mkdir()
    unrelated = {
        "notes.tmp": "mine",
        ".hidden": "mine",
        ".data.zip.abcd1234.part": "a download's",
        "sub/.checkpoint.pt.abcd1234.tmp": "a subfolder's",
    }
    for name, text in unrelated.items():
        (run / name).write_text(text)
    stale = sorted(path.name for path in run.glob(".*.tmp"))
    assert len(stale) == 1 and stale[0].startswith(".checkpoint.pt.")
    cfg = OmegaConf.create(
        {
            "seed": 0,
            "experiment_name": "toy",
            "output_dir": str(run),
            "metrics_path": f"{run}/metrics.json",
            "curve_path": f"{run}/curve.json",
            "checkpoint_path": f"{run}/checkpoint.pt",
            "headline_path": f"{headlines}/seed0.json",  # a folder the seeds share
            "resume": "auto",
            "resume_may_change": ["resume"],
            "max_epochs_this_run": None,
            "wandb": {"mode": "disabled", "project": "p"},
        }
    )
    other_before = sorted(path.name for path in other.iterdir())
    assert other_before and all(name.endswith(".tmp") for name in other_before)
    TrainingRun(cfg, {}).release()
    assert sorted(path.name for path in run.glob(".*.tmp")) == []
    assert {name: (run / name).read_text() for name in unrelated} == unrelated
    assert sorted(path.name for path in other.iterdir()) == other_before  # not the run's folder
    assert [path.name[:12] for path in headlines.iterdir()] == [".seed1.json."]  # another seed's


def _mount_tmpfs(folder, size):
    import subprocess

    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small file system here (needs root): {mounted.stderr.decode().strip()}")


def test_a_checkpoint_save_on_a_full_disk_says_where_and_how_much_in_one_line(tmp_path):
    """A real full disk (a 1 MiB tmpfs): one line naming the file and the space it needs; the
    checkpoint already there and the folder are as they were."""
    import io
    import shutil
    import subprocess

    from rambo.harness.atomic import DiskFullError, _size
    from rambo.harness.checkpoint import save_checkpoint

    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "1m")
    try:
        path = disk / "checkpoint.pt"
        save_checkpoint({"epoch": 1, "weight": torch.zeros(1000)}, path)
        before = path.read_bytes()
        state = {"epoch": 2, "weight": torch.zeros(500_000)}
        with pytest.raises(DiskFullError) as caught:
            save_checkpoint(state, path)
        buffer = io.BytesIO()
        torch.save(state, buffer)
        needed, free = _size(len(buffer.getvalue())), _size(shutil.disk_usage(disk).free)
        assert needed.endswith(" MiB")  # more than the disk holds
        assert str(caught.value) == (
            f"{path} was not written: no space left on the device (it needs {needed}, {free} free "
            "there); a file already at that path is kept as it was. Free space on that disk (or write to another "
            "one), then run again"
        )
        assert caught.value.__cause__ is None and caught.value.__suppress_context__  # no chained tracebacks
        assert caught.value.errno == 28
        assert path.read_bytes() == before and os.listdir(disk) == ["checkpoint.pt"]
    finally:
        subprocess.run(["umount", str(disk)], check=True)
