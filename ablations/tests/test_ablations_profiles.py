"""Every experiment of every profile composes, with the overrides the pipeline gives it, and every
paper row has its own name (W&B group, output folders), so no two rows share a dashboard or a folder."""

import re
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

import rambo.detection.train
import rambo.retrieval.train

PROFILES = sorted((Path(__file__).resolve().parents[1] / "profiles").glob("*.yaml"))
CONFIG_DIRS = {
    "retrieval": Path(rambo.retrieval.train.__file__).parent / "configs",
    "detection": Path(rambo.detection.train.__file__).parent / "configs",
}


def runs_of(profile: Path):
    params = yaml.safe_load(profile.read_text())
    for task in ("retrieval", "detection"):
        overrides = str(params[task]["overrides"] or "").split()
        warm_starts = (params[task].get("warm_start") or {}).get("experiments") or []
        for experiment in params[task]["experiments"] + params[task]["ablations"] + warm_starts:
            yield task, experiment, overrides


CASES = [(profile.stem, *run) for profile in PROFILES for run in runs_of(profile)]


@pytest.mark.parametrize(("profile", "task", "experiment", "overrides"), CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_every_experiment_of_every_profile_composes(profile, task, experiment, overrides):
    with initialize_config_dir(str(CONFIG_DIRS[task]), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={experiment}", *overrides, "output_dir=x"])
    assert cfg.experiment_name == experiment  # its own W&B group and folders
    assert cfg.loss.module._target_


@pytest.mark.parametrize("profile", PROFILES, ids=[p.stem for p in PROFILES])
def test_every_table_cell_names_a_run_of_its_profile(profile):
    params = yaml.safe_load(profile.read_text())
    runs = {f"{task}:{experiment}" for task, experiment, _ in runs_of(profile)}
    for cell, experiment in params["tables"]["runs"].items():
        assert f"{cell.split('/')[0]}:{experiment}" in runs, (profile.stem, cell, experiment)


@pytest.mark.parametrize("task", sorted(CONFIG_DIRS))
def test_experiment_names_are_the_file_names(task):
    for path in sorted((CONFIG_DIRS[task] / "experiment").glob("*.yaml")):
        assert f"\nexperiment_name: {path.stem}" in path.read_text(), path


def datasets_of(prepare: str) -> list[str]:
    """The dataset names of a data stage's arguments (what comes before the first --flag)."""
    words = prepare.split()
    return words[: next((i for i, w in enumerate(words) if w.startswith("--")), len(words))]


def test_paper_smoke_runs_the_paper_dag():
    """paper-smoke differs from paper in scale only: the same rows, table cells and figures."""
    paper, smoke = (
        yaml.safe_load((PROFILES[0].parent / f"{name}.yaml").read_text()) for name in ("paper", "paper-smoke")
    )
    for task in ("retrieval", "detection"):
        for key in ("experiments", "ablations"):
            assert smoke[task][key] == paper[task][key], (task, key)
        assert "profile=smoke" in smoke[task]["overrides"].split()
        assert datasets_of(smoke[task]["prepare"]) == datasets_of(paper[task]["prepare"])
    assert smoke["tables"]["runs"] == paper["tables"]["runs"]
    assert {k: v for k, v in smoke["figures"].items() if k != "args"} == {
        k: v for k, v in paper["figures"].items() if k != "args"
    }


@pytest.mark.parametrize("profile", PROFILES, ids=[p.stem for p in PROFILES])
def test_every_parameter_dvc_yaml_reads_is_in_every_profile(profile):
    """dvc.yaml's ${...} references all resolve (a missing one stops `dvc repro` before any stage);
    an escaped \\${...} is Hydra's, resolved per seed of a multirun."""
    params = yaml.safe_load(profile.read_text())
    text = (PROFILES[0].parents[2] / "dvc.yaml").read_text()
    for reference in sorted(set(re.findall(r"(?<!\\)\$\{([^}]+)\}", text))):
        if reference.startswith("item."):
            continue
        node = params
        for part in reference.split("."):
            assert isinstance(node, dict) and part in node, (profile.stem, reference)
            node = node[part]
