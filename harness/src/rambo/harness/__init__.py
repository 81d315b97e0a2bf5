"""rambo.harness: the run plumbing both training apps (retrieval, detection) share.

One concept per module: `atomic` (files written whole), `checkpoint` (every RNG, loaded with
`weights_only=True`), `resume` (the `false` / `true` / `auto` policy and the run identity), `claim` (one
run per folder, whatever the timing),
`wandb_run` (mode decided before `wandb.init`; start or resume a run), `runtime` (device,
seed, threads), `precision` (bfloat16 autocast, channels-last), `engine_options` (the
engines' device, autocast, channels-last and progress as one object), `distributed` (torchrun / SLURM set-up),
`download` and `extract` (staged, checked, safe), `pretrained` (ImageNet weights from a file or the torchvision cache),
`weights` (the weights files a profile's rows load, SHA-256 checked before any job), `workers` (DataLoader workers leave
SLURM's USR2 to the training process), `scheduler_signals` (a preempted or timed-out job leaves for its requeue, never
as a failed run; a signal while it starts waits for the handlers), `provenance` (what made
a run: code, libraries, numerics, threads, profile), `numerics` (the portable or native numerics mode: the
same results on every x86-64 CPU, or this CPU's fastest kernels) and `run_log` (one summary line per epoch;
progress bars only on a terminal).

Importing this package sets the numerics mode's environment
([`numerics.set_environment`][rambo.harness.numerics.set_environment])
before torch or numpy load: every app package (retrieval, detection, figures, ablations) imports it
first.
"""

__version__ = "0.1.0"

from .numerics import set_environment as _set_numerics_environment

_set_numerics_environment()

from .scheduler_signals import hold_while_job_starts as _hold_while_job_starts  # noqa: E402 (after the numerics)

# In a submitit job this import comes while its call is unpickled, before submitit installs its
# handlers: the scheduler's signals wait for them (rambo.harness.scheduler_signals).
_hold_while_job_starts()
