"""``eval_batch_size``: evaluation's own batch, independent of the training batch."""

import json

import torch
from hydra import compose, initialize_config_dir

from rambo.harness.resume import run_identity
from rambo.retrieval.model import EmbeddingNet
from rambo.retrieval.train import CONFIG_DIR, train

torch.set_num_threads(1)


def compose_config(overrides):
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=overrides)


def test_paper_rows_evaluate_at_256_and_the_small_profiles_at_their_training_batch():
    for row in ("sop_log", "sop_recallk_simix", "cub_recallk_simix"):
        cfg = compose_config([f"experiment={row}", "profile=paper"])
        assert cfg.eval_batch_size == 256, row
    assert compose_config(["experiment=sop_recallk_simix", "profile=paper"]).batch_size == 4000
    for profile in ("mini", "tiny", "smoke"):
        cfg = compose_config([f"profile={profile}"])
        assert cfg.eval_batch_size == cfg.batch_size, profile  # as evaluated before the key existed


def test_the_eval_batch_size_is_not_part_of_the_run_identity():
    from omegaconf import OmegaConf

    identities = []
    for size in (7, 256):
        cfg = compose_config(["profile=tiny", "output_dir=x", f"eval_batch_size={size}"])
        identities.append(
            run_identity(OmegaConf.to_container(cfg, resolve=True), cfg.resume_may_change, cfg.identity_defaults)
        )
    assert identities[0] == identities[1] and "eval_batch_size" not in identities[0]


def test_a_tiny_run_evaluates_in_batches_of_eval_batch_size(tmp_path):
    """Every eval-mode forward of the embedding net in a real tiny run sees at most
    ``eval_batch_size`` images (and the first one exactly that many); training keeps its batch."""
    seen = {"train": set(), "eval": []}

    def record(module, inputs):
        if isinstance(module, EmbeddingNet):
            (seen["train"].add if module.training else seen["eval"].append)(inputs[0].shape[0])

    hook = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        cfg = compose_config(
            [
                "profile=tiny",
                f"data_dir={tmp_path / 'data'}",
                f"output_dir={tmp_path / 'run'}",
                "wandb.mode=disabled",
                "epochs=1",
                "scheduler.milestones=[1]",
                "eval_batch_size=5",
            ]
        )
        metrics = train(cfg)
    finally:
        hook.remove()
    assert metrics["complete"] and json.loads((tmp_path / "run" / "metrics.json").read_text()) == metrics
    assert seen["train"] == {8}  # the tiny profile's training batch
    assert seen["eval"] and max(seen["eval"]) == 5 and seen["eval"][0] == 5
