"""TrainingRun: the run's life, with a toy model (the apps' own tests run it for real)."""

import json
import random
import re

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from rambo.harness.run import TrainingRun


def config(out, **extra):
    return OmegaConf.create(
        {
            "seed": 0,
            "experiment_name": "toy",
            "output_dir": str(out),
            "metrics_path": f"{out}/metrics.json",
            "curve_path": f"{out}/curve.json",
            "checkpoint_path": f"{out}/checkpoint.pt",
            "resume": False,
            "resume_may_change": ["resume", "max_epochs_this_run", "wandb"],
            "max_epochs_this_run": None,
            "lr": 0.1,
            "wandb": {"mode": "disabled", "project": "p"},
            **extra,
        }
    )


def train(cfg, epochs=3):
    torch.manual_seed(cfg.seed)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    run = TrainingRun(cfg, {"model": model, "optimizer": optimizer}, extra={"seen": 0})
    for epoch in run.epochs(epochs):
        x = torch.randn(8, 3)  # drawn from the global generator: a resume must restore it
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        run.extra["seen"] += 8
        run.end_epoch({"epoch": epoch, "loss": float(loss.detach())}, epochs)
    return run.finish({"epochs": run.epoch, "seen": run.extra["seen"], "weight": model.weight.tolist()})


def test_a_killed_run_resumes_to_the_same_result(tmp_path):
    straight = train(config(tmp_path / "a"))
    partial = train(config(tmp_path / "b", max_epochs_this_run=1))
    assert partial["epochs"] == 1
    torch.manual_seed(123)  # whatever happened in between
    resumed = train(config(tmp_path / "b", resume=True))
    assert resumed == straight and resumed["seen"] == 24
    assert json.loads((tmp_path / "b" / "curve.json").read_text()) == json.loads(
        (tmp_path / "a" / "curve.json").read_text()
    )
    assert json.loads((tmp_path / "b" / "metrics.json").read_text()) == straight


def test_another_configuration_is_refused_or_set_aside(tmp_path):
    train(config(tmp_path, max_epochs_this_run=1))
    with pytest.raises(ValueError, match=r"lr: 0.1 -> 0.2"):
        train(config(tmp_path, resume=True, lr=0.2))
    restarted = train(config(tmp_path, resume="auto", lr=0.2))
    assert restarted["epochs"] == 3 and (tmp_path / "checkpoint.pt.stale").is_file()
    with pytest.raises(ValueError, match="resume must be one of"):
        train(config(tmp_path, resume="sometimes"))


def test_the_curve_file_has_the_same_keys_in_every_record(tmp_path):
    """DVC's plots fail on records with different keys (an evaluation every few epochs)."""
    from rambo.harness.run import homogeneous

    assert homogeneous([{"epoch": 1, "loss": 2.0}, {"epoch": 2, "loss": 1.0, "test/R@1": 0.5}]) == [
        {"epoch": 1, "loss": 2.0, "test/R@1": None},
        {"epoch": 2, "loss": 1.0, "test/R@1": 0.5},
    ]


def test_timings_are_logged_but_kept_out_of_the_curve_file(tmp_path, caplog):
    """The curve is a tracked DVC output: a rerun of an unchanged run must leave it byte-identical."""
    cfg = config(tmp_path)
    model = torch.nn.Linear(3, 1)
    run = TrainingRun(cfg, {"model": model}, untracked_keys=("seconds",))
    with caplog.at_level("INFO", logger="rambo"):
        for epoch in run.epochs(2):
            run.end_epoch({"epoch": epoch, "loss": 1.0 / epoch, "seconds": 0.5 * epoch}, 2)
        run.finish({"done": True})
    assert json.loads((tmp_path / "curve.json").read_text()) == [{"epoch": 1, "loss": 1.0}, {"epoch": 2, "loss": 0.5}]
    assert "seconds" in caplog.text
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["curve"] == [
        {"epoch": 1, "loss": 1.0},
        {"epoch": 2, "loss": 0.5},
    ]


