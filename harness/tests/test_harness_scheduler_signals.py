"""The scheduler's signals in a training process (rambo.harness.scheduler_signals), each case in a
real process: a handler like submitit's is installed, the process signals itself as SLURM does,
and a DataLoader worker is killed as srun's forced termination kills it."""

import re
import signal
import subprocess
import sys
import textwrap

PRELUDE = textwrap.dedent(
    """
    import logging, os, signal, sys, time
    import torch
    from rambo.harness.scheduler_signals import hold, scheduler_signals
    from rambo.harness.workers import worker_init

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stdout)
    SIGNALS = {signal.SIGTERM, signal.SIGUSR2}

    def bypass(signum, frame):  # stands in for submitit's handlers: TERM logged, the kill awaited
        print("handler:", signal.Signals(signum).name, flush=True)

    def blocked():
        return sorted(s.name for s in set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) & SIGNALS)

    class Items(torch.utils.data.Dataset):
        def __init__(self, length=4):
            self.length = length

        def __len__(self):
            return self.length

        def __getitem__(self, index):
            return os.getpid(), str(signal.getsignal(signal.SIGTERM)), str(signal.getsignal(signal.SIGUSR2)), blocked()

    def at_worker_start(worker_id):  # what the worker has before worker_init, then worker_init
        print("worker starts with blocked:", blocked(), flush=True)
        worker_init(worker_id)
    """
)


def python(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script)], capture_output=True, text=True, timeout=120
    )


def test_a_worker_killed_after_the_scheduler_s_sigterm_ends_the_process_as_a_requeue_not_a_failure():
    done = python(
        """
        signal.signal(signal.SIGTERM, bypass)
        signal.signal(signal.SIGUSR2, bypass)
        class Slow(Items):  # a worker loading its next item holds none of the queues' locks when killed
            def __getitem__(self, index):
                if index > 0:
                    time.sleep(5)
                return super().__getitem__(index)

        with scheduler_signals():
            loader = iter(torch.utils.data.DataLoader(Slow(100), batch_size=None, num_workers=2, worker_init_fn=at_worker_start))
            pid = next(loader)[0]
            time.sleep(0.5)  # the worker has put its first item and is loading the next
            os.kill(os.getpid(), signal.SIGTERM)  # SLURM's SIGTERM at a requeue ...
            os.kill(pid, signal.SIGKILL)  # ... and srun's kill, which a worker meets first
            for item in loader:
                pass
        print("not reached")
        """
    )
    assert done.returncode == 255, done.stdout + done.stderr  # submitit's exit after a requeue: no result
    assert "handler: SIGTERM" in done.stdout and "not reached" not in done.stdout
    assert re.search(
        r"(?m)^WARNING SIGTERM received from the scheduler; RuntimeError: DataLoader worker \(pid(\(s\))? \d+\) "
        r"(exited unexpectedly|is killed by signal: Killed\.), raised after it, is part of the job's end: exiting "
        r"without a result, as a requeued job does$",  # torch says either, by which of its checks sees it first
        done.stdout,
    ), done.stdout
    assert "Traceback" not in done.stderr, done.stderr


def test_without_a_signal_an_exception_is_the_run_s_own_and_is_raised_as_it_is():
    done = python(
        """
        signal.signal(signal.SIGTERM, bypass)
        with scheduler_signals():
            raise RuntimeError("the run's own error")
        """
    )
    assert done.returncode == 1 and done.stderr.strip().splitlines()[-1] == "RuntimeError: the run's own error"


