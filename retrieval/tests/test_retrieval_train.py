import json
import math

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from rambo.harness.checkpoint import load_checkpoint
from rambo.harness.wandb_run import wandb_keys
from rambo.retrieval import evaluate
from rambo.retrieval.engine import select_protocols
from rambo.retrieval.model import build_model
from rambo.retrieval.train import CONFIG_DIR, train

torch.set_num_threads(1)
EXPERIMENTS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))
GROUPS = ("data", "model", "loss", "experiment", "profile")
OPTIONS = [(group, p.stem) for group in GROUPS for p in sorted((CONFIG_DIR / group).glob("*.yaml"))]


def compose_config(overrides):
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=overrides)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def tiny(data_dir, out, *extra):
    return compose_config(["profile=tiny", f"data_dir={data_dir}", f"output_dir={out}", "wandb.mode=disabled", *extra])


def test_tiny_run_writes_metrics_curve_and_checkpoints(data_dir, tmp_path):
    cfg = tiny(data_dir, tmp_path)
    metrics = train(cfg)
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    assert metrics["complete"] and metrics["epochs_trained"] == 2
    for protocol in ("paper_protocol", "fair_protocol"):
        assert {"R@1", "R@2", "R@4", "MAP@R", "R-precision", "epoch", "description"} <= metrics[protocol].keys()
        assert 0.0 <= metrics[protocol]["R@1"] <= 1.0
    curve = json.loads((tmp_path / "curve.json").read_text())
    assert [row["epoch"] for row in curve] == [1, 2]
    assert all("test/R@1" in row and "validation/R@1" in row for row in curve)  # eval_every = 1
    assert (tmp_path / "checkpoint.pt").is_file() and (tmp_path / "best_validation.pt").is_file()
    assert not list(tmp_path.glob("*.tmp"))

    # the evaluate CLI on the final checkpoint reproduces the last test evaluation
    out = tmp_path / "eval.json"
    root = str(data_dir / "synthetic_tiny")
    cli = evaluate.main(
        [
            "--checkpoint",
            str(tmp_path / "checkpoint.pt"),
            "--dataset",
            "synthetic",
            "--root",
            root,
            "--ks",
            "1",
            "2",
            "4",
            "--out",
            str(out),
        ]
    )
    assert json.loads(out.read_text()) == cli
    assert cli["R@1"] == pytest.approx(curve[-1]["test/R@1"])


def test_tiny_run_reads_images_from_disk_without_in_memory(data_dir, tmp_path):
    """``data.in_memory=false`` (the paper's datasets): images read from disk and augmented one at a time."""
    metrics = train(tiny(data_dir, tmp_path, "data.in_memory=false", "epochs=1", "scheduler.milestones=[1]"))
    assert metrics["complete"] and 0.0 <= metrics["paper_protocol"]["R@1"] <= 1.0


def test_resume_after_a_kill_reaches_the_same_final_metrics(data_dir, tmp_path):
    extra = ["epochs=3", "scheduler.milestones=[2]", "eval_every=1"]
    uninterrupted = train(tiny(data_dir, tmp_path / "a", *extra))
    # "killed" after epoch 1 (the checkpoint of epoch 1 is on disk), then resumed
    partial = train(tiny(data_dir, tmp_path / "b", *extra, "max_epochs_this_run=1"))
    assert not partial["complete"] and partial["epochs_trained"] == 1
    resumed = train(tiny(data_dir, tmp_path / "b", *extra, "resume=true"))
    assert resumed == uninterrupted
    a = load_checkpoint(tmp_path / "a" / "checkpoint.pt")  # weights_only=True
    b = load_checkpoint(tmp_path / "b" / "checkpoint.pt")
    for name, tensor in a["state"]["model"].items():
        torch.testing.assert_close(b["state"]["model"][name], tensor, rtol=0, atol=0, msg=name)
    assert len(b["state"]["loss"]["_extra_state"]["batches"]) == 3  # the RaMBO score memory travels too
    assert set(b["rng"]) >= {"python", "numpy", "torch"}