def test_the_same_run_in_two_folders_writes_byte_identical_checkpoints(tmp_path):
    """DVC hashes the checkpoints (dvc.lock): neither the run's folder (absolute under
    Hydra), nor the temporary file's random name, nor a timing may reach the checkpoint's bytes."""

    def make(out, seconds):
        random.seed(0), np.random.seed(0), torch.manual_seed(0)  # the random states are checkpointed
        cfg = config(out.resolve())  # where the files are may change, as in the apps' configs
        cfg.resume_may_change += ["output_dir", "metrics_path", "curve_path", "checkpoint_path"]
        run = TrainingRun(cfg, {"model": torch.nn.Linear(3, 1)}, untracked_keys=("seconds",))
        for epoch in run.epochs(2):
            run.end_epoch({"epoch": epoch, "loss": 1.0 / epoch, "seconds": seconds * epoch}, 2)
        run.finish({"done": True})
        return (out / "checkpoint.pt").read_bytes()

    first, second = make(tmp_path / "a", 0.5), make(tmp_path / "elsewhere" / "b", 7.25)
    assert first == second
    saved = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)
    assert saved["config"]["lr"] == 0.1 and not {"output_dir", "metrics_path", "curve_path", "checkpoint_path"} & set(
        saved["config"]
    )
    assert str(tmp_path) not in first.decode("latin-1")


def test_a_non_finite_epoch_loss_saves_nothing_and_says_what_is_kept(tmp_path):
    cfg = config(tmp_path)
    train(cfg, epochs=1)
    kept = (tmp_path / "checkpoint.pt").read_bytes()
    run = TrainingRun(config(tmp_path, resume=True, max_epochs_this_run=None), {"model": torch.nn.Linear(3, 1)})
    with pytest.raises(
        FloatingPointError,
        match=r"epoch 2: mean loss inf.*diverged in epoch 2.*\(epoch 1, the last with a finite loss\)",
    ):
        run.end_epoch({"epoch": 2, "loss": float("inf")}, 2)
    assert (tmp_path / "checkpoint.pt").read_bytes() == kept and run.epoch == 1


def test_wandb_runs_carry_flat_keys_a_profile_group_and_the_headline_summary(tmp_path, monkeypatch):
    """A dashboard filters by flat keys; mini and paper runs of one experiment never share a group."""
    from rambo.harness import run as run_module

    started = []

    class FakeRun:
        id, summary = "abc", {}

        def log(self, row, step):
            pass

        def finish(self):
            pass

    def fake_start_run(mode, project, group, name, config, directory, job_type="train", run_id=None):
        started.append({"group": group, "name": name, "config": config})
        return FakeRun()

    monkeypatch.setattr(run_module, "start_run", fake_start_run)
    cfg = config(tmp_path, profile_name="mini")
    model = torch.nn.Linear(3, 1)
    keys = {
        "task": "retrieval",
        "dataset": "sop",
        "loss_name": "rambo_log",
        "lambda": 4.0,
        "margin": 0.02,
        "tau": 3,
        "seed": 0,
    }
    run = TrainingRun(cfg, {"model": model}, wandb_keys=keys)
    run.end_epoch({"epoch": 1, "loss": 0.5}, 1)
    run.finish({"epochs": 1}, headline={"R@1": 0.7})
    (only,) = started
    assert only["group"] == "mini/toy" and only["name"] == "toy-seed0"
    assert {k: only["config"][k] for k in keys} == keys and only["config"]["profile"] == "mini"
    assert FakeRun.summary["R@1"] == 0.7 and FakeRun.summary["epochs"] == 1
    assert (
        run_module.wandb_group(None, "toy") == "toy" and run_module.wandb_group("paper", "sop_log") == "paper/sop_log"
    )


def test_a_key_added_at_its_identity_default_resumes_an_older_checkpoint(tmp_path):
    """The run reads ``identity_defaults`` (listed in ``resume_may_change``): a checkpoint written
    before ``precision`` existed resumes at ``float32`` and is refused at ``bfloat16``."""
    may_change = ["resume", "resume_may_change", "max_epochs_this_run", "wandb"]  # it lists itself, as the apps' do
    train(config(tmp_path, max_epochs_this_run=1, resume_may_change=may_change))
    added = {"resume_may_change": [*may_change, "identity_defaults"], "identity_defaults": {"precision": "float32"}}
    with pytest.raises(ValueError, match=r"precision: None -> 'bfloat16'"):
        train(config(tmp_path, resume=True, precision="bfloat16", **added))
    assert train(config(tmp_path, resume=True, precision="float32", **added))["epochs"] == 3
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["identity"]
    assert "precision" not in saved and "identity_defaults.precision" not in saved