def test_workers_start_with_the_signals_blocked_and_ignore_them_while_the_training_process_keeps_its_handlers():
    done = python(
        """
        signal.signal(signal.SIGTERM, bypass)
        signal.signal(signal.SIGUSR2, bypass)
        with scheduler_signals() as received:
            items = list(torch.utils.data.DataLoader(Items(), batch_size=None, num_workers=2, worker_init_fn=at_worker_start))
            print("workers:", sorted(set(tuple(item[1:3]) + (tuple(item[3]),) for item in items)))
            print("training process blocks:", blocked())
            os.kill(os.getpid(), signal.SIGUSR2)
            print("received:", [signal.Signals(number).name for number in received])
        print("after:", signal.getsignal(signal.SIGUSR2) is bypass)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("worker starts with blocked: ['SIGTERM', 'SIGUSR2']") == 2, done.stdout
    ignored = str(signal.SIG_IGN)
    assert f"workers: [('{ignored}', '{ignored}', ())]" in done.stdout  # ignored, then unblocked
    assert "training process blocks: []" in done.stdout and "handler: SIGUSR2" in done.stdout
    assert "received: ['SIGUSR2']" in done.stdout and "after: True" in done.stdout


def test_a_signal_held_while_the_job_starts_reaches_the_handler_once_it_exists():
    held = python(
        """
        hold()
        os.kill(os.getpid(), signal.SIGUSR2)  # before any handler: USR2's default would end the process
        print("still here", flush=True)
        signal.signal(signal.SIGUSR2, bypass)
        with scheduler_signals() as received:
            print("received:", [signal.Signals(number).name for number in received])
        """
    )
    assert held.returncode == 0, held.stderr
    assert held.stdout.splitlines() == [
        "still here",
        "WARNING SIGUSR2 came while the job was starting, before its handlers existed: handled now",
        "handler: SIGUSR2",
        "received: ['SIGUSR2']",
    ]
    unheld = python("os.kill(os.getpid(), signal.SIGUSR2)\nprint('still here')")
    assert unheld.returncode == -12 and "still here" not in unheld.stdout  # what the hold prevents


# submitit's USR2 handler after its requeue: it exits without a result (sys.exit(-1))
TIMED_OUT = """
def timed_out(signum, frame):
    print("handler:", signal.Signals(signum).name, flush=True)
    sys.exit(-1)
"""


def test_a_signal_that_comes_during_a_fork_is_handled_after_it_where_its_exit_is_not_lost():
    """A DataLoader forks its workers with the signals blocked; one that came meanwhile was
    delivered when the fork's hook unblocked them, and its handler ran inside that hook, where
    Python prints an exception and drops it: the exit of submitit's USR2 handler was lost and the
    requeued job trained on until SLURM killed it (seen in ``make test-slurm``'s time-limit job).
    Here the signal comes during a real fork (sent by a fork hook that runs while the signals are
    blocked); the handler runs once the fork has returned, and its exit leaves the block."""
    done = python(
        TIMED_OUT
        + textwrap.dedent(
            """
        os.register_at_fork(before=lambda: os.kill(os.getpid(), signal.SIGUSR2))  # runs inside the guard's window
        signal.signal(signal.SIGUSR2, timed_out)
        try:
            with scheduler_signals() as received:
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                print("the fork returned", flush=True)
                os.waitpid(pid, 0)
                print("not reached", flush=True)
        finally:
            print("received:", [signal.Signals(number).name for number in received], flush=True)
            """
        )
    )
    assert done.returncode == 255, done.stdout + done.stderr  # the handler's exit, not lost
    assert done.stdout.splitlines() == ["handler: SIGUSR2", "received: ['SIGUSR2']"], done.stdout
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_handler_python_would_run_inside_a_fork_hook_is_deferred_until_the_fork_returns():
    """The other way a handler can run inside a fork: the signal reached another thread while the
    forking one blocked it, and the next Python fork hook (logging registers one) runs the handler.
    The hook here calls the installed handler as Python would; it runs once, after the fork."""
    done = python(
        TIMED_OUT
        + textwrap.dedent(
            """
        os.register_at_fork(before=lambda: signal.getsignal(signal.SIGUSR2)(signal.SIGUSR2, None))
        signal.signal(signal.SIGUSR2, timed_out)
        with scheduler_signals() as received:
            print("forking", flush=True)
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            print("not reached", flush=True)
            """
        )
    )
    assert done.returncode == 255, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["forking", "handler: SIGUSR2"], done.stdout
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
