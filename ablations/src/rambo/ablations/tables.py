"""Turn the pipeline's runs into the paper's tables: mean +- std over seeds, the paper's number beside.

    python -m rambo.ablations.tables --runs results/mini/runs --params params.yaml --out results/mini/tables

Reads `runs/<task>/<experiment>/seed<k>/metrics.json` (written by the training stages; the
pipeline keeps each profile's runs and tables in `results/<profile>/`, so a table reads only its
profile's runs); the profile's `tables.runs` in params.yaml says which experiment fills which
paper cell, and every experiment the profile trains must fill one. It
writes `<out>/<table>.md` and `<out>/<table>.json` for every table of `paper_numbers.TABLES`,
`<out>/tables.md` with all of them, `<out>/claims.{md,json}` (the paper's qualitative claims,
paired by seed with 95% intervals: `claims`; `--figure2` adds Fig. 2's bias claims) and
`<out>/summary.json`; `--plots DIR` the plot data of `dvc plots show` (`plots`). The
tables and the claims name the numerics their runs were made with (each run's `provenance`:
[`rambo.harness.provenance`][rambo.harness.provenance]; the mode, never the CPU model). A profile's `tables.second_draw`
(the same runs made again with other arithmetic, the native numerics mode, committed under
`results/draws/`)
adds a column to the claims: the verdict on that draw, and whether it is the same. With
`--wandb-mode` other than `disabled`, an aggregate W&B run mirrors the tables (the files stay the
primary copy). A cell the profile does not run says so and names the profile; a cell whose runs are
missing is an error, and so is a trained experiment that fills no cell (its rows would read "not run"),
so a broken pipeline cannot produce a quietly empty table. A run file or params file that is
missing, not valid JSON or YAML, or lacks a value the tables read is one `error:` line naming the
file and the stage to rerun, exit code 2 ([`rambo.harness.run_files`][rambo.harness.run_files]).
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import statistics
from collections.abc import Callable
from pathlib import Path

from rambo.harness.atomic import write_text
from rambo.harness.numerics import start_command
from rambo.harness.provenance import machine_label
from rambo.harness.run import wandb_group
from rambo.harness.run_files import RunFileError, bad_file, one_line_errors, read_json, read_yaml
from rambo.harness.wandb_run import start_run

from .claims import claims_markdown, evaluate_claims, minibatch_bias_claims
from .paper_numbers import TABLES, Cell, Table
from .plots import plot_files, write_plot_data

#: What the tables read of a run's `provenance` (`rambo.harness.provenance.machine_label`).
PROVENANCE = ({"device?": dict, "numerics?": (dict, None), "libraries?": dict, "launch?": dict}, None)
_ROWS = ([str], None)
#: What the tables read of a params file.
PARAMS = {
    "profile": str,
    "seeds": (str, int, list),
    "tables": {
        "runs": {"*": str},
        "labels?": (dict, None),
        "notes?": (dict, None),
        "second_draw?": ({"runs": str, "label": str, "figure2?": (str, None)}, None),
    },
    "retrieval?": ({"experiments?": _ROWS, "ablations?": _ROWS}, None),
    "detection?": ({"experiments?": _ROWS, "ablations?": _ROWS, "warm_start?": ({"experiments?": _ROWS}, None)}, None),
}
PARAMS_FIX = (
    "give the pipeline's params file (params.yaml; `python -m rambo.ablations.set_profile <profile>` writes it "
    "from ablations/profiles/<profile>.yaml)"
)


def run_fix(task: str, experiment: str, params: dict | None = None) -> str:
    """What to do about a bad or missing file of a run of `experiment`: rerun the DVC stage that
    trains it (`<task>_train`, `_ablation` or `_warm_start`, as the profile's `params` list it)."""
    node = (params or {}).get(task) or {}
    kind = "train"
    if experiment in (node.get("ablations") or []):
        kind = "ablation"
    elif experiment in ((node.get("warm_start") or {}).get("experiments") or []):
        kind = "warm_start"
    return f"rerun its stage: `dvc repro {task}_{kind}@{experiment}`, or delete the run folder"


def draw_fix(path: Path) -> str:
    """What to do about a bad file under `path`, a committed draw (`tables.second_draw`): restore it from git."""
    return f"restore the committed draw: `git checkout -- {path}` (see results/draws/README.md)"


def metrics_schema(task: str, metric: str | None = None) -> dict:
    """What the tables read of a run's `metrics.json`: `metric` (retrieval: of the paper
    protocol) and the provenance."""
    schema: dict = {"provenance?": PROVENANCE}
    if metric is not None:
        schema.update({"paper_protocol": {metric: float}} if task == "retrieval" else {metric: float})
    return schema


def read_metric(task: str, metrics: dict, metric: str) -> float:
    """The metric of one run in percent. Retrieval: the paper protocol's test value."""
    source = metrics["paper_protocol"] if task == "retrieval" else metrics
    if metric not in source:
        raise KeyError(f"metric {metric!r} not in run metrics (has {sorted(source)})")
    return 100.0 * float(source[metric])


def parse_seeds(value) -> list[int]:
    """params.yaml's `seeds`, a Hydra sweep of the run stages (`0,1,2`; one seed: `0`), as a list."""
    items = value if isinstance(value, list) else str(value).split(",")
    try:
        seeds = [int(str(item).strip()) for item in items]
    except ValueError:
        raise ValueError(
            f"params 'seeds' must be integers separated by commas (a Hydra sweep such as 0,1,2), got {value!r}"
        ) from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"params 'seeds' must name at least one seed, each once, got {value!r}")
    return seeds