def test_an_offline_wandb_run_keeps_its_id_beside_the_checkpoint_and_resumes_it(tmp_path, monkeypatch):
    """W&B draws a random run id, so the id lives in ``checkpoint.pt.wandb-id`` (ignored by git
    and DVC), not in the checkpoint. Two makings of one run with W&B offline write byte-identical
    checkpoints, and a resumed run continues its W&B run (the real ``wandb``, offline)."""
    pytest.importorskip("wandb")
    from rambo.harness.run import wandb_id_path

    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)

    def make(out, **extra):
        random.seed(0), np.random.seed(0), torch.manual_seed(0)
        cfg = config(out, wandb={"mode": "offline", "project": "p"}, **extra)
        cfg.resume_may_change += ["output_dir", "metrics_path", "curve_path", "checkpoint_path"]
        return train(cfg, epochs=2)

    make(tmp_path / "a")
    make(tmp_path / "b", max_epochs_this_run=1)
    first_id = wandb_id_path(tmp_path / "b" / "checkpoint.pt").read_text().strip()
    assert first_id and first_id != wandb_id_path(tmp_path / "a" / "checkpoint.pt").read_text().strip()
    make(tmp_path / "b", resume=True)
    assert wandb_id_path(tmp_path / "b" / "checkpoint.pt").read_text().strip() == first_id
    offline_runs = sorted(p.name for p in (tmp_path / "b" / "wandb").glob("offline-run-*"))
    # W&B's folder per invocation: offline-run-<time>-<id>, with "-1" added when one second holds two
    assert len(offline_runs) == 2 and all(re.search(rf"-{first_id}(-\d+)?$", name) for name in offline_runs)
    make(tmp_path / "c")  # the same run as "a", made again: another W&B id, the same checkpoint
    assert (
        wandb_id_path(tmp_path / "c" / "checkpoint.pt").read_text()
        != wandb_id_path(tmp_path / "a" / "checkpoint.pt").read_text()
    )
    assert (tmp_path / "a" / "checkpoint.pt").read_bytes() == (tmp_path / "c" / "checkpoint.pt").read_bytes()
    assert "wandb_id" not in torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)


def test_a_checkpoint_that_holds_its_wandb_id_still_resumes_that_wandb_run(tmp_path):
    """Checkpoints written before the side file keep ``wandb_id`` inside: it is still continued."""
    from rambo.harness.run import saved_wandb_id, wandb_id_path

    checkpoint = tmp_path / "checkpoint.pt"
    assert saved_wandb_id(checkpoint, {"wandb_id": "old123"}) == "old123"
    assert saved_wandb_id(checkpoint, {}) is None
    wandb_id_path(checkpoint).write_text("new456\n")
    assert saved_wandb_id(checkpoint, {"wandb_id": "old123"}) == "new456"


def cut_in_half(path):
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    return path.read_bytes()


def test_a_damaged_checkpoint_is_set_aside_and_the_run_continues_from_the_epoch_before(tmp_path, caplog):
    from rambo.harness.checkpoint import DamagedCheckpoint

    straight = train(config(tmp_path / "a"))
    out = tmp_path / "b"
    train(config(out, max_epochs_this_run=2))
    assert torch.load(out / "checkpoint.prev.pt")["epoch"] == 1
    damaged = cut_in_half(out / "checkpoint.pt")
    for policy in (True, False):
        with pytest.raises(DamagedCheckpoint) as caught:
            train(config(out, resume=policy))
        assert str(caught.value) == (
            f"{out / 'checkpoint.pt'} is a damaged checkpoint ({caught.value.reason}); run again with resume=auto to "
            "set it aside (renamed checkpoint.pt.damaged) and continue from checkpoint.prev.pt, the checkpoint of "
            "the epoch before, or move it away yourself"
        )
    with caplog.at_level("WARNING"):
        resumed = train(config(out, resume="auto"))
    recovery = resumed.pop("checkpoint_recovery")
    assert resumed == straight  # epochs 2 and 3 trained again from epoch 1's checkpoint
    assert recovery == [
        {
            "damaged_checkpoint": "checkpoint.pt.damaged",
            "damage": recovery[0]["damage"],
            "resumed_from": "checkpoint.prev.pt",
            "resumed_epoch": 1,
        }
    ]
    assert json.loads((out / "metrics.json").read_text())["checkpoint_recovery"] == recovery
    assert (out / "checkpoint.pt.damaged").read_bytes() == damaged  # kept as it was
    assert torch.load(out / "checkpoint.pt")["epoch"] == 3 and not (out / "checkpoint.prev.pt").exists()  # finished
    assert f"{out / 'checkpoint.pt'} is a damaged checkpoint (" in caplog.text
    assert f"continuing from {out / 'checkpoint.prev.pt'} (epoch 1)" in caplog.text


