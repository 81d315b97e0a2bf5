"""DataLoader workers leave SLURM's USR2 to the training process (rambo.harness.workers)."""

import signal

import torch

from rambo.harness.workers import worker_init


class HandlerOfUSR2(torch.utils.data.Dataset):
    """Each item is what USR2 and TERM do in the process that loads it."""

    def __len__(self):
        return 4

    def __getitem__(self, index):
        return str(signal.getsignal(signal.SIGUSR2)), str(signal.getsignal(signal.SIGTERM))


def test_forked_workers_ignore_usr2_while_the_training_process_keeps_its_handler():
    def handler(signum, frame):  # stands in for submitit's: installed before the workers fork
        raise AssertionError("not called")

    previous = signal.signal(signal.SIGUSR2, handler), signal.getsignal(signal.SIGTERM)
    try:
        dataset = HandlerOfUSR2()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a plain local run: TERM at its default
        plain = [tuple(item) for item in torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)]
        ignored = [
            tuple(item)
            for item in torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, worker_init_fn=worker_init)
        ]
        assert set(plain) == {(str(handler), str(signal.SIG_DFL))}  # what a fork inherits without worker_init
        assert set(ignored) == {(str(signal.SIG_IGN), str(signal.SIG_DFL))}  # TERM stays at its default
        signal.signal(signal.SIGTERM, handler)  # under submitit: TERM handled in Python too
        ignored = [
            tuple(item)
            for item in torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, worker_init_fn=worker_init)
        ]
        assert set(ignored) == {(str(signal.SIG_IGN), str(signal.SIG_IGN))}
        assert signal.getsignal(signal.SIGUSR2) is handler and signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGUSR2, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
