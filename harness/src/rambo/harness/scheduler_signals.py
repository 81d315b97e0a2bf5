"""The scheduler's signals in a training process: a preempted or timed-out job leaves the way a
requeue expects, never as a failed run.

SLURM ends a job with `SIGTERM` (preemption, `scontrol requeue`, `scancel`; `SIGKILL`
follows after `KillWait`) and warns of its time limit with `USR2` (`--signal`, sent
`signal_delay_s` before it). Under submitit (the apps' `hydra/launcher=slurm`) the training
process handles both in Python: `TERM` is logged and the process waits for the kill; `USR2`
checkpoints the job's call, requeues the job and exits without a result. Two ways this went wrong,
both measured with `make test-slurm`:

- At a requeue a DataLoader worker died of the same `SIGTERM` (a worker keeps torch's own
  `TERM` handler from its fork until `worker_init` ignores the signal) and the training process
  raised "DataLoader worker (pid ...) exited unexpectedly": Hydra returned that as the job's result
  and the launcher reported the requeued job failed.
- A `USR2` that came while the job was starting, before submitit had installed its handler,
  killed the job (exit 140) instead of requeueing it.
- A `USR2` that came while a DataLoader forked its workers was handled inside the fork's hook,
  where Python drops an exception: submitit's exit after its requeue was lost, and the job trained
  on until SLURM killed it.

What this module does about them:

- [`hold`][rambo.harness.scheduler_signals.hold] notes `TERM` and `USR2` instead of acting on them. A submitit job holds
  them from the first import of `rambo.harness`, which its call's unpickling does before submitit
  installs its handlers ([`hold_while_job_starts`][rambo.harness.scheduler_signals.hold_while_job_starts]).
- [`scheduler_signals`][rambo.harness.scheduler_signals.scheduler_signals], around the apps' task function, releases
  them once submitit's handlers exist (a signal that came meanwhile is handled then: a `USR2` requeues the job), notes
  every signal its handlers receive, keeps the signals blocked across each fork (a DataLoader worker
  starts with them blocked; [`rambo.harness.workers.worker_init`][rambo.harness.workers.worker_init] ignores and then
  unblocks them, so no worker dies of them) with hooks in which no handler runs (a signal that comes during
  a fork is handled once it has returned: `_ForkGuard`), and turns an exception raised after a signal into the exit a
  requeue expects: `SystemExit`, which writes no result, so the launcher waits for the requeued
  job's. Leaving that way, it ends the workers first (`SIGKILL`, as the scheduler would): they
  ignore `TERM`, with which Python's exit would end them. Nothing changes where no Python handler
  is installed (a local run).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading

SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR2") if hasattr(signal, name))
SUBMITIT_MAIN = "submitit.core._submit"  # the module a submitit job runs (python -m ...)
REQUEUE_EXIT = -1  # submitit's own exit after a requeue: sys.exit(-1), status 255, no result written

log = logging.getLogger(__name__)
_state = {"held": []}  # and "fork_guard", made at the first guarded block


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def hold() -> None:
    """Note `TERM` and `USR2` instead of acting on them (a Python handler: the disposition of
    the whole process, whichever of its threads the kernel picks) until
    [`release`][rambo.harness.scheduler_signals.release] hands them to the handlers installed by then."""
    for number in SIGNALS:
        signal.signal(number, _note_held)


def _note_held(signum, frame) -> None:  # noqa: ARG001 (a signal handler's signature)
    _state["held"].append(signum)


def release() -> None:
    """Hand the signals noted since [`hold`][rambo.harness.scheduler_signals.hold] to the handlers installed now (raised
    again, in the order they came); a signal still noted only gets its default action back first."""
    for number in SIGNALS:
        if signal.getsignal(number) is _note_held:
            signal.signal(number, signal.SIG_DFL)
    held, _state["held"] = _state["held"], []
    if held:
        log.warning(
            "%s came while the job was starting, before its handlers existed: handled now",
            ", ".join(signal.Signals(number).name for number in dict.fromkeys(held)),
        )
    for number in dict.fromkeys(held):
        signal.raise_signal(number)


def starting_submitit_job() -> bool:
    """Whether this is a submitit job's process before submitit installed its signal handlers."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return (
        getattr(spec, "name", None) == SUBMITIT_MAIN
        and _main_thread()
        and all(signal.getsignal(number) in (signal.SIG_DFL, None) for number in SIGNALS)
    )


