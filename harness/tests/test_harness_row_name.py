"""One name per row: a loss override of an experiment is another row, and needs its own name."""

import pytest

from rambo.harness.checkpoint import save_checkpoint
from rambo.harness.resume import RunExistsError, checkpoint_to_resume
from rambo.harness.row_name import experiment_groups, row_name_problem


@pytest.fixture
def experiment(tmp_path):
    path = tmp_path / "sop_log.yaml"
    path.write_text(
        "# @package _global_\ndefaults:\n  - override /data: sop\n  - override /loss: rambo_recall_log\n"
        "experiment_name: sop_log\n"
    )
    return path


def test_the_groups_an_experiment_sets_are_read_from_its_defaults(experiment):
    assert experiment_groups(experiment) == {"loss": "rambo_recall_log"}


def test_a_loss_override_without_a_name_of_its_own_is_refused(experiment):
    problem = row_name_problem("sop_log", experiment, ["experiment=sop_log", "loss=contrastive"], "sop_log")
    assert problem == (
        "experiment=sop_log with loss=contrastive (the row's is loss=rambo_recall_log) is another row, but it would keep "
        "the name 'sop_log': the row's output folders and W&B group. Give it a name of its own, e.g. "
        "experiment_name=sop_log_contrastive"
    )
    named = ["experiment=sop_log", "loss=contrastive", "experiment_name=sop_contrastive"]
    assert row_name_problem("sop_log", experiment, named, "sop_contrastive") is None
    # the row's own loss, parameters, data folders and scale-downs keep the row's name
    for overrides in (["loss=rambo_recall_log"], ["loss.tau=0", "data.root=/mine"], ["data=tiny", "model=tiny"]):
        assert row_name_problem("sop_log", experiment, ["experiment=sop_log", *overrides], "sop_log") is None
    assert (
        row_name_problem(None, None, ["loss=contrastive"], "sop_contrastive") is None
    )  # no experiment: the name follows


def test_a_new_run_never_overwrites_a_checkpoint(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint({"epoch": 3, "identity": {"loss.name": "rambo_log", "seed": 0}}, path)
    with pytest.raises(
        RunExistsError,
        match=r"holds another run \(loss.name: 'rambo_log' -> 'contrastive', epoch 3\).*"
        r"experiment_name=.*resume=true.*resume=auto",
    ):
        checkpoint_to_resume(path, False, {"loss.name": "contrastive", "seed": 0})
    with pytest.raises(RunExistsError, match=r"holds this run already \(epoch 3\).*resume=true"):
        checkpoint_to_resume(path, False, {"loss.name": "rambo_log", "seed": 0})
    assert checkpoint_to_resume(tmp_path / "none.pt", False, {"seed": 0}) is None
    assert checkpoint_to_resume(path, True, {"loss.name": "rambo_log", "seed": 0})["epoch"] == 3
