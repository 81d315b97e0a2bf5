"""``memory_plan``: ``benchmarks/memory_plan.py``'s peaks (one training step, one evaluation batch at 2 and 4
images) of a few paper rows measured on the device (``torch.cuda.max_memory_allocated``), with the predictions
at each row's own settings, beside the committed CPU plan's (``benchmarks/memory_plan.json``; at toy sizes a
toy plan made on the CPU): whether the plan made on a CPU holds on a GPU."""

from __future__ import annotations

import json

import torch

from .common import REPO, Sizes, section_table

MEMORY_PLAN_ROWS = ("sop_log", "sop_recallk_simix", "table5_r50_voc07_rambo")


def run(device: torch.device, sizes: Sizes) -> dict:
    """The memory plan's small-size peaks on the device beside the CPU plan's (benchmarks/memory_plan.py)."""
    import memory_plan as plan_tool  # benchmarks/memory_plan.py: benchmarks/ is the command's folder, first on sys.path

    toy = plan_tool.TOY if sizes.toy else None
    committed = REPO / "benchmarks" / "memory_plan.json"
    here = plan_tool.plan(MEMORY_PLAN_ROWS, device, toy)["rows"]
    if toy is None and committed.is_file():
        cpu = {r["row"]: r for r in json.loads(committed.read_text())["rows"]}
    else:  # a toy plan on the CPU (on a CPU device: the one just made)
        cpu = {
            r["row"]: r
            for r in (
                here if device.type == "cpu" else plan_tool.plan(MEMORY_PLAN_ROWS, torch.device("cpu"), toy)["rows"]
            )
        }
    rows = []
    for r in here:
        c, m = cpu[r["row"]], r["measured"]
        rows.append(
            {
                "row": r["row"],
                "sizes": m["sizes"],
                "train_peak_gib": [b / 2**30 for b in m["train_peak_bytes"]],
                "cpu_train_peak_gib": [b / 2**30 for b in c["measured"]["train_peak_bytes"]],
                "eval_peak_gib": [b / 2**30 for b in m["eval_peak_bytes"]],
                "cpu_eval_peak_gib": [b / 2**30 for b in c["measured"]["eval_peak_bytes"]],
                "train_gib": r["train_gib"],
                "cpu_train_gib": c["train_gib"],
                "eval_gib": r["eval_gib"],
                "cpu_eval_gib": c["eval_gib"],
                "batch": r["batch"],
                "eval_batch": r["eval_batch"],
            }
        )
    return {"rows": rows, "device": str(device), "ok": True}


def markdown(result: dict, report: dict) -> list[str]:
    """One row per paper row: measured peaks and predictions at its batch, the CPU plan's beside the device's."""
    if not result.get("rows"):
        return []
    pair = lambda values: " / ".join(f"{v:.2f}" for v in values)  # noqa: E731
    rows = [
        [
            r["row"],
            pair(r["sizes"]),
            pair(r["cpu_train_peak_gib"]),
            pair(r["train_peak_gib"]),
            pair(r["cpu_eval_peak_gib"]),
            pair(r["eval_peak_gib"]),
            f"{r['batch']}: {r['cpu_train_gib']:.2f} / {r['train_gib']:.2f}",
            f"{r['eval_batch']}: {r['cpu_eval_gib']:.2f} / {r['eval_gib']:.2f}",
        ]
        for r in result["rows"]
    ]
    device = result["device"]
    return section_table(
        f"Memory plan (benchmarks/memory_plan.py): CPU plan beside `{device}`, GiB",
        [
            "row",
            "images",
            "train peak CPU",
            f"train peak {device}",
            "eval peak CPU",
            f"eval peak {device}",
            "train at its batch CPU / here",
            "eval at its batch CPU / here",
        ],
        "lrrrrrrr",
        rows,
    )