def test_resume_refuses_a_checkpoint_of_another_configuration(data_dir, tmp_path):
    train(tiny(data_dir, tmp_path, "max_epochs_this_run=1"))
    with pytest.raises(ValueError, match=r"different configuration \(seed: 0 -> 1\)"):
        train(tiny(data_dir, tmp_path, "resume=true", "seed=1"))
    with pytest.raises(
        ValueError, match=r"epochs: 2 -> 3"
    ):  # a longer run is another run (its schedule and evaluations differ)
        train(tiny(data_dir, tmp_path, "resume=true", "epochs=3"))
    # keys in resume_may_change (paths, device, W&B, the early stop) may change
    moved = tmp_path / "moved_data"
    moved.mkdir()
    (data_dir / "synthetic_tiny").rename(moved / "synthetic_tiny")
    try:
        assert train(tiny(moved, tmp_path, "resume=true", "num_workers=0", "threads=1"))["complete"]
    finally:
        (moved / "synthetic_tiny").rename(data_dir / "synthetic_tiny")


def test_resuming_a_finished_run_rewrites_the_same_metrics_and_curve(data_dir, tmp_path):
    """A pipeline stage rerun after its outputs were deleted must write them again. The finished
    run's checkpoint holds no optimiser or scheduler state (Adam's is twice the weights)."""
    train(tiny(data_dir, tmp_path))
    finished = load_checkpoint(tmp_path / "checkpoint.pt")
    assert set(finished["state"]) == {"model", "loss"} and finished["finished"] is True
    assert not (tmp_path / "checkpoint.prev.pt").exists()
    checkpoint = (tmp_path / "checkpoint.pt").read_bytes()
    before = {name: (tmp_path / name).read_text() for name in ("metrics.json", "curve.json")}
    for name in before:
        (tmp_path / name).unlink()
    train(tiny(data_dir, tmp_path, "resume=auto"))
    assert {name: (tmp_path / name).read_text() for name in before} == before
    assert (tmp_path / "checkpoint.pt").read_bytes() == checkpoint


def test_resume_auto_sets_a_checkpoint_of_another_configuration_aside(data_dir, tmp_path):
    """The pipeline's mode: a changed parameter restarts the run instead of failing the stage."""
    fresh = train(tiny(data_dir, tmp_path / "fresh", "seed=1"))
    train(tiny(data_dir, tmp_path / "run", "max_epochs_this_run=1"))
    restarted = train(tiny(data_dir, tmp_path / "run", "resume=auto", "seed=1"))
    assert (tmp_path / "run" / "checkpoint.pt.stale").is_file()
    assert restarted == fresh


def test_epochs_zero_evaluates_the_untrained_model_and_names_only_files_it_wrote(data_dir, tmp_path, caplog):
    """The baseline users want: no training, one evaluation, no checkpoint."""
    import logging

    with caplog.at_level(logging.INFO):
        metrics = train(tiny(data_dir, tmp_path, "epochs=0"))
    assert metrics["complete"] and metrics["epochs_trained"] == 0
    assert metrics["paper_protocol"]["epoch"] == 0 and 0.0 <= metrics["paper_protocol"]["R@1"] <= 1.0
    assert not (tmp_path / "checkpoint.pt").exists()
    assert "evaluating the untrained model" in caplog.text and "checkpoint.pt" not in caplog.text
    assert str(tmp_path / "metrics.json") in caplog.text


def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_finite_checkpoint(data_dir, tmp_path, monkeypatch):
    train(tiny(data_dir, tmp_path, "max_epochs_this_run=1"))
    kept = (tmp_path / "checkpoint.pt").read_bytes()
    import rambo.retrieval.train as train_module

    def nan_loss(*args, **kwargs):
        raise FloatingPointError("non-finite loss at epoch 2/2, step 1: nan")

    monkeypatch.setattr(train_module, "train_one_epoch", nan_loss)
    with pytest.raises(
        FloatingPointError,
        match=r"diverged in epoch 2: nothing of that epoch was saved, and .*checkpoint.pt "
        r"\(epoch 1, the last with a finite loss\) is kept to resume from",
    ):
        train(tiny(data_dir, tmp_path, "resume=true"))
    assert (tmp_path / "checkpoint.pt").read_bytes() == kept


def test_the_engine_names_a_non_finite_loss_before_stepping():
    from rambo.harness.engine_options import EngineOptions
    from rambo.retrieval.engine import train_one_epoch

    model = torch.nn.Linear(2, 2)
    before = model.weight.detach().clone()
    batch = (torch.randn(4, 2), torch.tensor([0, 0, 1, 1]), torch.arange(4))
    loss_fn = torch.nn.Module()
    loss_fn.forward = lambda embeddings, labels: embeddings.sum() * float("nan")
    with pytest.raises(FloatingPointError, match="non-finite loss at epoch 3, step 1: nan"):
        train_one_epoch(
            model,
            [batch],
            loss_fn,
            torch.optim.SGD(model.parameters(), lr=1.0),
            options=EngineOptions(device="cpu", description="epoch 3"),
        )
    assert torch.equal(model.weight, before)  # no step taken with it


