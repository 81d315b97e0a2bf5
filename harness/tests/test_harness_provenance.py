"""Provenance: what made a run, in its metrics.json and W&B config."""

import json
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from rambo.harness import numerics, provenance
from rambo.harness.provenance import git_state, machine_label, run_provenance
from rambo.harness.run import TrainingRun

REPO = Path(__file__).resolve().parents[2]


def test_provenance_names_code_libraries_machine_threads_and_profile():
    facts = run_provenance("mini")
    assert facts["profile"] == "mini" and facts["threads"] == torch.get_num_threads()
    assert facts["libraries"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert set(facts["libraries"]) == {"torch", "torchvision", "numpy"}
    assert facts["project"]["rambo-harness"]
    assert facts["device"] == {"type": "cpu", "machine": platform.machine()}  # no CPU model, no instruction set
    assert facts["numerics"]["mode"] == numerics.mode() and facts["numerics"]["threads"] == torch.get_num_threads()
    json.dumps(facts)  # JSON as it is: it goes into metrics.json and the W&B config


def test_the_commit_is_the_last_change_to_the_sources_of_the_checkout_that_tracks_the_code():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("a source tree without git (git_state is None there: the next test)")
    folders = [f for f in provenance.SOURCE_FOLDERS if (REPO / f).is_dir()]
    last = subprocess.run(
        ["git", "log", "-1", "--format=%H", "--", *folders], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    from rambo.harness import run

    state = git_state(run.__file__)
    assert state is not None and state["source_commit"] == last and isinstance(state["dirty"], bool)


def test_a_results_commit_on_top_leaves_the_recorded_commit_and_a_source_edit_marks_it_dirty(tmp_path):
    """A fresh clone of the commit that added the results records what the committed runs
    recorded, and so does one of a later commit that edits only a sub-project's README. A scratch
    repository with a source folder and a results folder, real git."""
    if shutil.which("git") is None:
        pytest.skip("no git")
    repo = tmp_path / "repo"
    (repo / "harness" / "src").mkdir(parents=True)
    (repo / "results").mkdir()
    code = repo / "harness" / "src" / "code.py"
    code.write_text("x = 1\n")
    readme = repo / "harness" / "README.md"
    readme.write_text("the sub-project\n")

    def git(*args):
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=repo,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "code")
    code_commit = git("rev-parse", "HEAD")
    made = git_state.__wrapped__(str(code))
    (repo / "results" / "metrics.json").write_text(json.dumps({"provenance": {"git": made}}))
    git("add", ".")
    git("commit", "-qm", "results")
    assert git("rev-parse", "HEAD") != code_commit
    assert git_state.__wrapped__(str(code)) == made == {"source_commit": code_commit, "dirty": False}
    readme.write_text("the sub-project, documented\n")  # a sub-project's README or tests: not what a run computes
    git("commit", "-qam", "docs")
    assert git_state.__wrapped__(str(code)) == made
    code.write_text("x = 2\n")
    assert git_state.__wrapped__(str(code)) == {"source_commit": code_commit, "dirty": True}


def test_launch_facts_name_the_launcher_and_the_processes(monkeypatch):
    for name in (
        "SLURM_JOB_ID",
        "SLURM_ARRAY_JOB_ID",
        "SLURM_ARRAY_TASK_ID",
        "SLURM_NTASKS",
        "TORCHELASTIC_RUN_ID",
        "WORLD_SIZE",
    ):
        monkeypatch.delenv(name, raising=False)
    assert provenance.launch_facts() == {"launcher": "local", "processes": 1}
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert provenance.launch_facts() == {"launcher": "torchrun", "processes": 2}
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setenv("SLURM_JOB_ID", "17")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "16")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    assert provenance.launch_facts() == {
        "launcher": "slurm",
        "processes": 2,
        "slurm": {"job_id": "17", "array_job_id": "16", "array_task_id": "1"},
    }
    facts = {
        "device": {"cpu": "Some CPU", "cpu_capability": "AVX2"},
        "threads": 1,
        "libraries": {"torch": "2.14.1"},
        "launch": {"launcher": "slurm", "processes": 2},
    }
    assert machine_label(facts) == (
        "native numerics (this CPU's own kernels: another CPU gives another draw), 1 thread, 2 processes, torch 2.14.1"
    )


def test_a_copy_outside_git_or_untracked_in_a_checkout_has_no_commit(tmp_path):
    copy = tmp_path / "site-packages" / "provenance.py"
    copy.parent.mkdir()
    shutil.copy(provenance.__file__, copy)
    assert git_state(str(copy)) is None
    if shutil.which("git") and (REPO / ".git").exists():
        # a wheel installed into a .venv inside the checkout: the file lies under the checkout, untracked
        (REPO / "build").mkdir(exist_ok=True)
        untracked = Path(tempfile.mkdtemp(prefix="provenance-test-", dir=REPO / "build")) / "provenance.py"
        try:
            shutil.copy(provenance.__file__, untracked)
            assert git_state(str(untracked)) is None
        finally:
            shutil.rmtree(untracked.parent)


def test_machine_label_names_the_numerics_and_threads_never_the_cpu():
    portable = {"numerics": {"mode": "portable", "threads": 1}, "threads": 1, "libraries": {"torch": "2.14.1"}}
    assert machine_label(portable) == "portable numerics (the same on every x86-64 CPU), 1 thread, torch 2.14.1"
    gpu = {
        "device": {"gpu": "NVIDIA H200"},
        "numerics": {"mode": "native", "threads": 8},
        "threads": 8,
        "libraries": {"torch": "2.14.1"},
    }
    assert machine_label(gpu) == (
        "NVIDIA H200, native numerics (this CPU's own kernels: another CPU gives another draw), 8 threads, torch 2.14.1"
    )
    # runs recorded before the numerics mode: their kernels, never their CPU model
    old = {"device": {"cpu": "Some CPU", "cpu_capability": "DEFAULT"}, "threads": 1, "libraries": {"torch": "2.14.1"}}
    assert "Some CPU" not in machine_label(old) and "torch's portable kernels" in machine_label(old)


def test_every_run_records_its_provenance_in_metrics_json(tmp_path):
    cfg = OmegaConf.create(
        {
            "seed": 0,
            "experiment_name": "toy",
            "output_dir": str(tmp_path),
            "metrics_path": f"{tmp_path}/metrics.json",
            "curve_path": f"{tmp_path}/curve.json",
            "checkpoint_path": f"{tmp_path}/checkpoint.pt",
            "resume": False,
            "resume_may_change": ["resume", "wandb"],
            "max_epochs_this_run": None,
            "profile_name": "tiny",
            "wandb": {"mode": "disabled", "project": "p"},
        }
    )
    model = torch.nn.Linear(2, 1)
    run = TrainingRun(cfg, {"model": model})
    for epoch in run.epochs(1):
        run.end_epoch({"epoch": epoch, "loss": 0.5}, 1)
    run.finish({"value": 1})
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written["value"] == 1 and written["provenance"]["profile"] == "tiny"
    assert written["provenance"] == run_provenance("tiny")  # no time, no host: identical runs record the same
