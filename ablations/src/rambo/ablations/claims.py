"""The paper's qualitative claims, tested on a profile's runs: differences paired by seed, with a 95% interval.

Each `Claim` compares two table cells of the same seeds (method A minus method B, in
points): the paper's two numbers and their difference, the profile's mean difference over seeds
with a two-sided 95% Student-t interval of the paired differences, and a verdict:

* `holds`: the interval lies above 0 (the claim's direction, measured beyond the seeds' noise);
* `contradicted`: the interval lies below 0;
* `not resolved`: the interval contains 0 (with 3 seeds the t factor is 4.30: only large,
  consistent differences resolve).

The mini-batch mAP bias claim (paper Fig. 2) is read from the figure's own numbers
(`fig2_minibatch_map.json`: 100 sampled batches per setting; normal-approximation interval of the
difference of two means). Cells of datasets a profile does not run are left out.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from rambo.harness.paired_interval import Z_975, paired_interval, verdict
from rambo.harness.run_files import ListOf, bad_file, check, read_json

#: What to do about a bad `fig2_minibatch_map.json` of the pipeline.
FIGURE2_FIX = "rebuild it: `dvc repro figure_2` (or `python -m rambo.figures.fig2_minibatch_map --out DIR`)"
_BIAS = {"mean": float, "std": float, "batches": int}
#: What the claims read of Fig. 2's numbers (and of each row, the curve with the score memory).
FIGURE2 = {"true_map": float, "curves": [str], "rows": ListOf({"batch_size": int, "no memory": _BIAS}, least=1)}


@dataclass(frozen=True)
class Claim:
    """`a` beats `b`: each `(task, dataset, method)` names a cell of `tables.runs`."""

    text: str
    task: str
    dataset: str
    a: str
    b: str
    metric: str
    paper_a: float | None
    paper_b: float | None
    paper_note: str = ""


CLAIMS = (
    Claim(
        "RaMBO beats the contrastive baseline (Table 2)",
        "retrieval",
        "sop",
        "rambo_recall_log",
        "contrastive",
        "R@1",
        77.8,
        42.0,
        "the paper's contrastive row is GoogLeNet",
    ),
    Claim(
        "The margin matters (Table 7)",
        "retrieval",
        "sop",
        "rambo_recall-table7_full",
        "rambo_recall-no_margin",
        "R@1",
        78.6,
        None,
        "without margin the paper's SOP run diverged; CUB: 64.0 vs 63.2",
    ),
    Claim(
        "The batch memory helps (Table 7)",
        "retrieval",
        "sop",
        "rambo_recall-table7_full",
        "rambo_recall-no_memory",
        "R@1",
        78.6,
        72.4,
    ),
    Claim(
        "The margin helps detection (Table 8, lambda 0.5)",
        "detection",
        "r50_07",
        "rambo",
        "rambo-lam0.5-nomargin",
        "AP50",
        75.7,
        74.6,
    ),
    Claim(
        "RaMBO, lambda 0.5 (the chosen one), beats CE (Table 8)",
        "detection",
        "r50_07",
        "rambo",
        "ce",
        "AP50",
        75.7,
        74.2,
    ),
    Claim(
        "RaMBO, lambda 0.1 (5x smaller), beats CE (Table 8)",
        "detection",
        "r50_07",
        "rambo-lam0.1",
        "ce",
        "AP50",
        75.2,
        74.2,
    ),
    Claim(
        "RaMBO, lambda 2.5 (5x larger), beats CE (Table 8)",
        "detection",
        "r50_07",
        "rambo-lam2.5",
        "ce",
        "AP50",
        74.3,
        74.2,
    ),
)


def evaluate_claims(read_values, run_map: dict) -> list[dict]:
    """Every claim whose two cells the profile runs. `read_values(task, experiment, metric)` gives
    the per-seed values in percent, in the order of the profile's seeds."""
    rows = []
    for claim in CLAIMS:
        experiments = [run_map.get(f"{claim.task}/{claim.dataset}/{m}") for m in (claim.a, claim.b)]
        if None in experiments:
            continue
        a, b = (read_values(claim.task, e, claim.metric) for e in experiments)
        mean, low, high = paired_interval(a, b)
        paper = None if None in (claim.paper_a, claim.paper_b) else claim.paper_a - claim.paper_b
        rows.append(
            {
                "claim": claim.text,
                "metric": claim.metric,
                "experiments": experiments,
                "paper": [claim.paper_a, claim.paper_b],
                "paper_difference": paper,
                "paper_note": claim.paper_note,
                "values": [a, b],
                "difference": mean,
                "interval": [low, high],
                "verdict": verdict(low, high),
            }
        )
    return rows


