import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rambo.ablations import tables
from rambo.ablations.claims import CLAIMS
from rambo.ablations.paper_numbers import TABLES

ABLATIONS = Path(__file__).resolve().parents[1]


def write_run(runs: Path, task, experiment, seed, value, provenance=None):
    path = runs / task / experiment / f"seed{seed}" / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if task == "retrieval":
        data = {"paper_protocol": {f"R@{k}": value for k in (1, 2, 4, 8, 10, 20, 30, 50, 100, 1000)}}
    else:
        data = {"AP50": value}
    if provenance is not None:
        data["provenance"] = provenance
    path.write_text(json.dumps(data))


def fill_runs(runs: Path, run_map: dict, seeds, value=lambda key, seed: 0.5 + 0.1 * seed, provenance=None):
    for key, experiment in run_map.items():
        for seed in seeds:
            write_run(runs, key.split("/")[0], experiment, seed, value(key, seed), provenance)


def machine(mode, threads=1):
    return {
        "device": {"type": "cpu", "machine": "x86_64"},
        "numerics": {"mode": mode, "threads": threads},
        "threads": threads,
        "libraries": {"torch": "2.14.1"},
    }


MINI_RUNS = yaml.safe_load((ABLATIONS / "profiles" / "mini.yaml").read_text())["tables"]["runs"]