def run_values(
    runs: Path, task: str, experiment: str, seeds: list[int], metric: str, fix: Callable[[str, str], str] = run_fix
) -> list[float]:
    """`metric` (percent) of `experiment` for each seed; a missing or bad run file is a
    [`rambo.harness.run_files.RunFileError`][rambo.harness.run_files.RunFileError] ending in `fix(task, experiment)`."""
    values = []
    for seed in seeds:
        path = runs / task / experiment / f"seed{seed}" / "metrics.json"
        values.append(read_metric(task, read_json(path, fix(task, experiment), metrics_schema(task, metric)), metric))
    return values


def run_machines(
    runs: Path, run_map: dict, seeds: list[int], fix: Callable[[str, str], str] = run_fix
) -> dict[str, int]:
    """`{machine label: number of runs}` over the runs the profile's tables read (each run's
    `metrics.json` provenance; runs made before it was recorded count as `not recorded`)."""
    counts = collections.Counter()
    for task, experiment in sorted(set((key.split("/")[0], e) for key, e in run_map.items())):
        for seed in seeds:
            path = runs / task / experiment / f"seed{seed}" / "metrics.json"
            if path.is_file():
                facts = read_json(path, fix(task, experiment), metrics_schema(task)).get("provenance")
                counts[machine_label(facts) if facts else "not recorded"] += 1
    return dict(sorted(counts.items()))


def machines_text(machines: dict[str, int]) -> str:
    """`Runs made with: <label> (24 runs); <label> (3 runs).`"""
    if not machines:
        return "Runs made with: no run read."
    return (
        "Runs made with: "
        + "; ".join(f"{label} ({n} run{'s' if n != 1 else ''})" for label, n in machines.items())
        + "."
    )


