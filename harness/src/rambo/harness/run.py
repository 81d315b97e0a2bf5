"""The life of one training run, the same for every app: resume (or not) under the resume policy,
one checkpoint and one learning-curve record per epoch, W&B mirroring, and the metrics at the end.

An app builds its objects (model, optimizer, scheduler, loss, ...), hands the ones with a
`state_dict` to [`TrainingRun`][rambo.harness.run.TrainingRun], and loops over
[`TrainingRun.epochs`][rambo.harness.run.TrainingRun.epochs]:

```python
run = TrainingRun(cfg, {"model": model, "optimizer": optimizer}, is_main=setup.is_main)
for epoch in run.epochs(cfg.epochs):
    row = {"epoch": epoch, "loss": train_one_epoch(...)}
    run.end_epoch(row)
run.finish({"experiment": ..., "AP50": ...})
```

The config keys it reads: `seed`, `experiment_name`, `output_dir`, `metrics_path`, `headline_path` (optional),
`curve_path`, `checkpoint_path`, `resume`, `resume_may_change`, `identity_defaults` and `identity_renamed` (optional;
[`resume`][rambo.harness.resume]), `max_epochs_this_run`, `profile_name` (optional) and
`wandb.{mode, project, job_type}`. Only the main process writes files and talks to W&B.
Before anything is written, the main process claims the run's folders (output, checkpoint, metrics and curve folders:
[`claim`][rambo.harness.claim]; the folder Hydra made for the job is claimed already, before Hydra wrote there, and that
claim is kept), so that two runs given one folder cannot overwrite each other; the claims are given back in
[`TrainingRun.finish`][rambo.harness.run.TrainingRun.finish] (and at exit). Holding them, it removes the temporary files
a killed write left there ([`atomic.remove_stale_temporaries`][rambo.harness.atomic.remove_stale_temporaries]).
A file at the checkpoint path that is no checkpoint of this app
([`TrainingRun.foreign`][rambo.harness.run.TrainingRun.foreign]: another app's, or no run's) is neither continued nor
overwritten ([`resume`][rambo.harness.resume]).
Each epoch's checkpoint replaces the one before, which is kept as `checkpoint.prev.pt`
([`checkpoint.keep_as_previous`][rambo.harness.checkpoint.keep_as_previous]): under `resume=auto` a damaged checkpoint
is set aside and the run continues from that one ([`resume`][rambo.harness.resume]); the metrics then say so
(`checkpoint_recovery`).
The checkpoint of the last epoch is the finished run's: it keeps what evaluating the run and resuming it again need
(weights, score memories, random states, curve, `extra`, identity) and leaves out the state of the optimisers and
learning-rate schedulers ([`training_only`][rambo.harness.run.training_only]: Adam's is twice the weights), marked
`"finished": True`; `checkpoint.prev.pt` is removed then (it serves the recovery of a run still training). Resuming a
finished run trains nothing and writes its results again; a finished checkpoint cannot train further epochs (one error
line says so).
With several processes (torchrun, SLURM tasks) every process's own state is checkpointed too, in `"processes"` (one
entry per rank): the extra state of its modules (`get_extra_state`: the score memories and a loss's own generator, which
are each process's own under `global_batch=False`) and its random states; each process resumes with its own.
W&B: one run per seed in the group `<profile>/<experiment>` ([`wandb_group`][rambo.harness.run.wandb_group]), its config
the run's flat `wandb_keys` (task, dataset, loss_name, lambda, margin, tau, seed: what a dashboard filters on) beside
`profile` and the whole config, its summary the headline numbers and metrics.
A resumed run continues its W&B run: the id is kept in a file beside the checkpoint
([`wandb_id_path`][rambo.harness.run.wandb_id_path]), not in it, because W&B draws a random id per run and a checkpoint
must be the same bytes whenever the same run is made again (DVC hashes it).
The metrics and the W&B config carry the run's provenance ([`provenance`][rambo.harness.provenance]: code, libraries,
machine, threads, profile).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from .atomic import remove_stale_temporaries, write_json, write_text
from .checkpoint import (
    DeviceCountMismatch,
    keep_as_previous,
    previous_path,
    rng_states,
    save_checkpoint,
    set_rng_states,
)
from .claim import claim_folders
from .distributed import barrier, gather_to_main, rank, world_size
from .job_files import job_started
from .provenance import run_provenance
from .resume import NotThisAppsCheckpoint, ResumeRefused, check_policy, checkpoint_to_resume, run_identity, shown_keys
from .run_log import log_done, log_epoch
from .wandb_run import start_run

log = logging.getLogger(__name__)


def homogeneous(records: list[dict]) -> list[dict]:
    """Every record with every key (`None` where a record lacks one), keys in order of first
    appearance: DVC's plots fail on a list whose records differ in keys (retrieval evaluates only
    every `eval_every` epochs), and render it fine this way."""
    keys = list(dict.fromkeys(key for record in records for key in record))
    return [{key: record.get(key) for key in keys} for record in records]


#: The config keys that say where this run's own files are (absolute paths under Hydra):
#: left out of the config a checkpoint holds, which is read for what the run was (model, data).
RUN_FILE_KEYS = ("output_dir", "metrics_path", "headline_path", "curve_path", "checkpoint_path")


def wandb_id_path(checkpoint_path: str | Path) -> Path:
    """Where a run keeps its W&B run id: `<checkpoint>.wandb-id` beside the checkpoint (git and DVC
    ignore it: `.gitignore`, `.dvcignore`)."""
    checkpoint_path = Path(checkpoint_path)
    return checkpoint_path.with_name(checkpoint_path.name + ".wandb-id")


def saved_wandb_id(checkpoint_path: str | Path, state: Mapping) -> str | None:
    """The W&B run id to continue when resuming `state` from `checkpoint_path`: the side file's,
    else the one a checkpoint written before the side file existed holds, else `None` (a new W&B run)."""
    try:
        return wandb_id_path(checkpoint_path).read_text().strip() or None
    except FileNotFoundError:
        return state.get("wandb_id")


def placeless(config: Mapping) -> dict:
    """`config` without `RUN_FILE_KEYS`: what a checkpoint keeps of its run's config, so
    that the same run made in another folder or clone writes a byte-identical checkpoint."""
    return {key: value for key, value in config.items() if key not in RUN_FILE_KEYS}


def training_only(target) -> bool:
    """Whether `target`'s state serves further training only (an optimiser, a learning-rate
    scheduler): a finished run's checkpoint leaves it out."""
    return isinstance(target, (torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler))