def test_tables_have_mean_std_and_paper_numbers(tmp_path):
    params = {"profile": "mini", "seeds": [0, 1, 2], "tables": {"runs": MINI_RUNS, "labels": {"sop": "synthetic"}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    fill_runs(tmp_path / "runs", MINI_RUNS, [0, 1, 2])
    tables.main(
        ["--runs", str(tmp_path / "runs"), "--params", str(tmp_path / "params.yaml"), "--out", str(tmp_path / "out")]
    )
    table2 = json.loads((tmp_path / "out" / "table2.json").read_text())
    first = table2["rows"][0]["cells"][0]
    assert first["values"] == pytest.approx([50.0, 60.0, 70.0])
    assert first["mean"] == pytest.approx(60.0) and first["std"] == pytest.approx(10.0)
    assert first["paper"] == 77.8 and first["experiment"] == "synthetic_log"
    text = (tmp_path / "out" / "table2.md").read_text()
    assert "sop: synthetic" in text
    assert "| RaMBO log | 60.0 ± 10.0 (paper 77.8) |" in text
    table3 = json.loads((tmp_path / "out" / "table3.json").read_text())
    assert {c["status"] for r in table3["rows"] for c in r["cells"]} == {"not run in this profile"}
    table5 = (tmp_path / "out" / "table5.md").read_text()
    assert "| ResNet-50, VOC 07 | 60.0 ± 10.0 (paper 74.2) | 60.0 ± 10.0 (paper 75.7) |" in table5
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["table8/CE/AP50"] == 60.0


def test_tables_name_their_machines_and_the_claims_compare_a_second_draw(tmp_path):
    """Where the runs came from, and which verdicts another draw (other kernels) keeps."""
    draw = {"runs": str(tmp_path / "draw" / "runs"), "label": "native numerics"}
    params = {"profile": "mini", "seeds": [0, 1, 2], "tables": {"runs": MINI_RUNS, "second_draw": draw}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    # First draw: RaMBO clearly above contrastive, the no-margin row a little below RaMBO with noise.
    first = {
        "retrieval/sop/contrastive": [0.40, 0.42, 0.41],
        "retrieval/sop/rambo_recall-no_margin": [0.58, 0.64, 0.69],
    }
    fill_runs(
        tmp_path / "runs",
        MINI_RUNS,
        [0, 1, 2],
        lambda key, seed: first.get(key, [0.6, 0.62, 0.7])[seed],
        provenance=machine("portable"),
    )
    # Second draw: the same except the no-margin row, now consistently below: that verdict moves.
    second = {**first, "retrieval/sop/rambo_recall-no_margin": [0.55, 0.57, 0.65]}
    fill_runs(
        tmp_path / "draw" / "runs",
        MINI_RUNS,
        [0, 1, 2],
        lambda key, seed: second.get(key, [0.6, 0.62, 0.7])[seed],
        provenance=machine("native"),
    )
    out = tmp_path / "out"
    tables.main(["--runs", str(tmp_path / "runs"), "--params", str(tmp_path / "params.yaml"), "--out", str(out)])
    text = (out / "tables.md").read_text()
    assert (
        "Runs made with: portable numerics (the same on every x86-64 CPU), 1 thread, torch 2.14.1 "
        f"({3 * len(set(MINI_RUNS.values()))} runs)." in text
    )
    claims = json.loads((out / "claims.json").read_text())
    by_text = {row["claim"]: row for row in claims["claims"]}
    contrastive, margin = by_text[CLAIMS[0].text], by_text[CLAIMS[1].text]
    assert contrastive["verdict"] == "holds" and contrastive["second_draw"]["same_verdict"]
    assert margin["verdict"] == "not resolved" and margin["second_draw"]["verdict"] == "holds"
    assert not margin["second_draw"]["same_verdict"]
    assert "native numerics" in claims["second_draw"]["machines"]
    markdown = (out / "claims.md").read_text()
    assert "Second draw (native numerics): Runs made with: native numerics (this CPU's own kernels" in markdown
    assert "same verdict in both draws?" in markdown
    row = next(line for line in markdown.splitlines() if line.startswith(f"| {CLAIMS[1].text}"))
    assert row.endswith("holds | no |")
    # Identical runs give byte-identical tables (no time, no host name).
    again = tmp_path / "again"
    tables.main(["--runs", str(tmp_path / "runs"), "--params", str(tmp_path / "params.yaml"), "--out", str(again)])
    assert all((again / p.name).read_bytes() == p.read_bytes() for p in out.iterdir())
    # A second draw that lacks runs is an error, not agreement.
    (tmp_path / "draw" / "runs" / "retrieval" / "synthetic_log" / "seed2" / "metrics.json").unlink()
    with pytest.raises(
        FileNotFoundError, match="synthetic_log/seed2/metrics.json: not found; restore the committed draw"
    ):
        tables.main(["--runs", str(tmp_path / "runs"), "--params", str(tmp_path / "params.yaml"), "--out", str(out)])


def test_a_missing_run_is_an_error_not_an_empty_cell(tmp_path):
    params = {
        "profile": "mini",
        "seeds": [0, 1],
        "tables": {"runs": {"retrieval/sop/rambo_recall_log": "synthetic_log"}},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    write_run(tmp_path / "runs", "retrieval", "synthetic_log", 0, 0.5)
    with pytest.raises(
        FileNotFoundError,
        match=r"synthetic_log/seed1/metrics.json: not found; rerun its stage: `dvc repro retrieval_train@synthetic_log`",
    ):
        tables.main(
            ["--runs", str(tmp_path / "runs"), "--params", str(tmp_path / "params.yaml"), "--out", str(tmp_path / "o")]
        )


def test_wandb_mode_honours_wandb_mode_and_netrc_like_the_apps(monkeypatch, tmp_path):
    """The tables stage decides its W&B mode with rambo.harness (WANDB_MODE, API key, ~/.netrc)."""
    import wandb

    def no_init(**kwargs):
        raise AssertionError("wandb.init must not be called when WANDB_MODE=disabled")

    monkeypatch.setattr(wandb, "init", no_init)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    tables.log_to_wandb([], "auto", "p", {}, tmp_path)  # no init, no error
    started = []
    monkeypatch.setattr(tables, "start_run", lambda mode, *args, **kwargs: started.append(mode))
    tables.log_to_wandb([], "offline", "p", {}, tmp_path)
    assert started == ["offline"]


def test_set_profile_never_overwrites_a_locally_edited_params_file(tmp_path):
    root = Path(__file__).resolve().parents[2]
    params = tmp_path / "params.yaml"

    def set_profile(*args):
        return subprocess.run(
            [sys.executable, "-m", "rambo.ablations.set_profile", *args], cwd=tmp_path, capture_output=True, text=True
        )

    assert (
        set_profile("mini").returncode == 0
        and params.read_text() == (root / "ablations/profiles/mini.yaml").read_text()
    )
    assert set_profile("tiny").returncode == 0  # switching between unedited profiles is fine
    params.write_text(params.read_text() + "# my edit\n")
    refused = set_profile("mini")
    assert refused.returncode != 0 and "local edits" in refused.stderr and params.read_text().endswith("# my edit\n")
    assert set_profile("mini", "--force").returncode == 0 and "# my edit" not in params.read_text()


def test_the_committed_params_file_is_not_a_local_edit(tmp_path):
    """After a pull that changed a profile, the committed params.yaml (the old profile) is replaced."""
    import shutil

    if shutil.which("git") is None:
        pytest.skip("git is needed")
    root = Path(__file__).resolve().parents[2]
    params = tmp_path / "params.yaml"
    params.write_text("profile: mini\nseeds: [0]\n# an older version of the profile\n")
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    for command in (["init", "-q"], ["add", "params.yaml"], ["commit", "-qm", "params"]):
        subprocess.run([*git, *command], cwd=tmp_path, check=True, capture_output=True)
    done = subprocess.run(
        [sys.executable, "-m", "rambo.ablations.set_profile", "mini"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert params.read_text() == (root / "ablations/profiles/mini.yaml").read_text()


def test_make_tables_builds_the_tables_from_runs_alone(tmp_path):
    """`make tables`: the documented way to bring in runs made elsewhere (no DVC, nothing upstream), for
    params.yaml's profile, in its own folder."""
    root = Path(__file__).resolve().parents[2]
    recipe = subprocess.run(["make", "-n", "tables", "PY=python"], cwd=root, capture_output=True, text=True).stdout
    profile = yaml.safe_load((root / "params.yaml").read_text())["profile"]  # its runs and tables: its own folder
    assert (
        f"-m rambo.ablations.tables --runs results/{profile}/runs --params params.yaml --out results/{profile}/tables"
        in recipe
    )
    assert "dvc" not in recipe.split("rambo.ablations.tables")[1]


@pytest.mark.parametrize(
    ("value", "seeds"), [("0,1,2", [0, 1, 2]), (0, [0]), ("3", [3]), ([0, 1], [0, 1]), ("0, 5", [0, 5])]
)
def test_seeds_are_the_run_stages_hydra_sweep(value, seeds):
    assert tables.parse_seeds(value) == seeds


@pytest.mark.parametrize("value", ["range(0,3)", "0,0", "", "a,b"])
def test_seeds_that_are_not_a_list_of_distinct_integers_are_refused_by_name(value):
    with pytest.raises(ValueError, match="params 'seeds'"):
        tables.parse_seeds(value)


@pytest.mark.parametrize(
    "profile", sorted((Path(__file__).resolve().parents[1] / "profiles").glob("*.yaml")), ids=lambda p: p.stem
)
def test_every_profile_names_its_seeds_and_a_hydra_launcher(profile):
    params = yaml.safe_load(profile.read_text())
    assert tables.parse_seeds(params["seeds"])
    assert str(params["launcher"]).split()[0] in {
        "hydra/launcher=joblib",
        "hydra/launcher=basic",
        "hydra/launcher=slurm",
    }


def test_table7_ablates_the_papers_full_rambo_variant_and_names_its_runs(tmp_path):
    """The paper's Full RaMBO row of Table 7 is loglog on CUB200 and SOP (64.0, 78.6) and
    log on In-shop (88.1); the paper profile's ablations build on that variant, and the table names
    the runs behind each column. Each ablation must compose with its column's weighting."""
    from rambo.ablations import paper_settings

    profile = yaml.safe_load((ABLATIONS / "profiles" / "paper.yaml").read_text())
    run_map = profile["tables"]["runs"]
    [table7] = [t for t in TABLES if t.key == "table7"]
    weighting = {"cub": "loglog", "sop": "loglog", "inshop": "log"}
    full = {"cub": 64.0, "inshop": 88.1, "sop": 78.6}
    for _, cells in table7.rows:
        for cell in cells:
            experiment = run_map.get(f"{cell.task}/{cell.dataset}/{cell.method}")
            if experiment is None:
                continue
            config = paper_settings.compose_experiment("retrieval", experiment)
            assert config["loss"]["module"]["loss"]["weighting"] == weighting[cell.dataset], experiment
            assert config["data"]["name"] == cell.dataset
    assert {c.dataset: c.paper for c in table7.rows[0][1]} == full
    # Table 2-4's loglog rows (SOP, CUB) and log row (In-shop) hold the same numbers.
    for key, dataset, method in (
        ("table2", "sop", "rambo_recall_loglog"),
        ("table3", "cub", "rambo_recall_loglog"),
        ("table4", "inshop", "rambo_recall_log"),
    ):
        [table] = [t for t in TABLES if t.key == key]
        [r1] = [c.paper for _, cells in table.rows for c in cells if c.method == method and c.metric == "R@1"]
        assert r1 == full[dataset]
    fill_runs(tmp_path / "runs", run_map, [0])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({**profile, "seeds": "0"}))
    tables.main(
        ["--runs", str(tmp_path / "runs"), "--params", str(tmp_path / "params.yaml"), "--out", str(tmp_path / "out")]
    )
    text = (tmp_path / "out" / "table7.md").read_text()
    assert (
        "Runs behind each column in this profile: CUB200: cub_loglog, cub_loglog_no_memory, cub_loglog_no_margin; "
        "In-shop: inshop_log, inshop_log_no_memory, inshop_log_no_margin; Online Products: sop_loglog, "
        "sop_loglog_no_memory, sop_loglog_no_margin, sop_loglog_row_memory."
    ) in text


def test_the_mini_profile_says_which_variant_its_table7_ablates(tmp_path):
    mini = yaml.safe_load((ABLATIONS / "profiles" / "mini.yaml").read_text())
    assert "ablates RaMBO log" in mini["tables"]["notes"]["table7"]
    fill_runs(tmp_path / "runs", mini["tables"]["runs"], [0])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({**mini, "seeds": "0"}))
    tables.main(
        ["--runs", str(tmp_path / "runs"), "--params", str(tmp_path / "params.yaml"), "--out", str(tmp_path / "out")]
    )
    text = (tmp_path / "out" / "table7.md").read_text()
    assert mini["tables"]["notes"]["table7"] in text
    assert (
        "Online Products: synthetic_log, synthetic_log_no_memory, synthetic_log_no_margin, synthetic_log_row_memory."
        in text
    )
