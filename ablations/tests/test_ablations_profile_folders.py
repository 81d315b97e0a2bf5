"""Each profile keeps its own results: dvc.yaml, resolved with each profile's parameters (by DVC
itself), puts every output of a profile in ``results/<profile>/`` or ``figures/out/<profile>/``, so
the paths of two profiles never meet and running one profile never changes another's files; the
tables stage reads only its profile's runs, names the profile, and "not run" means not run in it."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROFILES = sorted((REPO / "ablations" / "profiles").glob("*.yaml"))
SHARED = ("data/",)  # the datasets (inputs the data stages prepare), not results of a profile


RESOLVE = """
import json, sys
from dvc.dvcfile import load_file
from dvc.repo import Repo

Repo.init(".", no_scm=True).close()
repo = Repo(".")
stages = list(repo.index.stages)
dvcfile = load_file(repo, "dvc.yaml")
print(json.dumps({
    "outs": sorted({out.def_path for stage in stages for out in stage.outs}),
    "deps": sorted({dep.def_path for stage in stages for dep in stage.deps}),
    "metrics": sorted(dvcfile.metrics),
    "plots": sorted({path for plot in dvcfile.plots for spec in plot.values() for path in spec.get("y", {})}),
    "cmds": {stage.name: stage.cmd for stage in stages},
}))
"""


def resolved_pipeline(profile: Path, scratch: Path) -> dict:
    """``{"outs", "deps", "metrics", "plots", "cmds"}`` of dvc.yaml with ``profile`` as params.yaml,
    as DVC resolves them (``cmds``: stage name -> command), in a scratch DVC project of its own (a
    process of its own too: one process resolving several projects reuses the first one's plots)."""
    scratch.mkdir(parents=True)
    shutil.copy(REPO / "dvc.yaml", scratch / "dvc.yaml")
    shutil.copy(profile, scratch / "params.yaml")
    done = subprocess.run([sys.executable, "-c", RESOLVE], cwd=scratch, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout.strip().splitlines()[-1])
    return {key: value if key == "cmds" else set(value) for key, value in resolved.items()}


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("profiles")
    return {profile.stem: resolved_pipeline(profile, scratch / profile.stem) for profile in PROFILES}


def profile_name(stem: str) -> str:
    return yaml.safe_load((REPO / "ablations" / "profiles" / f"{stem}.yaml").read_text())["profile"]


def inside(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or under it."""
    folder = folder.rstrip("/")
    return path.rstrip("/") == folder or path.startswith(folder + "/")


@pytest.mark.parametrize("stem", [p.stem for p in PROFILES])
def test_every_result_of_a_profile_is_in_its_own_folders(pipelines, stem):
    name = profile_name(stem)
    own = (f"results/{name}/", f"figures/out/{name}/")
    resolved = pipelines[stem]
    for path in resolved["outs"] | resolved["metrics"] | resolved["plots"]:
        assert any(inside(path, folder) for folder in own + SHARED), (stem, path)
    # what a stage reads of results is its own profile's, or the committed draws (an input)
    for path in resolved["deps"]:
        if path.startswith(("results/", "figures/out/")):
            assert any(inside(path, folder) for folder in (*own, "results/draws/")), (stem, path)
    assert resolved["metrics"] == {f"results/{name}/headlines"}  # `dvc metrics show` names the profile per row


@pytest.mark.parametrize(("first", "second"), list(itertools.combinations([p.stem for p in PROFILES], 2)))
def test_two_profiles_never_write_the_same_path(pipelines, first, second):
    def written(stem):
        resolved = pipelines[stem]
        return {p for p in resolved["outs"] | resolved["plots"] if not p.startswith(SHARED)}

    for a, b in itertools.product(written(first), written(second)):
        assert not inside(a, b) and not inside(b, a), (first, a, second, b)


@pytest.mark.parametrize("stem", [p.stem for p in PROFILES])
def test_every_experiment_a_profile_trains_fills_a_table_cell(stem):
    """Else its rows read "not run" although the profile ran them (FastAP and Smooth-AP in tiny)."""
    from rambo.ablations.tables import unnamed_experiments

    assert unnamed_experiments(yaml.safe_load((REPO / "ablations" / "profiles" / f"{stem}.yaml").read_text())) == []


def write_runs(runs: Path, params: dict, seeds: list[int], value: float) -> None:
    """A ``metrics.json`` of every run ``params``' tables read, every metric at ``value``."""
    for cell, experiment in params["tables"]["runs"].items():
        task = cell.split("/")[0]
        for seed in seeds:
            path = runs / task / experiment / f"seed{seed}" / "metrics.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            if task == "retrieval":
                data = {"paper_protocol": {f"R@{k}": value for k in (1, 2, 4, 8, 10, 20, 30, 50, 100, 1000)}}
            else:
                data = {"AP50": value}
            path.write_text(json.dumps(data))


def snapshot(folder: Path, skip: Path | None = None) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` (but under ``skip``), by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not (skip and skip in p.parents)
    }


def tables_command(pipelines, stem: str) -> list[str]:
    """The tables stage's command of profile ``stem`` as DVC resolves it, run by this Python."""
    words = shlex.split(pipelines[stem]["cmds"]["tables"])
    assert words[:3] == ["python", "-m", "rambo.ablations.tables"], words
    return [sys.executable, *words[1:]]


@pytest.fixture
def two_profiles(tmp_path):
    """A workspace whose mini runs (every run of mini's tables, 3 seeds, all metrics 0.5) and tiny runs
    (tiny's, seed 0, all 0.3) sit in their profiles' folders, with params.yaml of tiny."""
    mini = yaml.safe_load((REPO / "ablations" / "profiles" / "mini.yaml").read_text())
    tiny = yaml.safe_load((REPO / "ablations" / "profiles" / "tiny.yaml").read_text())
    write_runs(tmp_path / "results" / "mini" / "runs", mini, [0, 1, 2], 0.5)
    write_runs(tmp_path / "results" / "tiny" / "runs", tiny, [0], 0.3)
    (tmp_path / "figures" / "out" / "tiny").mkdir(parents=True)
    shutil.copy(REPO / "figures/out/mini/fig2_minibatch_map.json", tmp_path / "figures/out/tiny")
    shutil.copy(REPO / "ablations" / "profiles" / "tiny.yaml", tmp_path / "params.yaml")
    return tmp_path


def run_tables(pipelines, workspace: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="disabled")
    return subprocess.run(
        tables_command(pipelines, "tiny"), cwd=workspace, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_tables_stage_reads_its_profiles_runs_names_it_and_not_run_is_that_profiles(pipelines, two_profiles):
    before = snapshot(two_profiles, skip=two_profiles / "results" / "tiny")
    done = run_tables(pipelines, two_profiles)
    assert done.returncode == 0, done.stderr
    out = two_profiles / "results" / "tiny" / "tables"
    table2 = json.loads((out / "table2.json").read_text())
    assert table2["profile"] == "tiny"
    cells = {cell["method"]: cell for row in table2["rows"] for cell in row["cells"] if cell["dataset"] == "sop"}
    for method in ("fastap", "smoothap", "rambo_recall_log"):  # tiny trained them: tiny's values, not mini's
        assert cells[method]["status"] == "ok" and cells[method]["values"] == [30.0], method
    table7 = json.loads((out / "table7.json").read_text())
    [row_memory] = [
        c
        for r in table7["rows"]
        for c in r["cells"]
        if c["method"] == "rambo_recall-row_memory" and c["dataset"] == "sop"
    ]
    assert row_memory["status"] == "not run in this profile"  # mini ran it (its run is there); tiny did not
    assert (
        "| Authors' batch memory (score rows; not in the paper) | not run (paper -) |"
        in (out / "table7.md").read_text()
    )
    text = (out / "tables.md").read_text()
    assert text.startswith("## Reproduced tables (profile `tiny`, its runs in results/tiny/runs)\n")
    assert "Profile `tiny`: sop: tiny synthetic set; mean ± std over seeds [0]; the paper's number in brackets; " in (
        text
    )
    assert (
        "not run: a row profile `tiny` does not train (`make reproduce PROFILE=paper` trains every row: GPUs, "
        "the real datasets)." in (out / "table2.md").read_text()
    )
    assert json.loads((out / "summary.json").read_text())["profile"] == "tiny"
    assert (two_profiles / "results" / "tiny" / "plots" / "table2.json").is_file()
    assert snapshot(two_profiles, skip=two_profiles / "results" / "tiny") == before  # mini's files untouched


def test_a_trained_experiment_no_cell_names_stops_the_tables_stage(pipelines, two_profiles):
    params = yaml.safe_load((two_profiles / "params.yaml").read_text())
    del params["tables"]["runs"]["retrieval/sop/fastap"], params["tables"]["runs"]["retrieval/sop/smoothap"]
    (two_profiles / "params.yaml").write_text(yaml.safe_dump(params))
    before = snapshot(two_profiles)
    done = run_tables(pipelines, two_profiles)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "error: params.yaml: profile 'tiny' trains retrieval/synthetic_fastap, retrieval/synthetic_smoothap, which no "
        "table cell names, so its tables would call them not run; name their cells under tables.runs "
        "(ablations/profiles/tiny.yaml)"
    )
    assert len(done.stderr.strip().splitlines()) == 1
    assert snapshot(two_profiles) == before  # nothing written


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="a git checkout is needed")
def test_git_keeps_every_profiles_results_and_ignores_their_checkpoints():
    """A profile's runs, headlines, tables, plots and figures (PNG, JSON) can be committed in its own
    folders; its checkpoints, exports, PDFs and the SoDeep sorter cannot."""
    kept = [
        "results/tiny/runs/retrieval/synthetic_log/seed0/metrics.json",
        "results/tiny/headlines/retrieval/synthetic_log/seed0.json",
        "results/tiny/tables/tables.md",
        "results/tiny/plots/table2.json",
        "figures/out/tiny/fig1_landscape.png",
        "figures/out/tiny/fig1_landscape.json",
    ]
    ignored = [
        "results/tiny/checkpoints/retrieval/synthetic_log/seed0/checkpoint.pt",
        "results/tiny/exports/synthetic_log/scores.npz",
        "results/tiny/runs/retrieval/synthetic_log/seed0/train.log",
        "figures/out/tiny/fig1_landscape.pdf",
        "figures/out/tiny/sodeep_sorter.pt",
    ]
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", *kept, *ignored], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode in (0, 1), done.stderr
    assert set(done.stdout.split()) == set(ignored)
