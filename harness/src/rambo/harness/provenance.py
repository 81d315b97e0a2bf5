"""What made a run: the code (project versions; the commit of the last change to the sources that
make runs, and whether those sources were edited), the libraries, the device (the CPU's architecture,
or the GPU), the numerics mode and the thread count ([`numerics`][rambo.harness.numerics]), how the run was launched
(local, torchrun or a SLURM job, and its number of processes) and the profile. Every run's
`metrics.json` and W&B config carry it ([`run`][rambo.harness.run]), and the tables name the numerics their runs
came from: in the portable mode a run gives the same bytes on every x86-64 CPU with the same thread
count, so the CPU model and its instruction set are not recorded (they would make one result look
like two); in the native mode the results follow the CPU, and the mode says so.

Nothing here holds a time or a host name: two identical runs on one machine, launched the same
way, record the same facts. The commit is the last one that changed `SOURCE_FOLDERS`, not the
checkout's HEAD, so a commit of results on top of the code that made them leaves it as it was (a
fresh clone of that commit records what the committed runs recorded). Under SLURM the job
(and array) ids are recorded too, so there two runs differ by them.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import torch

from .numerics import facts as numerics_facts
from .numerics import label as numerics_label

DISTRIBUTIONS = ("rambo-core", "rambo-harness", "rambo-retrieval", "rambo-detection")
LIBRARIES = ("torch", "torchvision", "numpy")
# The folders of the repository whose edits change what a run computes: the sub-projects' packages,
# code and configs (the run stages' DVC deps). Their tests, READMEs and benchmarks do not, nor do
# results/, figures/out/ and dvc.lock, which change *because* runs ran.
SOURCE_FOLDERS = ("core/src", "harness/src", "retrieval/src", "detection/src")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.cache
def git_state(source_file: str | None = None) -> dict | None:
    """`{"source_commit", "dirty"}` of the git checkout that *tracks* this package's source file (an
    editable install), or `None` (a wheel in site-packages, a copy without git; a `.venv` inside
    a checkout is not tracked by it, so a wheel installed there is not mistaken for the checkout).
    `source_commit`: the last commit that changed `SOURCE_FOLDERS` (`git log -1 -- ...`);
    `dirty`: uncommitted changes under them."""
    path = Path(source_file or __file__).resolve()
    top = _git(["rev-parse", "--show-toplevel"], path.parent)
    if top is None or _git(["ls-files", "--error-unmatch", str(path)], path.parent) is None:
        return None
    folders = [f for f in SOURCE_FOLDERS if (Path(top) / f).is_dir()]
    commit = _git(["log", "-1", "--format=%H", "--", *folders], Path(top)) or None
    status = _git(["status", "--porcelain", "--untracked-files=no", "--", *folders], Path(top))
    return {"source_commit": commit, "dirty": None if status is None else bool(status)}


def launch_facts() -> dict:
    """How the run was started: `launcher` (`slurm` inside a SLURM job, `torchrun` under
    torch's elastic launcher, else `local`), `processes` (the world size: results differ
    between one process and several, while two SLURM tasks and a two-process torchrun agree) and,
    in a SLURM job, its job id and array job / task ids."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        processes = dist.get_world_size()
    else:
        processes = int(os.environ.get("WORLD_SIZE") or os.environ.get("SLURM_NTASKS") or 1)
    facts: dict = {"launcher": "local", "processes": processes}
    if os.environ.get("SLURM_JOB_ID"):
        facts["launcher"] = "slurm"
        facts["slurm"] = {
            key: os.environ[name]
            for key, name in (
                ("job_id", "SLURM_JOB_ID"),
                ("array_job_id", "SLURM_ARRAY_JOB_ID"),
                ("array_task_id", "SLURM_ARRAY_TASK_ID"),
            )
            if os.environ.get(name)
        }
    elif os.environ.get("TORCHELASTIC_RUN_ID"):
        facts["launcher"] = "torchrun"
    return facts


def device_facts(device: torch.device | str | None = None) -> dict:
    """The CPU's architecture (`x86_64`) and, for a CUDA device, the GPU."""
    facts = {"type": "cpu", "machine": platform.machine()}
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda":
        facts.update(type="cuda", gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda)
    return facts


def machine_label(provenance: dict) -> str:
    """One line naming how a run computed, e.g. `portable numerics (the same on every x86-64 CPU),
    1 thread, torch 2.14.1`, or the GPU: what the tables list (the commit is left out: the same
    numerics at another commit compute the same)."""
    device = provenance.get("device", {})
    numerics = provenance.get("numerics") or {
        # a run made before the numerics mode existed: native, on torch's kernels of its CPU or the portable ones
        "mode": "native",
        "threads": provenance.get("threads"),
        "torch_kernels": str(device.get("cpu_capability", "")).lower() or None,
    }
    where = f"{device['gpu']}, " if device.get("gpu") else ""
    torch_version = provenance.get("libraries", {}).get("torch")
    processes = provenance.get("launch", {}).get("processes", 1)
    process_text = f", {processes} processes" if processes != 1 else ""
    return f"{where}{numerics_label(numerics)}{process_text}, torch {torch_version}"


def run_provenance(profile: str | None = None, device: torch.device | str | None = None) -> dict:
    """Everything above for a run of `profile` on `device` (the numerics and thread count read
    now: call it after the app set them, [`runtime.set_threads`][rambo.harness.runtime.set_threads])."""
    return {
        "project": {name: _version(name) for name in DISTRIBUTIONS if _version(name) is not None},
        "git": git_state(),
        "libraries": {name: _version(name) for name in LIBRARIES},
        "python": platform.python_version(),
        "device": device_facts(device),
        "numerics": numerics_facts(),
        "threads": torch.get_num_threads(),
        "launch": launch_facts(),
        "profile": profile,
    }
