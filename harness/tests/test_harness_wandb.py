import pytest
from omegaconf import OmegaConf

from rambo.harness.wandb_run import decide_mode, start_run, wandb_keys


def test_mode_is_decided_before_init(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    assert decide_mode("auto") == "offline"
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert decide_mode("auto") == "online"  # a key in ~/.netrc (what `wandb login` writes)
    (tmp_path / ".netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert decide_mode("auto") == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert decide_mode("auto") == "disabled"
    assert decide_mode("offline") == "offline"
    assert start_run("disabled", "p", "g", "n", {}, tmp_path) is None
    with pytest.raises(ValueError, match="wandb.mode"):
        decide_mode("sometimes")


def test_an_offline_run_is_resumed_by_its_id(monkeypatch, tmp_path):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    first = start_run("offline", "p", "g", "n", {"a": 1}, tmp_path)
    run_id = first.id
    first.log({"x": 1}, step=1)
    first.finish()
    again = start_run("offline", "p", "g", "n", {"a": 1}, tmp_path, run_id=run_id)
    assert again.id == run_id
    again.finish()


def test_one_set_of_wandb_keys_serves_both_apps():
    """``wandb_keys``: lambda and margin from the loss group (``loss.lam``, ``loss.margin``), where
    both apps' rank losses have them; a loss without them reports its module's own, inside a memory
    when one wraps it (configs shaped as the apps' composed ones)."""

    def config(data, loss):
        return OmegaConf.create({"seed": 1, "data": {"name": data}, "loss": loss})

    retrieval_rambo = config(
        "sop",
        {
            "name": "rambo_log",
            "margin": 0.0,
            "lam": 4.0,
            "tau": 3,
            "module": {"tau": 3, "loss": {"margin": 0.0, "lam": 4.0}},
        },
    )
    assert wandb_keys(retrieval_rambo, "retrieval") == {
        "task": "retrieval",
        "dataset": "sop",
        "loss_name": "rambo_log",
        "lambda": 4.0,
        "margin": 0.0,
        "tau": 3,
        "seed": 1,
    }
    contrastive = config("sop", {"name": "contrastive", "module": {"margin": 0.5}})  # its own margin, no lambda
    assert wandb_keys(contrastive, "retrieval") == {
        "task": "retrieval",
        "dataset": "sop",
        "loss_name": "contrastive",
        "lambda": None,
        "margin": 0.5,
        "tau": None,
        "seed": 1,
    }
    fastap = config("cub", {"name": "fastap", "module": {"tau": 0, "loss": {"bins": 10}}})
    assert (wandb_keys(fastap, "retrieval")["lambda"], wandb_keys(fastap, "retrieval")["margin"]) == (None, None)
    detection_rambo = config(
        "voc07",
        {"name": "rambo", "margin": 0.15, "lam": 0.5, "tau": 7, "module": {"margin": 0.15, "lam": 0.5, "tau": 7}},
    )
    assert wandb_keys(detection_rambo, "detection") == {
        "task": "detection",
        "dataset": "voc07",
        "loss_name": "rambo",
        "lambda": 0.5,
        "margin": 0.15,
        "tau": 7,
        "seed": 1,
    }
    ce = config("voc07", {"name": "ce", "module": {"_target_": "CrossEntropyClassifierLoss"}})
    assert wandb_keys(ce, "detection") == {
        "task": "detection",
        "dataset": "voc07",
        "loss_name": "ce",
        "lambda": None,
        "margin": None,
        "tau": None,
        "seed": 1,
    }
