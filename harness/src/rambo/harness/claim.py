"""One run per folder, whatever the timing: a run claims each folder it writes into before it writes
anything, and gives the claim back when it ends.

Two runs given one output folder at the same time (two seeds of a sweep with one `output_dir`,
two SLURM jobs of a user's script) would otherwise both train and both write `checkpoint.pt` and
`metrics.json` there: the last to finish wins and the other's results are gone without a word.
[`RunExistsError`][rambo.harness.resume.RunExistsError] cannot see this, since it looks once,
at the start, before either run has written.

The claim is a file, `<folder>/.rambo-run.claim`, created by `link(2)` of a complete temporary
file onto that name: an exclusive create that is atomic on local file systems and on NFS alike
(the name appears with its whole content, or not at all), so of two runs exactly one gets it.
It records who holds it (host, process id and the process's start time, SLURM job id and restart
count, run name, a random token). The holder gives it back when it finishes, and at interpreter
exit (an exception, `sys.exit` from a scheduler's signal handler). A claim whose holder is gone
is recovered:

- the same SLURM job, requeued (`SLURM_JOB_ID` equal, `SLURM_RESTART_COUNT` higher): SLURM
  requeues a job only after its processes ended, on whatever node;
- a process on this host that no longer exists (or is a zombie, or whose id was reused: its start
  time differs), e.g. a run killed by `SIGKILL`;
- this very process (an earlier run in it raised and kept its claim).

Any other holder is alive, or may be: [`FolderClaimedError`][rambo.harness.claim.FolderClaimedError] names the folder
and the run that holds it, and nothing is written (it is an [`InputError`][rambo.harness.config_check.InputError]: the
apps print it as one `error:` line and exit with code 2). A holder on another host that died
without a scheduler to requeue it cannot be told from a live one; the error says which file to
delete then.

A stale claim is taken over in one step: under a lock on `<folder>/.rambo-run.claim.lock`
(`flock`; NFS clients map it to a lock on the server), the claim file is read again, and only if
it still is the stale holder's is it replaced by this run's (`rename(2)` over it). The claim file
never goes missing on the way, so a run arriving meanwhile finds a claim and is refused (or waits
for the lock to take over the same stale claim, and then finds it taken), and no run can remove a
claim it did not mean to. The lock file lives only while the lock is held.

A run claims the folder Hydra makes for it before Hydra writes anything there (`.hydra/*.yaml`,
the log file): [`claim_job_folder`][rambo.harness.claim.claim_job_folder] is built by Hydra's logging setup of the job,
which comes after Hydra makes the job's folder and before its first write, in the job's own process, for a
single run and for each job of a multirun under any launcher. A run refused there leaves every
byte of that folder as it was. This process keeps the claims it holds ([`held`][rambo.harness.claim.held]), and the
run's own claim of its folders ([`claim_folders`][rambo.harness.claim.claim_folders]) takes over the one already held,
so the folder is never unclaimed between the two.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import logging
import os
import socket
import time
import uuid
from pathlib import Path

from .config_check import USAGE_ERROR, InputError, stop
from .job_files import job_started, keep_job_files

CLAIM_NAME = ".rambo-run.claim"
#: The options that give a run's own files a folder of their own, as a refusal names them.
RUN_FILE_OPTIONS = "output_dir=..., checkpoint_path=..."
log = logging.getLogger(__name__)
_HELD: dict[Path, FolderClaim] = {}  # the claims this process holds, by absolute folder


class FolderClaimedError(InputError, RuntimeError):
    """Another run holds a folder this run would write into."""


def _pause(point: str) -> None:
    """A point of a takeover where a test's worker process waits (`claim_worker.py`) to replay an
    unlucky scheduling: `"stale"` (a claim was found stale), `"lock"` (about to take the
    takeover lock) and `"verified"` (under the lock, the claim is still the stale one). Nothing here."""


@contextlib.contextmanager
def _takeover_lock(folder: Path):
    """Hold the exclusive lock of `folder`'s claim takeovers; its file is removed when it is given
    back. A process that waited on a file removed meanwhile finds that out (the path names another
    file, or none) and locks the path's file anew."""
    path = folder / f"{CLAIM_NAME}.lock"
    while True:
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                if os.stat(path).st_ino == os.fstat(handle).st_ino:
                    break
            except FileNotFoundError:
                pass
        except BaseException:
            os.close(handle)
            raise
        os.close(handle)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # still locked: no one else can hold this file meanwhile
        os.close(handle)


