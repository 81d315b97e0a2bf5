"""The pipeline's plot data for `dvc plots show` and `dvc plots diff`, written by the
tables stage, which reads the runs already.

Under `<out>` (`results/<profile>/plots`), one JSON list of flat records per plot, declared in dvc.yaml's
`plots:` with its template (`ablations/plot_templates/`):

* `<task>_loss.json`: the training loss of every run, `{run, experiment, seed, epoch, loss}`;
* `retrieval_recall.json`: every periodic evaluation's test R@1 (%), `{run, ..., epoch, "R@1"}`;
  `detection_ap50.json`: AP50 (%) of every evaluation of a detection run (the final one, at least);
* `<table>.json`: the table's headline metric per row and seed, `{row, seed, value, experiment}`
  (R@1 of Tables 2-4; a cell of Table 5 or 7 is `row | column`);
* `table8_lambda.json`: Table 8's lambda curve, `{lambda, margin, seed, AP50}`.

A run is `"<experiment> seed<k>"`: one line per run, one colour each. Every record is flat and every
key present in every record of a file, as DVC's renderers need. A run's `curve.json` or
`metrics.json` that is not valid JSON or lacks what is read here is a
[`rambo.harness.run_files.RunFileError`][rambo.harness.run_files.RunFileError] naming the file and the stage to rerun.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from rambo.harness.atomic import write_json
from rambo.harness.run_files import read_json

LAMBDA_ROW = re.compile(r"lambda ([0-9.]+), (no margin|margin)")
_VALUE = (float, None)
#: What the plots read of a run's `curve.json`: one row per epoch.
CURVE = [{"epoch": int, "loss?": _VALUE, "test/R@1?": _VALUE}]
#: What the plots read of a run's `metrics.json` (detection: every evaluation's AP50).
METRICS = {"history?": [{"epoch": int, "AP50?": _VALUE}], "AP50?": _VALUE, "epochs?": int}


def _rerun(task: str, experiment: str) -> str:
    return f"rerun the stage that trains {task}/{experiment} (`dvc repro`), or delete the run folder"


def _runs(runs: Path, task: str, seeds: list[int]):
    """`(experiment, seed, folder)` of every run of `task` under `runs` for the profile's seeds."""
    for folder in sorted(p for p in (runs / task).iterdir() if p.is_dir()) if (runs / task).is_dir() else ():
        for seed in seeds:
            if (folder / f"seed{seed}" / "metrics.json").is_file():
                yield folder.name, seed, folder / f"seed{seed}"


def curve_records(
    runs: Path, task: str, seeds: list[int], fix: Callable[[str, str], str] = _rerun
) -> tuple[list[dict], list[dict]]:
    """`(loss records, evaluation records)` of every run of `task`; `fix(task, experiment)`:
    what the error of a bad run file says to do."""
    losses, evaluations = [], []
    for experiment, seed, folder in _runs(runs, task, seeds):
        base = {"run": f"{experiment} seed{seed}", "experiment": experiment, "seed": seed}
        what = fix(task, experiment)
        curve = read_json(folder / "curve.json", what, CURVE) if (folder / "curve.json").is_file() else []
        metrics = read_json(folder / "metrics.json", what, METRICS)
        for record in curve:
            if isinstance(record.get("loss"), (int, float)):
                losses.append({**base, "epoch": record["epoch"], "loss": record["loss"]})
            if task == "retrieval" and isinstance(record.get("test/R@1"), (int, float)):
                evaluations.append({**base, "epoch": record["epoch"], "R@1": 100.0 * record["test/R@1"]})
        if task == "detection":
            points = {
                h["epoch"]: h["AP50"] for h in metrics.get("history", []) if isinstance(h.get("AP50"), (int, float))
            }
            if isinstance(metrics.get("AP50"), (int, float)):
                points[metrics.get("epochs", max(points, default=0))] = metrics["AP50"]
            evaluations += [{**base, "epoch": epoch, "AP50": 100.0 * value} for epoch, value in sorted(points.items())]
    return losses, evaluations


def table_records(built: dict) -> list[dict]:
    """Each `ok` headline cell of a built table (`tables.build_table`) as one record per seed.
    A table whose columns are R@K values (Tables 2-4) shows its R@1 column; in the others every
    column is a headline (Table 7's datasets, Table 5's losses)."""
    records = []
    metric_columns = all(column.startswith("R@") for column in built["columns"])
    columns = built["columns"][:1] if metric_columns else built["columns"]
    for row in built["rows"]:
        for column, cell in zip(columns, row["cells"]):
            if cell["status"] != "ok":
                continue
            label = row["label"] if len(columns) == 1 else f"{row['label']} | {column}"
            records += [
                {"row": label, "seed": f"seed {i}", "value": value, "experiment": cell["experiment"]}
                for i, value in enumerate(cell["values"])
            ]
    return records


def lambda_records(table8: dict) -> list[dict]:
    """Table 8's RaMBO rows as `{lambda, margin, seed, AP50}` (the row labels name lambda and the margin)."""
    records = []
    for row in table8["rows"]:
        match = LAMBDA_ROW.search(row["label"])
        cell = row["cells"][0]
        if match and cell["status"] == "ok":
            records += [
                {"lambda": float(match.group(1)), "margin": match.group(2), "seed": f"seed {i}", "AP50": value}
                for i, value in enumerate(cell["values"])
            ]
    return sorted(records, key=lambda r: (r["margin"], r["lambda"], r["seed"]))


def plot_files(
    runs: Path, seeds: list[int], built_tables: list[dict], fix: Callable[[str, str], str] = _rerun
) -> dict[str, list[dict]]:
    """`{file name: records}` of every plot file of the module docstring. A plot without data (a
    profile that runs no detection) is an empty list: DVC then shows nothing for it.
    `fix(task, experiment)`: what the error of a bad run file says to do."""
    files = {}
    for task in ("retrieval", "detection"):
        losses, evaluations = curve_records(runs, task, seeds, fix)
        files[f"{task}_loss.json"] = losses
        files["retrieval_recall.json" if task == "retrieval" else "detection_ap50.json"] = evaluations
    for built in built_tables:
        files[f"{built['key']}.json"] = table_records(built)
    table8 = next((b for b in built_tables if b["key"] == "table8"), None)
    files["table8_lambda.json"] = lambda_records(table8) if table8 else []
    return files


def write_plot_data(
    runs: Path,
    seeds: list[int],
    built_tables: list[dict],
    out: Path,
    fix: Callable[[str, str], str] = _rerun,
    files: dict[str, list[dict]] | None = None,
) -> list[Path]:
    """Every plot file of the module docstring under `out` (`files`: as `plot_files` made
    them; else read now); returns their paths."""
    files = plot_files(runs, seeds, built_tables, fix) if files is None else files
    written = []
    for name, records in files.items():
        write_json(out / name, records)
        written.append(out / name)
    return written