def hold_while_job_starts() -> None:
    """[`hold`][rambo.harness.scheduler_signals.hold] in a submitit job that has no handlers yet (called when
    `rambo.harness` is first imported); elsewhere nothing."""
    if starting_submitit_job():
        hold()


class _ForkGuard:
    """The fork hooks that start a DataLoader worker with `TERM` and `USR2` blocked, written so
    that no handler runs inside a fork hook.

    Python runs a fork hook from C and prints and drops an exception raised in it: a handler that
    ran there (submitit's `USR2` handler exits after its requeue) lost its exit, and the requeued
    job trained on until SLURM killed it. So the hooks that block the signals, restore the mask and
    mark the fork are C calls (ctypes' `PyDLL`: no Python code runs, so no handler; the GIL stays
    held). A signal that arrives while they are blocked is delivered when the mask is restored, by
    the last hook, and handled once the fork has returned. A handler that Python runs inside
    another (Python) fork hook, for a signal another thread received meanwhile, sees the mark and
    defers: the last hook raises that signal again, after the mask is restored.

    The hooks are registered once and stay: outside
    [`scheduler_signals`][rambo.harness.scheduler_signals.scheduler_signals] the set they block is empty (they change
    nothing)."""

    SET_BYTES = 256  # room for any libc's sigset_t (glibc's: 128 bytes)

    def __init__(self) -> None:
        import ctypes

        self.ctypes = ctypes
        libc = ctypes.PyDLL(None)  # the process's libc; PyDLL: the GIL is held, no Python code runs
        self.pthread_sigmask = libc.pthread_sigmask
        self.pthread_sigmask.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self.sigemptyset, self.sigaddset = libc.sigemptyset, libc.sigaddset
        self.sigemptyset.argtypes, self.sigaddset.argtypes = [ctypes.c_void_p], [ctypes.c_void_p, ctypes.c_int]
        self.memset = libc.memset
        self.memset.argtypes, self.memset.restype = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t], ctypes.c_void_p
        self.raise_ = getattr(libc, "raise")
        self.raise_.argtypes = [ctypes.c_int]
        self.blocked = (ctypes.c_ubyte * self.SET_BYTES)()  # what a fork blocks: SIGNALS while guarding, else none
        self.saved = (ctypes.c_ubyte * self.SET_BYTES)()  # the forking thread's mask before the fork
        # [0]: nonzero while a fork runs its hooks; [1 + i]: SIGNALS[i] when its handler deferred it, else 0
        self.marks = (ctypes.c_int * (1 + len(SIGNALS)))()
        self.deferred = [
            ctypes.c_int.from_buffer(self.marks, (1 + i) * ctypes.sizeof(ctypes.c_int)) for i in range(len(SIGNALS))
        ]
        self.guard(False)
        self.register()

    def register(self) -> None:
        from functools import partial

        address, size = self.ctypes.addressof, self.ctypes.sizeof
        # Hooks run before a fork in the reverse order of their registration, after it in that order:
        # the mark is set first and cleared last, the mask restored before a deferred signal is raised.
        os.register_at_fork(
            before=partial(self.pthread_sigmask, signal.SIG_BLOCK, address(self.blocked), address(self.saved)),
            after_in_parent=partial(self.pthread_sigmask, signal.SIG_SETMASK, address(self.saved), None),
            after_in_child=_after_fork_in_child,  # the child keeps the mask: its worker_init unblocks
        )
        for deferred in self.deferred:
            os.register_at_fork(after_in_parent=partial(self.raise_, deferred))  # raise(0) sends nothing
        clear = partial(self.memset, address(self.marks), 0, size(self.marks))
        os.register_at_fork(
            before=partial(self.memset, address(self.marks), 1, 1), after_in_parent=clear, after_in_child=clear
        )

    def guard(self, on: bool) -> None:
        """Block `TERM` and `USR2` across every fork from now on, or no longer."""
        self.sigemptyset(self.ctypes.addressof(self.blocked))
        for number in SIGNALS if on else ():
            self.sigaddset(self.ctypes.addressof(self.blocked), int(number))

    def forking(self) -> bool:
        return self.marks[0] != 0

    def defer(self, signum: int) -> None:
        self.deferred[SIGNALS.index(signum)].value = signum


