import pytest
import torch

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


def test_a_second_checkpoint_of_another_run_set_aside_keeps_the_first(tmp_path, caplog):
    """``resume=auto`` over another run's checkpoint twice: ``.stale`` then ``.stale.1`` (and the
    epoch before's beside each), every byte of both kept, and the log says where each went."""
    from rambo.harness.testing import md5

    path, previous = tmp_path / "checkpoint.pt", tmp_path / "checkpoint.prev.pt"
    kept = {}
    for number, seed in enumerate((1, 2)):
        save_checkpoint({"identity": {"seed": seed}, "epoch": 2}, path)
        save_checkpoint({"identity": {"seed": seed}, "epoch": 1}, previous)
        kept[number] = (md5(path), md5(previous))
        caplog.clear()
        with caplog.at_level("WARNING", logger="rambo.harness.resume"):
            assert checkpoint_to_resume(path, "auto", {"seed": 0}) is None
        suffix = ".stale" if number == 0 else ".stale.1"
        assert caplog.messages == [
            f"{path} was written by a different configuration (seed: {seed} -> 0): set aside {path} as "
            f"{path}{suffix} and {previous} as {previous}{suffix}; starting over"
        ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint.prev.pt.stale",
        "checkpoint.prev.pt.stale.1",
        "checkpoint.pt.stale",
        "checkpoint.pt.stale.1",
    ]
    assert (md5(tmp_path / "checkpoint.pt.stale"), md5(tmp_path / "checkpoint.prev.pt.stale")) == kept[0]
    assert (md5(tmp_path / "checkpoint.pt.stale.1"), md5(tmp_path / "checkpoint.prev.pt.stale.1")) == kept[1]


def test_a_second_damaged_checkpoint_set_aside_keeps_the_first(tmp_path):
    path = tmp_path / "checkpoint.pt"
    for damage in (b"first", b"second"):
        path.write_bytes(damage)
        assert checkpoint_to_resume(path, "auto", {"seed": 0}) is None
    assert (tmp_path / "checkpoint.pt.damaged").read_bytes() == b"first"
    assert (tmp_path / "checkpoint.pt.damaged.1").read_bytes() == b"second"


@pytest.mark.parametrize("policy", [True, False])
@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ({"a": 1}, "it holds a dict of 'a', without the identity and epoch of a run"),
        (torch.zeros(3), "it holds a Tensor, not a checkpoint dict"),
    ],
)
def test_a_file_that_holds_no_run_is_neither_continued_nor_overwritten(tmp_path, policy, content, reason):
    from rambo.harness.config_check import InputError
    from rambo.harness.resume import NotThisAppsCheckpoint

    path = tmp_path / "checkpoint.pt"
    torch.save(content, path)
    before = path.read_bytes()
    with pytest.raises(NotThisAppsCheckpoint) as caught:
        checkpoint_to_resume(path, policy, {"seed": 0}, app="rambo.example.train")
    assert isinstance(caught.value, InputError)
    assert str(caught.value) == (
        f"{path} is not a checkpoint of rambo.example.train ({reason}); this run neither continues nor overwrites "
        "it. Move it away, or give this run a folder of its own (hydra.run.dir=..., or checkpoint_path=...), or run "
        "with resume=auto, which sets it aside (renamed checkpoint.pt.stale)"
    )
    assert path.read_bytes() == before
    assert checkpoint_to_resume(path, "auto", {"seed": 0}) is None  # auto: set aside as another run's
    assert (tmp_path / "checkpoint.pt.stale").read_bytes() == before and not path.exists()


def test_every_refusal_of_a_checkpoint_is_an_input_error(tmp_path):
    """The apps print an InputError as one ``error:`` line and exit with code 2."""
    from rambo.harness.claim import FolderClaimedError
    from rambo.harness.config_check import InputError
    from rambo.harness.resume import DifferentRun

    path = tmp_path / "checkpoint.pt"
    save_checkpoint({"identity": {"seed": 0}, "epoch": 1}, path)
    with pytest.raises(RunExistsError) as exists:
        checkpoint_to_resume(path, False, {"seed": 0})
    with pytest.raises(DifferentRun) as different:
        checkpoint_to_resume(path, True, {"seed": 1})
    assert str(different.value) == (
        f"{path} was written by a different configuration (seed: 0 -> 1); resume=true continues only the same run. "
        "Give this run a folder of its own (hydra.run.dir=..., or checkpoint_path=...), or run with resume=auto, "
        "which sets that checkpoint aside (renamed checkpoint.pt.stale) and starts over"
    )
    for error in (exists.value, different.value, FolderClaimedError("x")):
        assert isinstance(error, InputError)
    assert isinstance(exists.value, FileExistsError) and isinstance(different.value, ValueError)