def _process_start(pid: int) -> str | None:
    """The start time of process `pid` (clock ticks since boot, `/proc/<pid>/stat` field 22), or
    `None` where there is no `/proc`: with the pid it names one process, even after pid reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _process_state(pid: int) -> str | None:
    """`/proc/<pid>/stat`'s state letter (`Z`: a zombie), or `None` without `/proc`."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def holder_record(run: str) -> dict:
    """Who this process is, as a claim records it."""
    env = os.environ
    return {
        "run": run,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_start": _process_start(os.getpid()),
        "slurm_job_id": env.get("SLURM_JOB_ID"),
        "slurm_restart_count": int(env.get("SLURM_RESTART_COUNT", 0) or 0),
        "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "token": uuid.uuid4().hex,
    }


def holder_is_gone(holder: dict, me: dict) -> str | None:
    """Why the claim of `holder` may be taken over by `me` (see the module docstring), or `None`
    while its holder may still be running."""
    job = holder.get("slurm_job_id")
    if job and job == me["slurm_job_id"] and me["slurm_restart_count"] > int(holder.get("slurm_restart_count") or 0):
        return f"SLURM job {job} was requeued (restart {me['slurm_restart_count']})"
    if holder.get("host") != me["host"] or not isinstance(holder.get("pid"), int):
        return None
    pid = holder["pid"]
    if pid == me["pid"] and holder.get("pid_start") == me["pid_start"]:
        return "this process holds it from an earlier run that did not end"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"process {pid} on {me['host']} has ended"
    except PermissionError:
        pass  # alive, another user's
    if _process_state(pid) == "Z":
        return f"process {pid} on {me['host']} has ended (a zombie)"
    start = _process_start(pid)
    if holder.get("pid_start") is not None and start is not None and start != holder["pid_start"]:
        return f"process {pid} on {me['host']} has ended (its id now names another process)"
    return None


def describe(holder: dict) -> str:
    job = f", SLURM job {holder['slurm_job_id']}" if holder.get("slurm_job_id") else ""
    return (
        f"run {holder.get('run')!r} (host {holder.get('host')}, process {holder.get('pid')}{job}, "
        f"since {holder.get('since')})"
    )


def _read(path: Path) -> dict | None:
    """The holder recorded at `path`; `None` when the file is gone; `{}` when it is unreadable."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


class FolderClaim:
    """The claim of one folder by one run: [`acquire`][rambo.harness.claim.FolderClaim.acquire], then
    [`release`][rambo.harness.claim.FolderClaim.release] (also at exit). `options`: what a refused run is told to set to
    get a folder of its own."""

    def __init__(self, folder: str | Path, run: str, options: str = RUN_FILE_OPTIONS):
        self.folder = Path(folder)
        self.path = self.folder / CLAIM_NAME
        self.me = holder_record(run)
        self.options = options
        self.held = False

    def acquire(self) -> FolderClaim:
        """Take the claim, recovering one whose holder is gone;
        [`FolderClaimedError`][rambo.harness.claim.FolderClaimedError] when a live run holds it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        temporary = self.folder / f"{CLAIM_NAME}.{self.me['token']}.tmp"
        temporary.write_text(json.dumps(self.me, indent=1) + "\n")
        try:
            for _ in range(5):  # each round either takes the claim, stops, or removed a stale claim
                try:
                    os.link(temporary, self.path)
                except FileExistsError:
                    holder = _read(self.path)
                    if holder is None:
                        continue  # given back between the two calls
                    reason = holder_is_gone(holder, self.me) if holder else None
                    if reason is None:
                        raise self._claimed(holder) from None
                    _pause("stale")
                    if not self._take_over(temporary, holder, reason):
                        continue  # given back or taken by another run meanwhile: look again
                self.held = True
                _HELD[Path(os.path.abspath(self.folder))] = self
                atexit.register(self.release)
                return self
            raise FolderClaimedError(f"{self.folder}: could not claim it; several runs are taking it at once")
        finally:
            temporary.unlink(missing_ok=True)

    def _claimed(self, holder: dict) -> FolderClaimedError:
        who = describe(holder) if holder else "a run whose claim file cannot be read"
        return FolderClaimedError(
            f"{self.folder} is claimed by {who}; this run ({self.me['run']!r}) would overwrite its checkpoint and "
            f"metrics there, so it stops before writing anything. Give this run a folder of its own ({self.options}), "
            f"or wait for that run to end. If that run is gone (killed on another host, "
            f"no scheduler to requeue it), delete {self.path} and start again."
        )

    def _take_over(self, temporary: Path, holder: dict, reason: str) -> bool:
        """Replace the claim file by `temporary` (this run's record) if it still holds `holder`'s
        stale claim, in one step under the takeover lock; `False` when it no longer does."""
        _pause("lock")
        with _takeover_lock(self.folder):
            if _read(self.path) != holder:
                return False
            _pause("verified")
            os.replace(temporary, self.path)
        log.warning("%s: took over the claim of %s: %s", self.folder, describe(holder), reason)
        return True

    def release(self) -> None:
        """Give the claim back, if this run still holds it (a no-op otherwise)."""
        if not self.held:
            return
        self.held = False
        atexit.unregister(self.release)
        key = Path(os.path.abspath(self.folder))
        if _HELD.get(key) is self:
            del _HELD[key]
        if self.owns_file():
            self.path.unlink(missing_ok=True)

    def owns_file(self) -> bool:
        """Whether the claim file is this claim's (not removed by hand, nor taken over since)."""
        holder = _read(self.path)
        return bool(holder) and holder.get("token") == self.me["token"]


