"""DataLoader worker processes under a scheduler's signals.

Workers are forked from the training process, and a fork inherits its Python signal handlers:
under SLURM, submitit's handler of `USR2` (the signal SLURM sends `signal_delay_s` before a
time limit) would run in every worker as well as in the training process. Measured with
`make test-slurm`'s time-limit job at `num_workers=2`: three processes caught the signal, the
workers' handlers raced to write submitit's requeue file (`AssertionError: A temporary saved file
already exists`), a worker died and the DataLoader raised. The training process alone should
handle it (checkpoint, requeue, exit; its workers end with it). The same for `SIGTERM`, which
SLURM sends before killing a requeued or cancelled job: submitit's handler lets the training
process wait for the `SIGKILL` after `KillWait`, while a worker left at the default ended at
once and the DataLoader raised "worker killed by signal: Terminated" in the training process,
which then reported the run failed although SLURM had requeued it (measured the same way).

So a worker never runs the training process's Python handlers: a signal whose inherited handler
is a Python function (the training process handles it itself) is ignored in the worker; a signal
at its default stays at its default (a plain local run's workers still end on `SIGTERM`).
Between its fork and `worker_init` a worker has torch's `TERM` handler, which ends it: under
[`rambo.harness.scheduler_signals.scheduler_signals`][rambo.harness.scheduler_signals.scheduler_signals] a worker starts
with both signals blocked, and `worker_init` unblocks them once they are ignored (one that came meanwhile is
dropped; the training process received it too).
"""

from __future__ import annotations

import signal

SIGNALS = tuple(getattr(signal, name) for name in ("SIGUSR2", "SIGTERM") if hasattr(signal, name))


def worker_init(worker_id: int) -> None:  # noqa: ARG001 (DataLoader's worker_init_fn signature)
    """`worker_init_fn` of every DataLoader of the apps: `USR2` and `TERM` ignored in the
    worker where the training process handles them in Python (see the module docstring)."""
    for number in SIGNALS:
        if callable(signal.getsignal(number)):
            signal.signal(number, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
