import pytest

from rambo.harness.checkpoint import load_checkpoint, save_checkpoint
from rambo.harness.resume import RunExistsError, check_policy, checkpoint_to_resume, renamed, run_identity


def test_identity_leaves_out_the_keys_that_may_change():
    config = {"seed": 0, "epochs": 8, "wandb": {"mode": "offline"}, "data": {"root": "/a", "lam": 4.0}, "device": "cpu"}
    identity = run_identity(config, ["wandb", "data.root", "device"])
    assert identity == {"seed": 0, "epochs": 8, "data.lam": 4.0}


def test_policies(tmp_path):
    path = tmp_path / "checkpoint.pt"
    identity = {"seed": 0, "epochs": 2}
    assert checkpoint_to_resume(path, True, identity) is None  # nothing to resume: start
    save_checkpoint({"identity": identity, "epoch": 1}, path)
    with pytest.raises(RunExistsError, match="holds this run already"):  # a new run never overwrites one
        checkpoint_to_resume(path, False, identity)
    assert checkpoint_to_resume(path, True, identity)["epoch"] == 1
    assert checkpoint_to_resume(path, "auto", identity)["epoch"] == 1
    other = {"seed": 0, "epochs": 3}
    with pytest.raises(ValueError, match=r"different configuration \(epochs: 2 -> 3\)"):
        checkpoint_to_resume(path, True, other)
    assert path.is_file()  # refused, not touched
    assert checkpoint_to_resume(path, "auto", other, set_aside=False) is None and path.is_file()
    assert checkpoint_to_resume(path, "auto", other) is None
    assert not path.exists() and path.with_name("checkpoint.pt.stale").is_file()


@pytest.mark.parametrize("policy", ["yes", 1, 0, None, "true"])
def test_unknown_policies_are_named(policy):
    with pytest.raises(ValueError, match="resume must be one of false, true, auto"):
        check_policy(policy)


def test_a_key_declared_changeable_later_is_not_a_difference(tmp_path):
    """A checkpoint written before ``name`` joined ``resume_may_change`` still resumes."""
    path = tmp_path / "checkpoint.pt"
    save_checkpoint({"identity": {"seed": 0, "name": "old", "wandb.mode": "offline"}, "epoch": 2}, path)
    state = checkpoint_to_resume(path, True, {"seed": 0}, may_change=["name", "wandb"])
    assert state["epoch"] == 2
    with pytest.raises(ValueError, match="seed: 0 -> 1"):
        checkpoint_to_resume(path, True, {"seed": 1}, may_change=["name", "wandb"])


def test_a_key_at_its_declared_default_is_left_out_of_the_identity(tmp_path):
    """``identity_defaults``: a checkpoint written before ``precision`` existed resumes a run at the
    default, not one at another value."""
    defaults = {"precision": "float32", "model.channels_last": False}
    config = {"seed": 0, "precision": "float32", "model": {"width": 4, "channels_last": False}}
    assert run_identity(config, (), defaults) == {"seed": 0, "model.width": 4}
    other = {**config, "precision": "bfloat16", "model": {"width": 4, "channels_last": True}}
    assert run_identity(other, (), defaults) == {
        "seed": 0,
        "precision": "bfloat16",
        "model.width": 4,
        "model.channels_last": True,
    }
    assert run_identity(config, ()) == {
        "seed": 0,
        "precision": "float32",
        "model.width": 4,
        "model.channels_last": False,
    }
    path = tmp_path / "checkpoint.pt"
    save_checkpoint({"identity": {"seed": 0, "model.width": 4}, "epoch": 1}, path)  # before the keys existed
    assert checkpoint_to_resume(path, True, run_identity(config, (), defaults))["epoch"] == 1
    with pytest.raises(ValueError, match=r"precision: None -> 'bfloat16'"):
        checkpoint_to_resume(path, True, run_identity(other, (), defaults))


RENAMES = {"data.margin": "loss.margin", "data.lam": "loss.lam"}  # retrieval's identity_renamed


def test_a_moved_key_is_compared_under_its_new_name(tmp_path):
    """``identity_renamed``: a checkpoint written when margin and lambda were ``data.*`` resumes a run
    that has them as ``loss.*`` at the same values, and is refused by one at other values."""
    old = {"seed": 0, "data": {"name": "sop", "margin": 0.02, "lam": 4.0}, "loss": {"name": "rambo_log"}}
    path = tmp_path / "checkpoint.pt"
    save_checkpoint({"identity": run_identity(old), "epoch": 1}, path)
    assert load_checkpoint(path)["identity"] == {
        "seed": 0,
        "data.name": "sop",
        "data.margin": 0.02,
        "data.lam": 4.0,
        "loss.name": "rambo_log",
    }
    new = {"seed": 0, "data": {"name": "sop"}, "loss": {"name": "rambo_log", "margin": 0.02, "lam": 4.0}}
    assert checkpoint_to_resume(path, True, run_identity(new), renames=RENAMES, config=new)["epoch"] == 1
    no_margin = {**new, "loss": {**new["loss"], "margin": 0.0}}
    with pytest.raises(ValueError, match=r"different configuration \(loss.margin: 0.02 -> 0.0\)"):
        checkpoint_to_resume(path, True, run_identity(no_margin), renames=RENAMES, config=no_margin)
    with pytest.raises(
        RunExistsError, match="holds this run already"
    ):  # a new run sees the same run under the new names
        checkpoint_to_resume(path, False, run_identity(new), renames=RENAMES, config=new)
    with pytest.raises(ValueError, match=r"data.lam: 4.0 -> None"):  # without the renames: another run
        checkpoint_to_resume(path, True, run_identity(new))


def test_a_moved_key_whose_new_home_the_run_lacks_is_dropped():
    """A loss with no margin (retrieval's contrastive row) has no ``loss.margin``: the checkpoint's
    ``data.margin`` reached no loss, and is no difference; a key not renamed is kept as it is."""
    saved = {"seed": 0, "data.margin": 0.02, "data.lam": 4.0, "loss.module.margin": 0.5}
    contrastive = {"seed": 0, "loss": {"name": "contrastive", "module": {"margin": 0.5}}}
    assert renamed(saved, RENAMES, contrastive) == {"seed": 0, "loss.module.margin": 0.5}
    assert renamed(saved, RENAMES) == {"seed": 0, "loss.margin": 0.02, "loss.lam": 4.0, "loss.module.margin": 0.5}
    assert renamed(saved, None, contrastive) == saved


def test_a_moved_key_at_its_new_names_default_and_a_checkpoint_written_after_the_move():
    config = {"loss": {"margin": 0.02, "lam": 4.0}}
    # the new key at its identity_defaults value is left out of the identity (run_identity): so is the old one
    assert renamed({"data.lam": 4.0}, RENAMES, config, {"loss.lam": 4.0}) == {}
    assert renamed({"data.lam": 0.2}, RENAMES, config, {"loss.lam": 4.0}) == {"loss.lam": 0.2}
    # a checkpoint that has the new key already keeps both keys as they are
    saved = {"data.margin": 0.1, "loss.margin": 0.02}
    assert renamed(saved, RENAMES, config) == saved