def minibatch_bias_claims(figure_json: Path, fix: str = FIGURE2_FIX) -> list[dict]:
    """Fig. 2: the bias of mini-batch mAP (its mean minus the true mAP) shrinks with batch size and
    with the score memory; from the figure's numbers (mean, std over its sampled batches). None
    without the file; a bad one is a [`rambo.harness.run_files.RunFileError`][rambo.harness.run_files.RunFileError]
    ending in `fix`."""
    if not figure_json.is_file():
        return []
    data = read_json(figure_json, fix, FIGURE2)
    true_map, rows = data["true_map"], data["rows"]
    smallest, largest = rows[0], rows[-1]
    memory = next((curve for curve in data["curves"] if curve != "no memory"), None)
    if memory is None:
        raise bad_file(figure_json, f"curves {data['curves']} names no curve with the score memory", fix)
    check(data, {"rows": [{memory: _BIAS}]}, figure_json, fix)
    if any(row[curve]["batches"] < 1 for row in (smallest, largest) for curve in ("no memory", memory)):
        raise bad_file(figure_json, "a row counts no sampled batches (batches < 1)", fix)

    def bias_difference(first: dict, second: dict) -> dict:
        difference = 100 * (first["mean"] - second["mean"])  # bias(first) - bias(second): the true mAP cancels
        half = 100 * Z_975 * math.sqrt(first["std"] ** 2 / first["batches"] + second["std"] ** 2 / second["batches"])
        low, high = difference - half, difference + half
        return {
            "difference": difference,
            "interval": [low, high],
            "verdict": verdict(low, high),
            "values": [100 * (first["mean"] - true_map), 100 * (second["mean"] - true_map)],
        }

    return [
        {
            "claim": f"Mini-batch mAP is biased less at batch {largest['batch_size']} than at {smallest['batch_size']} (Fig. 2)",
            "metric": "bias of mAP",
            "experiments": ["fig2_minibatch_map", "fig2_minibatch_map"],
            "paper": [None, None],
            "paper_difference": None,
            "paper_note": "the paper shows it as a figure",
            **bias_difference(smallest["no memory"], largest["no memory"]),
        },
        {
            "claim": f"The score memory shrinks the bias at batch {smallest['batch_size']} (Fig. 2)",
            "metric": "bias of mAP",
            "experiments": ["fig2_minibatch_map", "fig2_minibatch_map"],
            "paper": [None, None],
            "paper_difference": None,
            "paper_note": "the paper shows it as a figure",
            **bias_difference(smallest["no memory"], smallest[memory]),
        },
    ]


def _number(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:+.1f}"


def claims_markdown(
    rows: list[dict], profile: str, seeds: list[int], machines: str = "", second: dict | None = None
) -> str:
    """The claims table; `machines`: where the runs came from; `second`: the profile's
    `tables.second_draw` (`label`, `machines`), whose per-claim results the rows carry
    (`row["second_draw"]`): one more column, the verdict on that draw and whether it agrees."""
    header = "| claim | paper | paper difference | this profile (mean per seed) | difference [95% interval] | verdict |"
    rule = "|---|---|---|---|---|---|"
    if second:
        header += " second draw: difference [95% interval], verdict | same verdict in both draws? |"
        rule += "---|---|"
    lines = [
        "### Claims of the paper, tested on this profile",
        "",
        f"Profile `{profile}`, seeds {seeds}. Difference = first minus second, in points, paired by seed, with its "
        "two-sided 95% interval (Student t over the seeds' differences; Fig. 2's rows: normal approximation over "
        "its sampled batches). A claim *holds* when the interval lies above 0, is *contradicted* when it lies below, "
        "and is *not resolved* otherwise. Bias rows: the first value is the larger bias, so a positive difference "
        "means the bias shrank.",
        *(["", machines] if machines else []),
        *(["", f"Second draw ({second['label']}): {second['machines']}"] if second else []),
        "",
        header,
        rule,
    ]
    for row in rows:
        paper = " vs ".join("-" if v is None else f"{v:.1f}" for v in row["paper"])
        if row["paper_note"]:
            paper += f" ({row['paper_note']})"
        a, b = row["values"]
        mine = " vs ".join(f"{statistics.fmean(v):.1f}" if isinstance(v, list) else f"{v:.1f}" for v in (a, b))
        low, high = row["interval"]
        line = (
            f"| {row['claim']} | {paper} | {_number(row['paper_difference'])} | {mine} | "
            f"{row['difference']:+.1f} [{_number(low)}, {_number(high)}] | {row['verdict']} |"
        )
        if second:
            other = row["second_draw"]
            other_low, other_high = other["interval"]
            line += (
                f" {other['difference']:+.1f} [{_number(other_low)}, {_number(other_high)}], {other['verdict']} |"
                f" {'yes' if other['same_verdict'] else 'no'} |"
            )
        lines.append(line)
    return "\n".join(lines) + "\n"
