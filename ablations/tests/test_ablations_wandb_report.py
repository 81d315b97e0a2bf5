"""``make wandb-report`` (rambo.ablations.wandb_report): the report object of a profile, built without the
network, and the refusal to build anything without an API key."""

from pathlib import Path

import pytest
import yaml

from rambo.ablations import wandb_report

ABLATIONS = Path(__file__).resolve().parents[1]

pytest.importorskip("wandb_workspaces")


def profile(name: str) -> dict:
    return yaml.safe_load((ABLATIONS / "profiles" / f"{name}.yaml").read_text())


def test_the_mini_report_has_a_section_per_table_it_runs_with_its_bars_curves_and_claims():
    report = wandb_report.build_report(profile("mini"), entity="team")
    lines = wandb_report.structure(report)
    sections = [line for line in lines if line.startswith("H2: ")]
    assert [s.split(":")[1].strip() for s in sections[:-1]] == [
        "Table 2",
        "Table 7",
        "Table 5",
        "Table 8",
    ]  # CUB, In-shop: not run
    grids = [block for block in report.blocks if type(block).__name__ == "PanelGrid"]
    table2 = grids[0]
    assert [type(p).__name__ for p in table2.panels] == ["BarPlot", "LinePlot", "LinePlot"]
    (runset,) = table2.runsets
    assert runset.project == "rambo-retrieval" and runset.entity == "team"
    assert "Config('profile') == 'mini'" in runset.filters and "'synthetic_log'" in runset.filters
    assert table2.panels[0].groupby_aggfunc == "mean" and table2.panels[0].groupby_rangefunc == "stddev"
    assert grids[2].runsets[0].project == "rambo-detection" and "'mini_rambo'" in grids[2].runsets[0].filters
    assert [p.table_name for p in grids[-1].panels][-1] == "claims" and grids[-1].runsets[0].project == "rambo-tables"


def test_the_paper_report_selects_paper_runs_only():
    report = wandb_report.build_report(profile("paper"), entity="team")
    grids = [block for block in report.blocks if type(block).__name__ == "PanelGrid"]
    assert all("Config('profile') == 'paper'" in grid.runsets[0].filters for grid in grids)
    assert "Table 3" in "\n".join(wandb_report.structure(report))  # the paper profile runs CUB


def test_without_an_api_key_nothing_is_built(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert wandb_report.main(["--params", str(ABLATIONS / "profiles" / "mini.yaml")]) == 1
    assert "needs a W&B API key" in capsys.readouterr().err
