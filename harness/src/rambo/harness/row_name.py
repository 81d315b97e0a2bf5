"""One experiment name per paper row: an `experiment=<row>` whose loss is overridden on the
command line is another row, and must not share the row's output folders and W&B group (an earlier version let
`experiment=sop_log loss=contrastive` write into the RaMBO run's folder).

[`check_row_name`][rambo.harness.row_name.check_row_name] is called by each app's Hydra entry point: it refuses such a
run unless it is given a name of its own (`experiment_name=...`). Only the loss group counts: data and model
overrides are also how a row is scaled down (the tiny pipeline's `data=tiny model=tiny`) or
pointed at a user's copy; a run of another configuration in an existing folder is refused by the
resume policy instead ([`rambo.harness.resume.RunExistsError`][rambo.harness.resume.RunExistsError]).
"""

from __future__ import annotations

from pathlib import Path

import yaml

ROW_GROUPS = ("loss",)


def experiment_groups(experiment_file: Path) -> dict[str, str]:
    """`{group: option}` that an experiment config's defaults list sets (`override /loss: x`)."""
    defaults = yaml.safe_load(experiment_file.read_text()).get("defaults", []) or []
    chosen = {}
    for entry in defaults:
        if isinstance(entry, dict):
            for key, value in entry.items():
                group = key.replace("override", "").strip().lstrip("/")
                if group in ROW_GROUPS:
                    chosen[group] = str(value)
    return chosen


def row_name_problem(
    experiment: str | None, experiment_file: Path | None, task_overrides: list[str], experiment_name: str
) -> str | None:
    """Why this run may not keep the row's name, or None. `task_overrides`: the command line's."""
    if experiment is None or experiment_file is None or not experiment_file.is_file():
        return None
    given = {item.split("=", 1)[0].lstrip("+~"): item.split("=", 1)[1] for item in task_overrides if "=" in item}
    if "experiment_name" in given:
        return None
    sets = experiment_groups(experiment_file)
    changed = [
        (group, sets[group], given[group])
        for group in ROW_GROUPS
        if group in sets and group in given and given[group] != sets[group]
    ]
    if not changed:
        return None
    what = ", ".join(f"{group}={new} (the row's is {group}={old})" for group, old, new in changed)
    suggestion = f"{experiment}_{changed[0][2]}"
    return (
        f"experiment={experiment} with {what} is another row, but it would keep the name {experiment_name!r}: "
        f"the row's output folders and W&B group. Give it a name of its own, e.g. experiment_name={suggestion}"
    )


def check_row_name(config_dir: str | Path, experiment_name: str) -> None:
    """Inside a Hydra app: raise `ValueError` ([`row_name_problem`][rambo.harness.row_name.row_name_problem]) for a
    renamed-less row override."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    hydra = HydraConfig.get()
    experiment = hydra.runtime.choices.get("experiment")
    path = Path(config_dir) / "experiment" / f"{experiment}.yaml" if experiment else None
    problem = row_name_problem(experiment, path, list(hydra.overrides.task), experiment_name)
    if problem:
        raise ValueError(problem)