def _fork_guard() -> _ForkGuard | None:
    """The process's `_ForkGuard`, made at the first call; `None` where there is no fork
    (Windows) or no libc to call."""
    if "fork_guard" not in _state:
        guard = None
        if hasattr(os, "register_at_fork") and hasattr(signal, "pthread_sigmask"):
            try:
                guard = _ForkGuard()
            except (OSError, AttributeError) as error:  # no libc symbols to call: workers fork unguarded
                log.debug("no fork guard for the scheduler's signals: %s", error)
        _state["fork_guard"] = guard
    return _state["fork_guard"]


def _after_fork_in_child() -> None:
    _state["held"] = []  # the child leaves the signals to its parent


def _end_workers() -> None:
    """End this process's forked children (its DataLoader workers) with `SIGKILL`, as the
    scheduler's kill would: they ignore `TERM`, which is how Python's exit ends them, and hold
    nothing to save. torch's `SIGCHLD` check is switched off first (the run is over)."""
    import multiprocessing

    if hasattr(signal, "SIGCHLD") and _main_thread():
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for child in multiprocessing.active_children():
        child.kill()
        child.join()


def _finished_by_submitit(error: BaseException) -> bool:
    """submitit's own "this job is over" error (raised by its handler when it does not requeue)."""
    return type(error).__name__ == "UncompletedJobError" and type(error).__module__.startswith("submitit")


@contextlib.contextmanager
def scheduler_signals():
    """The training process's side of a scheduler's signals (see the module docstring); yields the
    list of the signal numbers received so far.

    Where `TERM` or `USR2` has a Python handler (submitit's), each is wrapped to note the signal
    before it runs; the signals are released (a pending one is handled at once); while the block
    runs, every fork starts with them blocked; an exception that leaves the block after a signal
    was received is logged in one line and becomes `SystemExit(-1)`, submitit's exit after a
    requeue, which writes no result. Where neither has one, it only releases them."""
    handlers = {number: signal.getsignal(number) for number in SIGNALS} if _main_thread() else {}
    handled = {number: handler for number, handler in handlers.items() if callable(handler)}
    received: list[int] = []
    if not handled:
        release()
        yield received
        return

    fork_guard = _fork_guard()

    def noting(handler):
        def note_then_handle(signum, frame):
            if fork_guard is not None and fork_guard.forking():  # inside a fork hook: after the fork
                fork_guard.defer(signum)
                return None
            received.append(signum)
            return handler(signum, frame)

        return note_then_handle

    for number, handler in handled.items():
        signal.signal(number, noting(handler))
    if fork_guard is not None:
        fork_guard.guard(True)
    try:
        release()
        yield received
    except SystemExit:
        if received:  # submitit's exit after its requeue
            _end_workers()
        raise
    except Exception as error:
        if not received or _finished_by_submitit(error):
            raise
        names = ", ".join(dict.fromkeys(signal.Signals(number).name for number in received))
        first_line = (str(error).strip().splitlines() or [""])[0]
        log.warning(
            "%s received from the scheduler; %s: %s, raised after it, is part of the job's end: exiting "
            "without a result, as a requeued job does",
            names,
            type(error).__name__,
            first_line,
        )
        _end_workers()
        raise SystemExit(REQUEUE_EXIT) from None
    finally:
        if fork_guard is not None:
            fork_guard.guard(False)
        for number, handler in handled.items():
            signal.signal(number, handler)