def collect_cell(
    cell: Cell, runs: Path, run_map: dict, seeds: list[int], fix: Callable[[str, str], str] = run_fix
) -> dict:
    experiment = run_map.get(f"{cell.task}/{cell.dataset}/{cell.method}")
    result = {
        "dataset": cell.dataset,
        "method": cell.method,
        "experiment": experiment,
        "metric": cell.metric,
        "paper": cell.paper,
    }
    if experiment is None:
        return {**result, "status": "not run in this profile"}
    values = run_values(runs, cell.task, experiment, seeds, cell.metric, fix)
    return {
        **result,
        "status": "ok",
        "values": values,
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def unnamed_experiments(params: dict) -> list[str]:
    """`<task>/<experiment>` of every experiment the profile trains (params `<task>.experiments`
    and `.ablations`) that no cell of `tables.runs` names: its rows would read "not run"."""
    named = {f"{cell.split('/')[0]}/{experiment}" for cell, experiment in params["tables"]["runs"].items()}
    trained = {
        f"{task}/{experiment}"
        for task in ("retrieval", "detection")
        for key in ("experiments", "ablations")
        for experiment in (params.get(task) or {}).get(key) or []
    }
    return sorted(trained - named)


def format_cell(cell: dict) -> str:
    paper = "-" if cell["paper"] is None else f"{cell['paper']:.1f}"
    if cell["status"] != "ok":
        return f"not run (paper {paper})"
    return f"{cell['mean']:.1f} ± {cell['std']:.1f} (paper {paper})"


def build_table(
    table: Table, runs: Path, run_map: dict, seeds: list[int], fix: Callable[[str, str], str] = run_fix
) -> dict:
    rows = [
        {"label": label, "cells": [collect_cell(c, runs, run_map, seeds, fix) for c in cells]}
        for label, cells in table.rows
    ]
    built = {"key": table.key, "title": table.title, "columns": list(table.columns), "rows": rows, "note": table.note}
    if table.show_runs:
        built["runs"] = {
            column: [row["cells"][i]["experiment"] for row in rows if row["cells"][i]["experiment"]]
            for i, column in enumerate(table.columns)
        }
    return built


def markdown(built: dict, profile: str, labels: dict, seeds: list[int], notes: dict | None = None) -> str:
    """One table in markdown; `notes` (params `tables.notes`) adds a profile's own note to a table."""
    notes = notes or {}
    ran = sorted({c["dataset"] for r in built["rows"] for c in r["cells"] if c["status"] == "ok"})
    ran_text = "; ".join(f"{d}: {labels.get(d, d)}" for d in ran) or "no cell is run in this profile"
    elsewhere = (
        "" if profile == "paper" else " (`make reproduce PROFILE=paper` trains every row: GPUs, the real datasets)"
    )
    lines = [
        f"### {built['title']}",
        "",
        f"Profile `{profile}`: {ran_text}; mean ± std over seeds {seeds}; the paper's number in brackets; "
        f"not run: a row profile `{profile}` does not train{elsewhere}.",
        "",
        "| | " + " | ".join(built["columns"]) + " |",
        "|---|" + "---|" * len(built["columns"]),
    ]
    for row in built["rows"]:
        lines.append(f"| {row['label']} | " + " | ".join(format_cell(c) for c in row["cells"]) + " |")
    if built["note"]:
        lines += ["", built["note"]]
    if built.get("runs"):
        ran_by = "; ".join(f"{column}: {', '.join(names)}" for column, names in built["runs"].items() if names)
        lines += ["", f"Runs behind each column in this profile: {ran_by or 'none'}."]
    if notes.get(built["key"]):
        lines += ["", notes[built["key"]]]
    return "\n".join(lines) + "\n"


def compare_second_draw(claims: list[dict], second: dict, run_map: dict, seeds: list[int], with_figure2: bool) -> str:
    """Evaluate the claims again on the second draw's runs (`second["runs"]`, and its Fig. 2
    numbers `second["figure2"]`) and add to each claim `second_draw`: that draw's difference,
    interval, verdict and whether the verdict is the same. Returns the draw's machines line. A claim
    the second draw cannot evaluate is an error: a partial draw must not read as agreement."""
    runs = Path(second["runs"])

    def fix(task: str, experiment: str) -> str:
        return draw_fix(runs)

    if not runs.is_dir():
        raise RunFileError(f"tables.second_draw.runs: {runs} is not a folder (see results/draws/README.md)")

    def read_values(task: str, experiment: str, metric: str) -> list[float]:
        return run_values(runs, task, experiment, seeds, metric, fix)

    figure2 = Path(second["figure2"]) if with_figure2 and second.get("figure2") else None
    if figure2 is not None and not figure2.is_file():
        raise RunFileError(f"tables.second_draw.figure2: {figure2} is missing")
    other = {
        row["claim"]: row
        for row in evaluate_claims(read_values, run_map)
        + (minibatch_bias_claims(figure2, draw_fix(figure2)) if figure2 else [])
    }
    for row in claims:
        if row["claim"] not in other:
            raise RunFileError(f"the second draw ({runs}) has no value for the claim {row['claim']!r}")
        match = other[row["claim"]]
        row["second_draw"] = {
            "difference": match["difference"],
            "interval": match["interval"],
            "verdict": match["verdict"],
            "same_verdict": match["verdict"] == row["verdict"],
        }
    return machines_text(run_machines(runs, run_map, seeds, fix))


def log_to_wandb(
    built_tables: list[dict], mode: str, project: str, config: dict, directory: Path, claims: list[dict] | None = None
) -> None:
    """An aggregate W&B run (group `<profile>/tables`) with one W&B Table per paper table as the
    markdown shows it, the same numbers as a table of means with its bar chart, and the claims; the
    mode is decided before init ([`rambo.harness.wandb_run.decide_mode`][rambo.harness.wandb_run.decide_mode]:
    `WANDB_MODE`, an API key or `~/.netrc`). `make wandb-report` puts these tables into the profile's report."""
    profile = config.get("profile")
    run = start_run(
        mode,
        project,
        group=wandb_group(profile, "tables"),
        name=f"{profile}-tables" if profile else "tables",
        config=config,
        directory=directory,
        job_type="tables",
    )
    if run is None:
        return
    import wandb

    for built in built_tables:
        table = wandb.Table(columns=["row", *built["columns"]])
        numbers = wandb.Table(columns=["row", "column", "mean", "std", "paper", "seeds"])
        for row in built["rows"]:
            table.add_data(row["label"], *(format_cell(c) for c in row["cells"]))
            for column, cell in zip(built["columns"], row["cells"]):
                if cell["status"] == "ok":
                    numbers.add_data(
                        row["label"], column, cell["mean"], cell["std"], cell["paper"], len(cell["values"])
                    )
        run.log(
            {
                built["key"]: table,
                f"{built['key']}_numbers": numbers,
                f"{built['key']}_chart": wandb.plot.bar(numbers, "row", "mean", title=built["title"]),
            }
        )
    if claims:
        claim_table = wandb.Table(columns=["claim", "paper", "this profile", "interval", "verdict"])
        for claim in claims:
            claim_table.add_data(
                claim["claim"],
                str(claim.get("paper_difference")),
                str(claim.get("difference")),
                str(claim.get("interval")),
                str(claim.get("verdict")),
            )
        run.log({"claims": claim_table})
    run.finish()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--params", type=Path, required=True, help="params.yaml (profile, seeds, tables.runs)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--figure2", type=Path, help="fig2_minibatch_map.json, for the mini-batch bias claims")
    parser.add_argument(
        "--plots", type=Path, help="folder for the plot data of `dvc plots show` (rambo.ablations.plots)"
    )
    parser.add_argument("--wandb-mode", default="disabled", choices=["auto", "online", "offline", "disabled"])
    parser.add_argument("--wandb-project", default="rambo-tables")
    args = parser.parse_args(argv)

    params = read_yaml(args.params, PARAMS_FIX, PARAMS)
    try:
        seeds = parse_seeds(params["seeds"])
    except ValueError as error:
        raise bad_file(args.params, str(error), PARAMS_FIX) from None
    profile, fix = params["profile"], functools.partial(run_fix, params=params)
    run_map, labels = params["tables"]["runs"], params["tables"].get("labels") or {}
    unnamed = unnamed_experiments(params)
    if unnamed:
        raise RunFileError(
            f"{args.params}: profile {profile!r} trains {', '.join(unnamed)}, which no table cell names, so its "
            f"tables would call them not run; name their cells under tables.runs (ablations/profiles/{profile}.yaml)"
        )
    notes = params["tables"].get("notes") or {}
    machines = machines_text(run_machines(args.runs, run_map, seeds, fix))
    # Everything is read before anything is written: a bad run file leaves the tables as they were.
    built_tables, sections, summary = [build_table(table, args.runs, run_map, seeds, fix) for table in TABLES], [], {}
    outputs = {}
    for table, built in zip(TABLES, built_tables):
        text = markdown(built, profile, labels, seeds, notes)
        outputs[f"{table.key}.md"] = text
        outputs[f"{table.key}.json"] = json.dumps({"profile": profile, **built}, indent=2) + "\n"
        sections.append(text)
        for row in built["rows"]:
            for column, cell in zip(built["columns"], row["cells"]):
                if cell["status"] == "ok":
                    summary[f"{table.key}/{row['label']}/{column}"] = round(cell["mean"], 2)

    def read_values(task: str, experiment: str, metric: str) -> list[float]:
        return run_values(args.runs, task, experiment, seeds, metric, fix)

    claims = evaluate_claims(read_values, run_map) + (minibatch_bias_claims(args.figure2) if args.figure2 else [])
    second = params["tables"].get("second_draw")
    second_machines = None
    if second:
        second_machines = compare_second_draw(claims, second, run_map, seeds, args.figure2 is not None)
    claims_text = claims_markdown(claims, profile, seeds, machines, second and {**second, "machines": second_machines})
    outputs["claims.md"] = claims_text
    record = {
        "profile": profile,
        "seeds": seeds,
        "machines": machines,
        **({"second_draw": {**second, "machines": second_machines}} if second else {}),
        "claims": claims,
    }
    outputs["claims.json"] = json.dumps(record, indent=2) + "\n"
    sections.append(claims_text)
    outputs["tables.md"] = (
        f"## Reproduced tables (profile `{profile}`, its runs in {args.runs})\n\n{machines}\n\n" + "\n".join(sections)
    )
    outputs["summary.json"] = json.dumps({"profile": profile, **summary}, indent=2, sort_keys=True) + "\n"
    plots = plot_files(args.runs, seeds, built_tables, fix) if args.plots else {}
    for name, text in outputs.items():
        write_text(args.out / name, text)
    if args.plots:
        write_plot_data(args.runs, seeds, built_tables, args.plots, fix, plots)
    log_to_wandb(
        built_tables,
        args.wandb_mode,
        args.wandb_project,
        {"profile": profile, "seeds": seeds, "machines": machines},
        Path.cwd(),
        claims,
    )
    print(f"tables written to {args.out}/tables.md")


if __name__ == "__main__":
    start_command()  # the numerics mode in force, or one line naming what is missing (rambo.harness.numerics)
    with one_line_errors():  # a bad run or params file: one error line naming it, exit code 2
        main()
