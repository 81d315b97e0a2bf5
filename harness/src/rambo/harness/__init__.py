"""rambo.harness: the run plumbing both training apps (retrieval, detection) share.

One concept per module: ``atomic`` (files written whole), ``checkpoint`` (every RNG, loaded with
``weights_only=True``), ``resume`` (the ``false`` / ``true`` / ``auto`` policy and the run identity), ``claim`` (one
run per folder, whatever the timing),
``wandb_run`` (mode decided before ``wandb.init``; start or resume a run), ``runtime`` (device,
seed, threads), ``precision`` (bfloat16 autocast, channels-last), ``engine_options`` (the
engines' device, autocast, channels-last and progress as one object), ``distributed`` (torchrun / SLURM set-up), ``download`` and ``extract`` (staged,
checked, safe), ``pretrained`` (ImageNet weights from a file or the torchvision cache), ``weights`` (the
weights files a profile's rows load, SHA-256 checked before any job), ``workers`` (DataLoader workers leave SLURM's USR2 to the training process), ``provenance`` (what made
a run: code, libraries, machine, threads, profile) and ``run_log`` (one summary line per epoch;
progress bars only on a terminal).
"""

__version__ = "0.1.0"