def test_a_damaged_checkpoint_without_an_earlier_one_starts_the_run_afresh(tmp_path, caplog):
    straight = train(config(tmp_path / "a"))
    out = tmp_path / "b"
    train(config(out, max_epochs_this_run=2))
    (out / "checkpoint.pt").write_bytes(b"garbage")
    damaged_previous = cut_in_half(out / "checkpoint.prev.pt")  # the earlier one is damaged too
    with caplog.at_level("WARNING"):
        resumed = train(config(out, resume="auto"))
    recovery = resumed.pop("checkpoint_recovery")
    assert resumed == straight
    assert [(r["damaged_checkpoint"], r["resumed_from"], r["resumed_epoch"]) for r in recovery] == [
        ("checkpoint.pt.damaged", None, 0)
    ]
    assert (out / "checkpoint.pt.damaged").read_bytes() == b"garbage"
    assert (out / "checkpoint.prev.pt.damaged").read_bytes() == damaged_previous
    assert f"no earlier checkpoint to continue from: {out / 'checkpoint.pt'} trains from the start" in caplog.text
    # a second damage keeps the first one's file too; the run had finished, so no earlier checkpoint is kept
    assert not (out / "checkpoint.prev.pt").exists()
    (out / "checkpoint.pt").write_bytes(b"garbage again")
    again = train(config(out, resume="auto"))
    assert [(r["damaged_checkpoint"], r["resumed_from"]) for r in again["checkpoint_recovery"]] == [
        ("checkpoint.pt.damaged.1", None)
    ]
    assert (out / "checkpoint.pt.damaged").read_bytes() == b"garbage"
    assert (out / "checkpoint.pt.damaged.1").read_bytes() == b"garbage again"


def test_a_finished_runs_checkpoint_drops_the_optimiser_and_resumes_to_the_same_outputs(tmp_path):
    """While it trains, a run's checkpoint holds the optimiser state and the one of the epoch before
    is kept beside it; the last epoch's holds what evaluating and resuming need, without them."""
    out = tmp_path / "run"
    train(config(out, max_epochs_this_run=2))
    training = torch.load(out / "checkpoint.pt", weights_only=True)
    assert set(training["state"]) == {"model", "optimizer"} and "finished" not in training
    assert (out / "checkpoint.prev.pt").is_file()
    straight = train(config(tmp_path / "straight"))
    assert train(config(out, resume=True)) == straight
    finished = torch.load(out / "checkpoint.pt", weights_only=True)
    assert set(finished["state"]) == {"model"} and finished["finished"] is True
    assert {"epoch", "curve", "extra", "rng", "config", "identity"} <= finished.keys() and finished["epoch"] == 3
    assert not (out / "checkpoint.prev.pt").exists()
    torch.testing.assert_close(
        torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=True)["state"],
        finished["state"],
        rtol=0,
        atol=0,
    )

    outputs = {name: (out / name).read_bytes() for name in ("metrics.json", "curve.json", "checkpoint.pt")}
    for name in ("metrics.json", "curve.json"):
        (out / name).unlink()
    torch.manual_seed(123)
    assert train(config(out, resume="auto")) == straight  # nothing to train: the same results written again
    assert {name: (out / name).read_bytes() for name in outputs} == outputs
    assert sorted(path.name for path in out.iterdir()) == ["checkpoint.pt", "curve.json", "metrics.json"]


def test_a_finished_checkpoint_cannot_train_further_epochs(tmp_path):
    train(config(tmp_path), epochs=2)
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    with pytest.raises(ValueError) as caught:
        train(config(tmp_path, resume=True), epochs=3)
    assert str(caught.value) == (
        f"{tmp_path / 'checkpoint.pt'} is the checkpoint of a finished run (2 epochs), kept without its optimiser "
        "and scheduler state: it cannot train on to epoch 3; train a new run (another experiment_name, or "
        "resume=false to start over)"
    )
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before