def test_a_loss_override_of_a_row_needs_a_name_of_its_own(data_dir, tmp_path):
    """The bug this guards against: `experiment=sop_log loss=contrastive` wrote into the RaMBO run's folder
    and W&B group."""
    import subprocess
    import sys

    common = [
        sys.executable,
        "-m",
        "rambo.retrieval.train",
        "experiment=synthetic_log",
        "loss=contrastive",
        "profile=tiny",
        f"data_dir={data_dir}",
        "wandb.mode=disabled",
        "epochs=0",
        "progress=false",
    ]
    refused = subprocess.run(
        [*common, f"hydra.run.dir={tmp_path / 'a'}"], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert refused.returncode != 0
    assert "is another row, but it would keep the name 'synthetic_log'" in refused.stderr
    assert "experiment_name=synthetic_log_contrastive" in refused.stderr
    named = subprocess.run(
        [*common, "experiment_name=synthetic_contrastive_mine", f"hydra.run.dir={tmp_path / 'b'}"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert named.returncode == 0, named.stderr
    assert json.loads((tmp_path / "b" / "metrics.json").read_text())["experiment"] == "synthetic_contrastive_mine"


def test_a_new_run_refuses_to_overwrite_another_in_its_folder(data_dir, tmp_path):
    from rambo.harness.resume import RunExistsError

    train(tiny(data_dir, tmp_path, "max_epochs_this_run=1"))
    with pytest.raises(
        RunExistsError, match=r"holds another run \(.*loss.name: 'rambo_log' -> 'contrastive'.*experiment_name="
    ):
        train(tiny(data_dir, tmp_path, "loss=contrastive"))
    with pytest.raises(RunExistsError, match="holds this run already"):
        train(tiny(data_dir, tmp_path))
    assert train(tiny(data_dir, tmp_path, "resume=true"))["complete"]


@pytest.mark.parametrize(("group", "option"), OPTIONS)
def test_every_option_of_every_group_composes(group, option):
    cfg = compose_config([f"{group}={option}", "output_dir=x"])
    assert cfg.experiment_name and cfg.loss.module._target_ and cfg.data.format and cfg.model.backbone


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_config_runs_one_step(experiment, data_dir, tmp_path):
    cfg = tiny(data_dir, tmp_path, f"experiment={experiment}", "epochs=1", "steps_per_epoch=1", "two_pass_chunk_size=3")
    metrics = train(cfg)
    assert metrics["epochs_trained"] == 1 and 0.0 <= metrics["paper_protocol"]["R@1"] <= 1.0


def test_experiment_configs_carry_the_paper_settings():
    rows = {
        "sop_log": (3e-6, 0.02, 4.0, "log"),
        "cub_log": (5e-6, 0.02, 0.2, "log"),
        "inshop_loglog": (1e-5, 0.05, 0.2, "loglog"),
    }
    for experiment, (lr, margin, lam, weighting) in rows.items():
        cfg = compose_config([f"experiment={experiment}", "profile=paper", "output_dir=x"])
        assert cfg.optimizer.lr == lr and cfg.optimizer.weight_decay == 4e-4 and cfg.batch_size == 128
        assert (
            cfg.loss.margin == margin and cfg.loss.lam == lam
        )  # the loss group's, as detection's (Table 9 per dataset)
        assert cfg.loss.module.loss.margin == margin and cfg.loss.module.loss.lam == lam
        assert "margin" not in cfg.data and "lam" not in cfg.data
        assert wandb_keys(cfg, "retrieval") == {
            "task": "retrieval",
            "dataset": experiment.split("_")[0],
            "loss_name": cfg.loss.name,
            "lambda": lam,
            "margin": margin,
            "tau": 3,
            "seed": 0,
        }
        assert cfg.loss.module.loss.weighting == weighting and cfg.loss.module.tau == 3
        assert cfg.epochs == 80 and list(cfg.scheduler.milestones) == [35] and cfg.scheduler.gamma == 0.3
        assert cfg.model.backbone == "resnet50" and cfg.model.embedding_dim == 512


def test_the_no_margin_ablation_is_loss_margin_zero():
    """Table 7's 'No margin' rows set ``loss.margin: 0.0``, what ``loss.margin=0`` on the command line
    sets; lambda stays the dataset's (Table 9)."""
    row = compose_config(["experiment=cub_loglog_no_margin", "profile=paper", "output_dir=x"])
    command_line = compose_config(["experiment=cub_loglog", "loss.margin=0", "profile=paper", "output_dir=x"])
    for cfg in (row, command_line):
        assert cfg.loss.margin == 0.0 and cfg.loss.module.loss.margin == 0.0 and cfg.loss.module.loss.lam == 0.2
    assert cfg.data.table9.margin == 0.02  # the dataset's value, which the override replaced


def test_a_checkpoint_of_margin_and_lambda_under_data_still_resumes(data_dir, tmp_path):
    """Before margin and lambda joined the loss group, a checkpoint's config (and identity) had them as
    ``data.margin`` and ``data.lam``, and no ``loss.margin`` / ``loss.lam`` / ``data.table9``. Such a
    checkpoint, written by the harness's checkpoint writer with the run's real states, resumes the run
    at the same values (``identity_renamed``) to the uninterrupted run's metrics, and is refused by a
    run at another margin."""
    from omegaconf import OmegaConf

    from rambo.harness.checkpoint import save_checkpoint
    from rambo.harness.resume import run_identity
    from rambo.harness.run import placeless

    uninterrupted = train(tiny(data_dir, tmp_path / "a"))
    cfg = tiny(data_dir, tmp_path / "b", "max_epochs_this_run=1")
    train(cfg)
    old = OmegaConf.to_container(cfg, resolve=True)  # the config in the old layout, the values unchanged
    old["data"].update(margin=old["loss"].pop("margin"), lam=old["loss"].pop("lam"))
    del old["data"]["table9"], old["identity_renamed"]
    old["resume_may_change"] = [
        key for key in old["resume_may_change"] if key not in ("identity_renamed", "data.table9")
    ]
    identity = run_identity(old, old["resume_may_change"], old["identity_defaults"])
    assert identity["data.margin"] == 0.02 and identity["data.lam"] == 4.0 and "loss.margin" not in identity
    state = load_checkpoint(tmp_path / "b" / "checkpoint.pt")
    save_checkpoint({**state, "config": placeless(old), "identity": identity}, tmp_path / "b" / "checkpoint.pt")

    with pytest.raises(
        ValueError, match=r"different configuration \(loss.margin: 0.02 -> 0.0, loss.module.loss.margin"
    ):
        train(tiny(data_dir, tmp_path / "b", "resume=true", "loss.margin=0.0"))
    with pytest.raises(ValueError, match=r"loss.lam: 4.0 -> 0.2"):
        train(tiny(data_dir, tmp_path / "b", "resume=true", "data.table9.lam=0.2"))  # the default it reads, changed
    assert train(tiny(data_dir, tmp_path / "b", "resume=true")) == uninterrupted


def test_slurm_launcher_config_composes():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["hydra/launcher=slurm", "output_dir=x"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("SlurmLauncher")
    assert cfg.hydra.launcher.gpus_per_node == 1


def test_protocols_pick_best_test_and_best_validation():
    history = [
        {"epoch": 2, "validation": {"R@1": 0.5}, "test": {"R@1": 0.3}},
        {"epoch": 4, "validation": {"R@1": 0.7}, "test": {"R@1": 0.2}},
        {"epoch": 6, "validation": {"R@1": 0.6}, "test": {"R@1": 0.4}},
    ]
    chosen = select_protocols(history)
    assert chosen["paper_protocol"]["epoch"] == 6 and chosen["paper_protocol"]["R@1"] == 0.4
    assert chosen["fair_protocol"]["epoch"] == 4 and chosen["fair_protocol"]["R@1"] == 0.2


def _tiny_inshop(root):
    """list_eval_partition.txt (count, header, rows) + img/<GENDER>/<Category>/<item>/ images."""
    from PIL import Image

    rows = []
    categories = ["MEN/Denim", "MEN/Tees", "WOMEN/Dresses", "WOMEN/Skirts"]
    for c, category in enumerate(categories):
        for i in range(6):
            item = f"id_{c:03d}{i:05d}"
            statuses = ["train"] * 3 if i < 4 else ["query", "gallery", "gallery"]
            for j, status in enumerate(statuses):
                name = f"img/{category}/{item}/{j:02d}_front.jpg"
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                Image.new("RGB", (20, 20), (40 * c + 10 * j, 30 * i, 90)).save(root / name)
                rows.append(f"{name:<60}{item} {status}")
    (root / "list_eval_partition.txt").write_text(
        "\n".join([str(len(rows)), "image_name item_id evaluation_status", *rows]) + "\n"
    )


def test_inshop_row_trains_and_evaluates_query_against_gallery(tmp_path):
    _tiny_inshop(tmp_path / "inshop")
    cfg = tiny(
        tmp_path,
        tmp_path / "out",
        "experiment=inshop_log",
        "data.format=inshop",
        f"data.root={tmp_path / 'inshop'}",
        "data.generate=null",
        "epochs=1",
    )
    metrics = train(cfg)
    assert list(cfg.data.ks) == [1, 2, 4, 10, 100, 1000] and metrics["complete"]  # the tiny profile's K
    # 8 query items with one query each: R@K is a multiple of 1/8
    for k in (1, 2, 4):
        assert (metrics["paper_protocol"][f"R@{k}"] * 8) == pytest.approx(
            round(metrics["paper_protocol"][f"R@{k}"] * 8)
        )
    assert metrics["paper_protocol"]["R@4"] >= metrics["paper_protocol"]["R@1"]


def test_collapse_warning_names_the_split_and_what_to_try():
    from rambo.retrieval.engine import COLLAPSE_COSINE, collapse_warning

    spread = {"validation": {"R@1": 0.5, "mean_cosine": 0.998}, "test": {"R@1": 0.4, "mean_cosine": 0.5}}
    warning = collapse_warning(spread)
    assert "mean pairwise cosine 0.9980 on the validation split" in warning and "loss.margin" in warning
    assert collapse_warning({"test": {"mean_cosine": 0.995}}).count("on the test split") == 1  # no validation split
    assert (
        collapse_warning({"validation": {"mean_cosine": COLLAPSE_COSINE - 1e-3}, "test": {"mean_cosine": 1.0}}) is None
    )


def test_every_evaluation_records_the_spread_and_a_collapse_is_logged(data_dir, tmp_path, caplog, monkeypatch):
    import logging

    from rambo.retrieval import engine
    from rambo.retrieval import train as train_module

    monkeypatch.setattr(
        train_module, "collapse_warning", lambda record: engine.collapse_warning(record, threshold=-1.0)
    )
    with caplog.at_level(logging.WARNING):
        train(tiny(data_dir, tmp_path, "epochs=1", "scheduler.milestones=[1]"))
    curve = json.loads((tmp_path / "curve.json").read_text())
    assert all(-1.0 <= curve[-1][f"{split}/mean_cosine"] <= 1.0 for split in ("test", "validation"))
    assert "epoch 1: the embedding has collapsed: mean pairwise cosine" in caplog.text


def test_the_gpu_engine_sums_losses_on_the_device_and_reads_them_once(data_dir, tmp_path, monkeypatch):
    """Where a host read is not free (a GPU) the epoch's loss is one read; on the CPU the
    path is forced here, and the epoch's mean loss is the per-step path's."""
    from rambo.retrieval import engine

    extra = ("epochs=1", "scheduler.milestones=[1]")
    per_step = train(tiny(data_dir, tmp_path / "host", *extra))
    monkeypatch.setattr(engine, "reads_every_step", lambda device: False)
    once = train(tiny(data_dir, tmp_path / "device", *extra))
    host_curve = json.loads((tmp_path / "host" / "curve.json").read_text())
    device_curve = json.loads((tmp_path / "device" / "curve.json").read_text())
    assert device_curve[0]["loss"] == pytest.approx(host_curve[0]["loss"], rel=1e-9)
    assert once["paper_protocol"]["R@1"] == per_step["paper_protocol"]["R@1"]


def spied_run(cfg, monkeypatch):
    """Train ``cfg``, recording what reaches the loss (its input's dtype, whether autocast is on), what
    the embedding layer outputs (in training or evaluation, its dtype) and the memory format of the
    image batches reaching the model; returns ``(metrics, records, the model)``."""
    from rambo.retrieval import train as train_module

    records, built = {"loss_inputs": [], "layer_outputs": [], "channels_last_batches": []}, []

    def spied_model(model_cfg):
        model = build_model(model_cfg)
        model.embedding.register_forward_hook(
            lambda module, args, out: records["layer_outputs"].append((module.training, out.dtype))
        )
        model.register_forward_pre_hook(
            lambda module, args: records["channels_last_batches"].append(
                args[0].is_contiguous(memory_format=torch.channels_last)
            )
        )
        built.append(model)
        return model

    def spied_loss(loss_cfg):
        loss_fn = instantiate(loss_cfg)
        loss_fn.register_forward_pre_hook(
            lambda module, args: records["loss_inputs"].append((args[0].dtype, torch.is_autocast_enabled("cpu")))
        )
        return loss_fn

    monkeypatch.setattr(train_module, "build_model", spied_model)
    monkeypatch.setattr(train_module, "instantiate", spied_loss)
    return train(cfg), records, built[0]


@pytest.mark.parametrize("two_pass_chunk_size", ["null", 3])
def test_bfloat16_runs_the_forward_under_autocast_and_the_rank_loss_in_float32(
    data_dir, tmp_path, monkeypatch, two_pass_chunk_size
):
    """``precision=bfloat16``: the network's layers compute in bf16 (training and evaluation), the
    RaMBO loss gets float32 embeddings outside autocast (bf16 cosine scores would tie), in the
    one-pass and the two-pass path alike; ``float32`` (the default) has no autocast."""
    extra = ("epochs=1", "scheduler.milestones=[1]", f"two_pass_chunk_size={two_pass_chunk_size}")
    metrics, records, _ = spied_run(tiny(data_dir, tmp_path / "bf16", *extra, "precision=bfloat16"), monkeypatch)
    assert records["loss_inputs"] and set(records["loss_inputs"]) == {(torch.float32, False)}
    assert {training for training, _ in records["layer_outputs"]} == {True, False}  # training and evaluation
    assert {dtype for _, dtype in records["layer_outputs"]} == {torch.bfloat16}
    loss = json.loads((tmp_path / "bf16" / "curve.json").read_text())[0]["loss"]
    assert math.isfinite(loss) and 0.0 <= metrics["paper_protocol"]["R@1"] <= 1.0
    _, records, _ = spied_run(tiny(data_dir, tmp_path / "fp32", *extra), monkeypatch)
    assert set(records["loss_inputs"]) == {(torch.float32, False)}
    assert {dtype for _, dtype in records["layer_outputs"]} == {torch.float32}


def test_an_unknown_precision_is_refused_by_name(data_dir, tmp_path):
    with pytest.raises(ValueError, match="precision must be one of float32, bfloat16; got 'float16'"):
        train(tiny(data_dir, tmp_path, "precision=float16"))


@pytest.mark.outcome
@pytest.mark.parametrize("loss", ["rambo_recall_log", "contrastive"])
def test_channels_last_trains_to_the_loss_of_the_contiguous_layout(data_dir, tmp_path, monkeypatch, loss):
    """``channels_last=true``: conv weights and image batches in channels-last memory format; the
    same numbers up to float rounding. Measured (2 epochs of the tiny profile, seeds 0-2, both
    losses; 1 thread under ATEN_CPU_CAPABILITY default, avx2 and avx512, and 2 threads): relative
    difference of the epoch losses at most 4.4e-7 (0 for RaMBO's, a function of the ranks only,
    which the rounding did not change), of the final weights (to each tensor's largest entry) at
    most 7.2e-6; the tolerances are 10x those."""
    extra = (f"loss={loss}",)
    _, records, _ = spied_run(tiny(data_dir, tmp_path / "contiguous", *extra), monkeypatch)
    assert records["channels_last_batches"] and not any(records["channels_last_batches"])
    _, records, model = spied_run(tiny(data_dir, tmp_path / "channels_last", *extra, "channels_last=true"), monkeypatch)
    assert records["channels_last_batches"] and all(records["channels_last_batches"])  # training and evaluation batches
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(
        c.weight.is_contiguous(memory_format=torch.channels_last) and not c.weight.is_contiguous() for c in convs
    )
    contiguous, channels_last = (
        json.loads((tmp_path / run / "curve.json").read_text()) for run in ("contiguous", "channels_last")
    )
    for a, b in zip(contiguous, channels_last, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=4.4e-6, abs=0)
    a, b = (
        load_checkpoint(tmp_path / run / "checkpoint.pt")["state"]["model"] for run in ("contiguous", "channels_last")
    )
    for name, weight in a.items():
        if weight.is_floating_point():
            assert (b[name] - weight).abs().max() <= 7.2e-5 * weight.abs().max(), name
