"""The files Hydra writes into a job's folder (`.hydra/*.yaml`, the job's log), kept as an earlier
run there left them while a rerun is checked: a run refused before it starts puts them back byte for
byte ([`restore_job_files`][rambo.harness.job_files.restore_job_files], called by
[`stop`][rambo.harness.config_check.stop]); a run that passed its checks lets them go
([`job_started`][rambo.harness.job_files.job_started]). The folder's claim
([`claim_job_folder`][rambo.harness.claim.claim_job_folder]) keeps them, before Hydra writes."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

_JOB_FILES: dict[Path, bytes | None] = {}  # the job folder's files Hydra writes, as they were (None: absent)
_NEW_JOB_DIRS: list[Path] = []  # the folders Hydra makes for them there, absent before


def keep_job_files(folder: Path, claim_name: str) -> None:
    """Keep the bytes of the files Hydra is about to write into the job's `folder` (`.hydra/*.yaml`,
    the job's log) when the folder holds an earlier run's files (any file besides the claim's, whose
    names start with `claim_name`), so that a run refused before it starts
    ([`restore_job_files`][rambo.harness.job_files.restore_job_files]) leaves that run's files as they
    were."""
    _JOB_FILES.clear()
    _NEW_JOB_DIRS.clear()
    folder = Path(os.path.abspath(folder))
    if not any(not entry.name.startswith(claim_name) for entry in folder.iterdir()):
        return  # a new folder: the refused run's own log says why it stopped
    subdir, job = ".hydra", None
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            subdir, job = HydraConfig.get().output_subdir, HydraConfig.get().job.name
    except ImportError:  # pragma: no cover (the apps run under Hydra)
        pass
    names = {path.name for path in folder.glob("*.log")} | ({f"{job}.log"} if job else set())
    if subdir:
        names |= {f"{subdir}/{name}" for name in ("config.yaml", "hydra.yaml", "overrides.yaml")}
        if (folder / subdir).is_dir():
            names |= {f"{subdir}/{path.name}" for path in (folder / subdir).iterdir() if path.is_file()}
        else:
            _NEW_JOB_DIRS.append(folder / subdir)
    for name in names:
        path = folder / name
        _JOB_FILES[path] = path.read_bytes() if path.is_file() else None


def job_started() -> None:
    """The run passed its checks and writes its own files from now on: a later refusal keeps what Hydra
    and the log wrote into its folder."""
    _JOB_FILES.clear()
    _NEW_JOB_DIRS.clear()


def restore_job_files() -> None:
    """A run refused before it started ([`job_started`][rambo.harness.job_files.job_started]): put back the files
    Hydra and the log wrote into its job folder as the earlier run there left them (byte for byte; a file
    that was absent is removed again), closing the log files first. A no-op when none were kept."""
    kept = dict(_JOB_FILES)
    folders = list(_NEW_JOB_DIRS)
    job_started()
    if not kept:
        return
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(os.path.abspath(handler.baseFilename)) in kept:
            root.removeHandler(handler)
            handler.close()
    for path, data in kept.items():
        if data is None:
            path.unlink(missing_ok=True)
        elif not path.is_file() or path.read_bytes() != data:
            path.write_bytes(data)
    for folder in folders:
        with contextlib.suppress(OSError):  # not empty: files of another's, kept
            folder.rmdir()
