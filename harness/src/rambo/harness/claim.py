"""One run per folder, whatever the timing: a run claims each folder it writes into before it writes
anything, and gives the claim back when it ends.

Two runs given one output folder at the same time (two seeds of a sweep with one ``output_dir``,
two SLURM jobs of a user's script) would otherwise both train and both write ``checkpoint.pt`` and
``metrics.json`` there: the last to finish wins and the other's results are gone without a word.
:class:`RunExistsError <rambo.harness.resume.RunExistsError>` cannot see this, since it looks once,
at the start, before either run has written.

The claim is a file, ``<folder>/.rambo-run.claim``, created by ``link(2)`` of a complete temporary
file onto that name: an exclusive create that is atomic on local file systems and on NFS alike
(the name appears with its whole content, or not at all), so of two runs exactly one gets it.
It records who holds it (host, process id and the process's start time, SLURM job id and restart
count, run name, a random token). The holder gives it back when it finishes, and at interpreter
exit (an exception, ``sys.exit`` from a scheduler's signal handler). A claim whose holder is gone
is recovered:

- the same SLURM job, requeued (``SLURM_JOB_ID`` equal, ``SLURM_RESTART_COUNT`` higher): SLURM
  requeues a job only after its processes ended, on whatever node;
- a process on this host that no longer exists (or is a zombie, or whose id was reused: its start
  time differs), e.g. a run killed by ``SIGKILL``;
- this very process (an earlier run in it raised and kept its claim).

Any other holder is alive, or may be: :class:`FolderClaimedError` names the folder and the run that
holds it, and nothing is written. A holder on another host that died without a scheduler to
requeue it cannot be told from a live one; the error says which file to delete then.

A stale claim is taken over in one step: under a lock on ``<folder>/.rambo-run.claim.lock``
(``flock``; NFS clients map it to a lock on the server), the claim file is read again, and only if
it still is the stale holder's is it replaced by this run's (``rename(2)`` over it). The claim file
never goes missing on the way, so a run arriving meanwhile finds a claim and is refused (or waits
for the lock to take over the same stale claim, and then finds it taken), and no run can remove a
claim it did not mean to. The lock file lives only while the lock is held.
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

CLAIM_NAME = ".rambo-run.claim"
log = logging.getLogger(__name__)


class FolderClaimedError(RuntimeError):
    """Another run holds a folder this run would write into."""


def _pause(point: str) -> None:
    """A point of a takeover where a test's worker process waits (``claim_worker.py``) to replay an
    unlucky scheduling: ``"stale"`` (a claim was found stale), ``"lock"`` (about to take the
    takeover lock) and ``"verified"`` (under the lock, the claim is still the stale one). Nothing here."""


@contextlib.contextmanager
def _takeover_lock(folder: Path):
    """Hold the exclusive lock of ``folder``'s claim takeovers; its file is removed when it is given
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
    """The start time of process ``pid`` (clock ticks since boot, ``/proc/<pid>/stat`` field 22), or
    ``None`` where there is no ``/proc``: with the pid it names one process, even after pid reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _process_state(pid: int) -> str | None:
    """``/proc/<pid>/stat``'s state letter (``Z``: a zombie), or ``None`` without ``/proc``."""
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
    """Why the claim of ``holder`` may be taken over by ``me`` (see the module docstring), or ``None``
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
    """The holder recorded at ``path``; ``None`` when the file is gone; ``{}`` when it is unreadable."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


class FolderClaim:
    """The claim of one folder by one run: :meth:`acquire`, then :meth:`release` (also at exit)."""

    def __init__(self, folder: str | Path, run: str):
        self.folder = Path(folder)
        self.path = self.folder / CLAIM_NAME
        self.me = holder_record(run)
        self.held = False

    def acquire(self) -> FolderClaim:
        """Take the claim, recovering one whose holder is gone; :class:`FolderClaimedError` when a
        live run holds it."""
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
                atexit.register(self.release)
                return self
            raise FolderClaimedError(f"{self.folder}: could not claim it; several runs are taking it at once")
        finally:
            temporary.unlink(missing_ok=True)

    def _claimed(self, holder: dict) -> FolderClaimedError:
        who = describe(holder) if holder else "a run whose claim file cannot be read"
        return FolderClaimedError(
            f"{self.folder} is claimed by {who}; this run ({self.me['run']!r}) would overwrite its checkpoint and "
            f"metrics there, so it stops before writing anything. Give this run a folder of its own (output_dir=..., "
            f"checkpoint_path=...), or wait for that run to end. If that run is gone (killed on another host, "
            f"no scheduler to requeue it), delete {self.path} and start again."
        )

    def _take_over(self, temporary: Path, holder: dict, reason: str) -> bool:
        """Replace the claim file by ``temporary`` (this run's record) if it still holds ``holder``'s
        stale claim, in one step under the takeover lock; ``False`` when it no longer does."""
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
        holder = _read(self.path)
        if holder and holder.get("token") == self.me["token"]:
            self.path.unlink(missing_ok=True)


def claim_folders(folders, run: str) -> list[FolderClaim]:
    """Claim every distinct folder of ``folders`` (in a fixed order); all or none: when one is
    held by another run, the ones taken are given back and :class:`FolderClaimedError` is raised."""
    unique = sorted({Path(os.path.abspath(folder)) for folder in folders})
    claims: list[FolderClaim] = []
    try:
        for folder in unique:
            claims.append(FolderClaim(folder, run).acquire())
    except BaseException:
        for claim in claims:
            claim.release()
        raise
    return claims