def held(folder: str | Path) -> FolderClaim | None:
    """The claim of `folder` this process holds (taken by [`claim_job_folder`][rambo.harness.claim.claim_job_folder] or
    an earlier [`claim_folders`][rambo.harness.claim.claim_folders]), or `None`."""
    claim = _HELD.get(Path(os.path.abspath(folder)))
    return claim if claim is not None and claim.held and claim.owns_file() else None


def claim_folders(folders, run: str, options: str = RUN_FILE_OPTIONS) -> list[FolderClaim]:
    """Claim every distinct folder of `folders` (in a fixed order), keeping the claims this process
    holds already ([`held`][rambo.harness.claim.held]); all or none: when one is held by another run, the ones taken
    here are given back and [`FolderClaimedError`][rambo.harness.claim.FolderClaimedError] is raised."""
    unique = sorted({Path(os.path.abspath(folder)) for folder in folders})
    claims: list[FolderClaim] = []
    taken: list[FolderClaim] = []
    try:
        for folder in unique:
            claim = held(folder)
            if claim is None:
                claim = FolderClaim(folder, run, options).acquire()
                taken.append(claim)
            claims.append(claim)
    except BaseException:
        for claim in taken:
            claim.release()
        raise
    return claims


class _PassEverything(logging.Filter):
    """A logging filter that keeps every record: what [`claim_job_folder`][rambo.harness.claim.claim_job_folder] gives
    Hydra's logging setup."""


def claim_job_folder(folder: str, run: str) -> logging.Filter:
    """Claim `folder`, the folder Hydra made for this job (`${hydra.runtime.output_dir}`), for the
    run `run`, before Hydra writes anything there (see the module docstring); a refused run prints
    one `error:` line and exits with code 2, having written nothing. The main process of a run
    claims; the other processes of a distributed run (torchrun, SLURM tasks) write into their main
    process's folder and claim nothing.

    The apps' `train.yaml` names it as a filter of `hydra.job_logging`: Python's logging setup
    builds filters before it opens the log file, and whichever logging config a run picks, its
    filters are built. The filter itself keeps every record."""
    from .distributed import detect_setup

    job_started()  # an earlier job's files of this process (a launcher's worker) are none of this job's
    if detect_setup().is_main and held(folder) is None:
        options = "hydra.run.dir=..."
        try:
            from hydra.core.hydra_config import HydraConfig
            from hydra.types import RunMode

            if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
                options = "hydra.sweep.dir=..."
        except ImportError:  # pragma: no cover (the apps run under Hydra)
            pass
        try:
            FolderClaim(folder, run, options).acquire()
        except FolderClaimedError as error:
            # not into a log file: the files the logging setup is replacing are an earlier job's
            stop([str(error)], USAGE_ERROR, log_files=False)
        keep_job_files(Path(folder), CLAIM_NAME)
    return _PassEverything()
