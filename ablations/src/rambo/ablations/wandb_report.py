"""`make wandb-report`: a W&B Report of one profile's runs, built as code with wandb-workspaces.

    python -m rambo.ablations.wandb_report --params params.yaml [--entity TEAM] [--print]

For every paper table the profile runs: a bar chart of the table's headline metric (retrieval R@1,
detection AP50, each run's W&B summary) per experiment, mean and standard deviation over the seeds,
and the learning curves of those experiments (loss; retrieval's periodic test R@1 as well); then the
aggregate tables run's W&B Tables (every paper table and the claims, logged by rambo.ablations.tables).
The run sets select the profile's runs by the flat config keys the training runs carry
(`profile`, `experiment_name`; [`rambo.harness.run.TrainingRun`][rambo.harness.run.TrainingRun]), so mini and paper runs
never mix. Saving needs an API key (`WANDB_API_KEY` or `wandb login`) and the network; without
them it says so and builds nothing. `--print` shows the report's structure without saving it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rambo.harness.run_files import one_line_errors, read_yaml

from .paper_numbers import TABLES

PROJECTS = {"retrieval": "rambo-retrieval", "detection": "rambo-detection", "tables": "rambo-tables"}
HEADLINE = {"retrieval": "R@1", "detection": "AP50"}  # summary keys (the runs' headline.json)
CURVES = {"retrieval": ["loss", "test/R@1"], "detection": ["loss"]}


def table_experiments(table, run_map: dict) -> tuple[str | None, list[str]]:
    """`(task, experiments)` of the cells of `table` that the profile runs (`tables.runs`)."""
    experiments, task = [], None
    for _, cells in table.rows:
        for cell in cells:
            experiment = run_map.get(f"{cell.task}/{cell.dataset}/{cell.method}")
            if experiment is not None and experiment not in experiments:
                experiments.append(experiment)
                task = cell.task
    return task, experiments


def build_report(params: dict, entity: str):
    """The `wandb_workspaces.reports.v2.Report` of the profile in `params` (params.yaml);
    builds the object only (no network)."""
    import wandb_workspaces.reports.v2 as wr

    profile, run_map = params["profile"], params["tables"]["runs"]
    blocks = [
        wr.H1(f"RaMBO reproduction, profile {profile}"),
        wr.P(
            f"Runs of the profile '{profile}' (W&B groups {profile}/<experiment>), seeds {params['seeds']}. "
            "Bars: mean over seeds with their standard deviation; the documentation's Results page holds the same numbers."
        ),
        wr.TableOfContents(),
    ]
    for table in TABLES:
        task, experiments = table_experiments(table, run_map)
        if not experiments:
            continue
        runset = wr.Runset(
            entity=entity,
            project=PROJECTS[task],
            name=f"{table.key}, profile {profile}",
            filters=f"Config('profile') == '{profile}' and Config('experiment_name') in {experiments}",
        )
        by_experiment = {
            "groupby": wr.Config("experiment_name"),
            "groupby_aggfunc": "mean",
            "groupby_rangefunc": "stddev",
        }
        panels = [
            wr.BarPlot(
                title=f"{table.title}: {HEADLINE[task]} per experiment",
                metrics=[wr.SummaryMetric(HEADLINE[task])],
                **by_experiment,
            )
        ]
        panels += [
            wr.LinePlot(title=f"{metric} per epoch", x="Step", y=[metric], **by_experiment) for metric in CURVES[task]
        ]
        blocks += [wr.H2(table.title), wr.PanelGrid(runsets=[runset], panels=panels)]
    tables_run = wr.Runset(
        entity=entity,
        project=PROJECTS["tables"],
        name=f"tables, profile {profile}",
        filters=f"Config('profile') == '{profile}'",
    )
    logged = [wr.WeavePanelSummaryTable(table_name=table.key) for table in TABLES] + [
        wr.WeavePanelSummaryTable(table_name="claims")
    ]
    blocks += [
        wr.H2("The tables and the paper's claims (the aggregate run of rambo.ablations.tables)"),
        wr.PanelGrid(runsets=[tables_run], panels=logged),
    ]
    return wr.Report(
        project=PROJECTS["tables"],
        entity=entity,
        title=f"RaMBO reproduction ({profile})",
        description=f"Tables, learning curves and claims of the {profile} profile",
        blocks=blocks,
    )


def structure(report) -> list[str]:
    """The report's sections and panels, one line each (`--print` and the test)."""
    lines = [f"report: {report.title}"]
    for block in report.blocks:
        if type(block).__name__ == "PanelGrid":
            for panel in block.panels:
                lines.append(
                    f"  {type(panel).__name__}: {getattr(panel, 'title', None) or getattr(panel, 'table_name', '')}"
                )
        else:
            lines.append(f"{type(block).__name__}: {getattr(block, 'text', '')}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument(
        "--entity", default=os.environ.get("WANDB_ENTITY"), help="W&B team or user (default: the API key's)"
    )
    parser.add_argument("--print", action="store_true", help="print the report's structure; save nothing")
    args = parser.parse_args(argv)
    from .tables import PARAMS, PARAMS_FIX

    params = read_yaml(args.params, PARAMS_FIX, PARAMS)
    if args.print:
        print("\n".join(structure(build_report(params, args.entity or "ENTITY"))))
        return 0
    from rambo.harness.wandb_run import api_key_available

    if not api_key_available():
        print(
            "make wandb-report needs a W&B API key (WANDB_API_KEY, or `wandb login`) and the network to save a "
            "report; neither is set up here, so nothing was built. `python -m rambo.ablations.wandb_report --print` "
            "shows what it would contain.",
            file=sys.stderr,
        )
        return 1
    import wandb

    entity = args.entity or wandb.Api().default_entity
    report = build_report(params, entity)
    report.save()
    print(f"report saved: {report.url}")
    return 0


if __name__ == "__main__":
    with one_line_errors():  # a bad params file: one error line naming it, exit code 2
        raise SystemExit(main())