#: What every checkpoint `TrainingRun` writes holds (`processes` too, with several processes).
CHECKPOINT_KEYS = ("state", "epoch", "curve", "extra", "rng", "identity")

#: The suffix of a module's extra state in its `state_dict` (`torch.nn.Module.get_extra_state`).
EXTRA_STATE = "_extra_state"


def own_state(stateful: Mapping) -> dict:
    """This process's own state: the extra state of every module in `stateful` (score memories, a
    loss's generator: `{name: {key: state}}`) and its random states, on the CPU."""
    modules = {}
    for name, target in stateful.items():
        if isinstance(target, torch.nn.Module):
            extra = {key: value for key, value in target.state_dict().items() if key.endswith(EXTRA_STATE)}
            if extra:
                modules[name] = extra
    return _on_cpu({"state": modules, "rng": rng_states()})


def _on_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {key: _on_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(item) for item in value)
    return value


def wandb_group(profile: str | None, experiment: str) -> str:
    """The W&B group of a run: `<profile>/<experiment>`, so mini and paper runs of one experiment
    never share a group (one group per table row and profile)."""
    return f"{profile}/{experiment}" if profile else experiment


class TrainingRun:
    """Resume, per-epoch checkpoint + curve + W&B, final metrics (see the module docstring).

    `stateful` maps names to objects with `state_dict` / `load_state_dict`; `extra` is
    app data carried across a resume (e.g. the list of evaluations), restored into
    `extra` and saved from it (nothing machine-dependent such as timings: it is checkpointed). `summary_keys`: the keys
    of a curve record shown in the per-epoch log line (all of them when `None`). `untracked_keys`: keys of a record that
    depend on the machine (timings): logged and sent to W&B, kept out of the curve file and out of
    the checkpoint, which DVC tracks and which must not change when an unchanged run is made again
    (so a resumed run's earlier records lack them). `identity_extra`:
    facts outside the config that make a run another run (e.g. the MD5 of the weights it starts
    from), added to the identity a resumed checkpoint must match. `device`: where the run
    computes, for its provenance (build it after the thread count is set). `app`: the command
    that trains (`rambo.retrieval.train`), as a refused checkpoint's message names it.
    """

    def __init__(
        self,
        cfg: DictConfig,
        stateful: Mapping,
        extra: dict | None = None,
        is_main: bool = True,
        summary_keys: tuple[str, ...] | None = None,
        untracked_keys: tuple[str, ...] = (),
        identity_extra: Mapping | None = None,
        device=None,
        wandb_keys: Mapping | None = None,
        app: str = "this app",
    ):
        check_policy(cfg.resume)
        self.summary_keys, self.untracked_keys = summary_keys, frozenset(untracked_keys)
        self.cfg, self.stateful, self.is_main = cfg, dict(stateful), is_main
        self.config = OmegaConf.to_container(cfg, resolve=True)
        identity = run_identity(self.config, cfg.resume_may_change, self.config.get("identity_defaults"))
        self.identity = {**identity, **dict(identity_extra or {})}
        self.provenance = run_provenance(cfg.get("profile_name"), device)
        self.checkpoint_path = Path(cfg.checkpoint_path)
        self.epoch, self.curve, self.extra, wandb_id = 0, [], dict(extra or {}), None
        self.claims = []
        if is_main:  # before anything is written or set aside: one run per folder (rambo.harness.claim)
            folders = [
                cfg.output_dir,
                self.checkpoint_path.parent,
                Path(cfg.metrics_path).parent,
                Path(cfg.curve_path).parent,
            ]
            self.claims = claim_folders(folders, f"{cfg.experiment_name} seed {cfg.seed}")
            stale = [path for claim in self.claims for path in remove_stale_temporaries(claim.folder)]
            if cfg.get("headline_path"):  # a folder shared with other runs (seeds): this run's file only
                headline = Path(cfg.headline_path)
                stale += remove_stale_temporaries(headline.parent, {headline.name})
            for path in stale:  # this run's folders and files now: a temporary file there is a killed write's
                log.info("removed %s, left by a write that was killed", path)
        self.recovery: list[dict] = []  # damaged checkpoints set aside (resume=auto), for the metrics
        resume = {
            "path": self.checkpoint_path,
            "policy": cfg.resume,
            "identity": self.identity,
            "set_aside": is_main,
            "may_change": cfg.resume_may_change,
            "renames": self.config.get("identity_renamed"),
            "config": self.config,
            "defaults": self.config.get("identity_defaults"),
            "recovered": self.recovery,
            "app": app,
            "foreign": self.foreign,
        }
        state = checkpoint_to_resume(**resume) if is_main else None
        barrier()  # the other processes read the checkpoint the main one kept (or set aside)
        if not is_main:
            state = checkpoint_to_resume(**resume)
        self.finished = False  # resumed from a finished run's checkpoint (no optimiser state)
        if state is not None:
            self.recovery[:0] = state.get("recovery", [])
            self.finished = bool(state.get("finished", False))
            own = self._saved_own_state(state)
            for name, target in self.stateful.items():
                if name in state["state"]:
                    target.load_state_dict({**state["state"][name], **own["state"].get(name, {})})
                elif not (self.finished and training_only(target)):
                    raise NotThisAppsCheckpoint(self.checkpoint_path, f"it holds no state of {name!r}", app)
            try:
                set_rng_states(own["rng"])
            except DeviceCountMismatch as error:
                raise DeviceCountMismatch(f"{self.checkpoint_path}: {error}") from None
            self.epoch, self.curve = state["epoch"], state["curve"]
            wandb_id = saved_wandb_id(self.checkpoint_path, state) if is_main else None
            self.extra.update(state["extra"])
        self.wandb = None
        if is_main:
            profile = cfg.get("profile_name")
            self.wandb = start_run(
                cfg.wandb.mode,
                cfg.wandb.project,
                group=wandb_group(profile, cfg.experiment_name),
                name=f"{cfg.experiment_name}-seed{cfg.seed}",
                config={**dict(wandb_keys or {}), "profile": profile, **self.config, "provenance": self.provenance},
                directory=cfg.output_dir,
                job_type=cfg.wandb.get("job_type", "train"),
                run_id=wandb_id,
            )
            if self.wandb is not None:  # before any checkpoint it belongs to (also an older checkpoint's id)
                job_started()  # this run's files from here: a refusal now leaves Hydra's files and the log
                write_text(wandb_id_path(self.checkpoint_path), f"{self.wandb.id}\n")

    def foreign(self, state: Mapping) -> str | None:
        """Why `state`, loaded from the checkpoint path, is no checkpoint of this app (`None`: it
        is one): it lacks what every checkpoint of [`TrainingRun`][rambo.harness.run.TrainingRun] holds
        (`CHECKPOINT_KEYS`), or the state it holds is of other objects than this app's (another app's checkpoint)."""
        missing = [key for key in CHECKPOINT_KEYS if key not in state]
        if missing:
            return f"it holds a dict of {shown_keys(state)}, without the {', '.join(missing)} of a run"
        saved = state["state"]
        if not isinstance(saved, Mapping):
            return f"its state is a {type(saved).__name__}"
        finished = bool(state.get("finished", False))
        needed = {name for name, target in self.stateful.items() if not (finished and training_only(target))}
        if not needed <= set(saved) <= set(self.stateful):
            return (
                f"it holds the state of {', '.join(map(repr, sorted(saved))) or 'nothing'}, "
                f"where this app's checkpoints hold {', '.join(map(repr, sorted(needed)))}"
            )
        return None

    def epochs(self, total: int) -> Iterator[int]:
        """The epochs (1-based) this invocation trains: from the one after the checkpoint's up to
        `total`, at most `max_epochs_this_run` of them (job time limits)."""
        if self.finished and total > self.epoch:
            self.release()
            raise ResumeRefused(
                f"{self.checkpoint_path} is the checkpoint of a finished run ({self.epoch} epochs), kept without "
                f"its optimiser and scheduler state: it cannot train on to epoch {total}; train a new run "
                "(another experiment_name, or resume=false to start over)"
            )
        job_started()  # the run writes its own files from here (rambo.harness.job_files.restore_job_files)
        limit = self.cfg.get("max_epochs_this_run")
        last = total if limit is None else min(total, self.epoch + int(limit))
        yield from range(self.epoch + 1, last + 1)

    def diverged(self, error: BaseException) -> FloatingPointError:
        """The error to raise when training produced a non-finite loss: says what is kept."""
        kept = (
            f"{self.checkpoint_path} (epoch {self.epoch}, the last with a finite loss) is kept to resume from"
            if self.epoch and self.checkpoint_path.exists()
            else "no checkpoint was written"
        )
        return FloatingPointError(
            f"{error}. The run diverged in epoch {self.epoch + 1}: nothing of that epoch was saved, and {kept}. "
            "Lower the learning rate (or check the data) and run again."
        )

    def end_epoch(self, row: dict, total: int) -> None:
        """Record `row` (with its `"epoch"`), checkpoint, write the curve, log, mirror to W&B.
        A non-finite `row["loss"]` saves nothing and raises [`diverged`][rambo.harness.run.TrainingRun.diverged]."""
        loss = row.get("loss")
        if isinstance(loss, (int, float)) and not math.isfinite(loss):
            raise self.diverged(ValueError(f"epoch {row['epoch']}: mean loss {loss}"))
        self.epoch = row["epoch"]
        self.curve.append(row)
        finished = self.epoch >= total
        processes = gather_to_main(own_state(self.stateful)) if world_size() > 1 else None
        if self.is_main:
            state = {
                "state": {
                    name: target.state_dict()
                    for name, target in self.stateful.items()
                    if not (finished and training_only(target))
                },
                "epoch": self.epoch,
                "curve": self._tracked_curve(),
                "extra": self.extra,
                "rng": rng_states(),
                "config": placeless(self.config),
                "identity": self.identity,
            }
            if processes is not None:  # only then: a single process's checkpoint keeps its bytes
                state["processes"] = processes
            if finished:
                state["finished"] = True
            if self.recovery:  # only then: an undisturbed run's checkpoint keeps its bytes
                state["recovery"] = self.recovery
            if finished:  # a kill during this write leaves the last two checkpoints as they were
                save_checkpoint(state, self.checkpoint_path)
                previous_path(self.checkpoint_path).unlink(missing_ok=True)
            else:
                keep_as_previous(self.checkpoint_path)
                save_checkpoint(state, self.checkpoint_path)
            self._write_curve()
            shown = [k for k in row if k != "epoch" and (self.summary_keys is None or k in self.summary_keys)]
            log_epoch(self.epoch, total, {k: row[k] for k in shown})
            if self.wandb is not None:
                self.wandb.log(row, step=self.epoch)
        barrier()

    def _saved_own_state(self, state: Mapping) -> dict:
        """This process's own state in `state` ([`own_state`][rambo.harness.run.own_state]): its entry of `"processes"`
        when the checkpoint was written by as many processes as this run has, else the main process's
        (a checkpoint of one process; or of another number of processes: said in the log)."""
        processes = state.get("processes")
        if processes is not None and len(processes) == world_size():
            return processes[rank()]
        if processes is not None and self.is_main:
            log.warning(
                "%s holds the score memories and random states of %d processes, this run has %d: "
                "every process resumes with those of process 0",
                self.checkpoint_path,
                len(processes),
                world_size(),
            )
        return processes[0] if processes else {"state": {}, "rng": state["rng"]}

    def _tracked_curve(self) -> list[dict]:
        return [
            {key: value for key, value in record.items() if key not in self.untracked_keys} for record in self.curve
        ]

    def _write_curve(self) -> None:
        write_json(self.cfg.curve_path, homogeneous(self._tracked_curve()))

    def finish(self, metrics: dict, headline: Mapping | None = None, log_extra: Mapping | None = None) -> dict:
        """Write the curve (also when a resumed run had no epoch left), `metrics` (with the run's
        `provenance` added: the machine of this invocation, which finished the run) and, at
        `headline_path`, the `headline` numbers (what `dvc metrics show` lists: a few
        machine-independent numbers per run); close W&B; log the headline and `log_extra`
        (e.g. throughput, which belongs in the log, not in tracked files)."""
        metrics = {**metrics, "provenance": self.provenance}
        if self.recovery:
            metrics["checkpoint_recovery"] = self.recovery
        if self.is_main:
            self._write_curve()
            write_json(self.cfg.metrics_path, metrics)
            if headline is not None and self.cfg.get("headline_path"):
                write_json(self.cfg.headline_path, dict(headline))
            if self.wandb is not None:
                self.wandb.summary.update(dict(headline or {}))  # the run's headline numbers, as dvc metrics lists them
                for key, value in metrics.items():
                    if isinstance(value, dict):
                        self.wandb.summary.update(
                            {f"{key}/{k}": v for k, v in value.items() if not isinstance(v, (dict, list))}
                        )
                    elif not isinstance(value, list):
                        self.wandb.summary[key] = value
                self.wandb.finish()
            outputs = {
                "metrics": self.cfg.metrics_path,
                "curve": self.cfg.curve_path,
                "checkpoint": self.checkpoint_path,
            }
            outputs = {
                name: path for name, path in outputs.items() if Path(path).exists()
            }  # epochs=0 writes no checkpoint
            log_done({**(headline or {}), **(log_extra or {})}, outputs)
        self.release()
        return metrics

    def release(self) -> None:
        """Give back the claims of the run's folders ([`finish`][rambo.harness.run.TrainingRun.finish] does; also done
        at exit)."""
        for claim in self.claims:
            claim.release()
        self.claims = []
