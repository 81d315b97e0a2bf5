"""``make gpu-check``: the project on one GPU, in a few minutes, as one prepared script.

    python benchmarks/gpu_check.py                 # a GPU when torch sees one, else toy sizes on the CPU
    python benchmarks/gpu_check.py --toy           # toy sizes (what the test runs)
    python benchmarks/gpu_check.py --sections rank_losses detection_step --out-dir /tmp/check

Sections, one module each in ``benchmarks/gpu_sections/`` that measures (``run``) and renders (``markdown``)
itself, each one run even when an earlier one failed (a failure is reported, never hidden): ``core_tests`` (the
core suite on the device), ``rank_losses`` (1e5 ... 1e8 beside the paper's V100), ``sync_free`` (host syncs,
eager vs compiled), ``cuda_graphs``, ``ranks_identical`` (device vs CPU, bit for bit), ``retrieval_step`` and
``recall_k_step`` (paper-profile training steps), ``recall_at_k_eval`` (Recall@K at SOP scale),
``detection_step`` (Faster R-CNN steps) and ``memory_plan`` (benchmarks/memory_plan.py's peaks on the device);
each module's docstring says what it measures and why. ``gpu_sections.SECTIONS`` is the registry read here.

The training steps go through the apps' own code: configs composed by Hydra from the packages'
``configs/``, ``build_model``/``build_detector``, and each engine's ``train_one_epoch`` fed with
prepared batches (random images: the weights are untrained, the data is not what is measured).
Writes ``gpu_check.json`` (after every section) and ``gpu_check.md`` to ``--out-dir``
(default: ``benchmarks/`` on a GPU, ``build/gpu-check/`` otherwise).

The command is run as a script: Python puts its folder, ``benchmarks/``, first on ``sys.path``, which is how
``gpu_sections`` (and, from its ``memory_plan`` section, ``benchmarks/memory_plan.py``) are imported.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path

import torch
from gpu_sections import SECTIONS as REGISTRY
from gpu_sections.common import REPO, Sizes, section_table
from gpu_sections.targets import targets

SECTIONS = tuple(REGISTRY)


def markdown(report: dict) -> str:
    """``gpu_check.md``: the run's machine and command, each section's status, the performance targets, then each
    section's own tables in the registry's order."""
    meta = report["meta"]
    lines = [f"# GPU check ({'toy sizes' if meta['toy'] else 'full sizes'}) on {meta['device_name']}", ""]
    if not meta["gpu_found"]:
        lines += [
            "**No GPU was found**: the same code paths ran at toy sizes on the CPU. These numbers say "
            "nothing about GPU speed.",
            "",
        ]
    lines += [f"torch {meta['torch']}, Python {meta['python']}, {meta['date']}. Command: `{meta['command']}`.", ""]
    status = report["sections"]
    lines += ["| section | status |", "|---|---|"]
    lines += [
        f"| {name} | {'ok' if value.get('ok') else 'FAILED: ' + value.get('error', 'see JSON').splitlines()[-1][:120]} |"
        for name, value in status.items()
    ]
    lines.append("")
    met = targets(report)
    if met:
        lines += section_table("Performance targets", ["target", "measured", "met"], "lrl", met)
    for name, section in REGISTRY.items():
        if name in status:
            lines += section.markdown(status[name], report)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toy", action="store_true", help="toy sizes (default on a machine without a GPU)")
    parser.add_argument("--device", default="auto", help="auto (cuda when torch sees one), cuda or cpu")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--out-dir", type=Path)
    args = parser.parse_args(argv)

    gpu_found = torch.cuda.is_available()
    device = torch.device(("cuda" if gpu_found else "cpu") if args.device == "auto" else args.device)
    toy = args.toy or device.type != "cuda"
    out_dir = args.out_dir or REPO / ("benchmarks" if device.type == "cuda" and not toy else "build/gpu-check")
    out_dir.mkdir(parents=True, exist_ok=True)
    if not gpu_found:
        print(
            "no GPU found (torch.cuda.is_available() is False): running the same code paths at toy sizes on the CPU",
            flush=True,
        )
    sizes = Sizes(toy)
    meta = {
        "toy": toy,
        "gpu_found": gpu_found,
        "device": str(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.machine()})",
        "command": "python benchmarks/gpu_check.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    report = {"meta": meta, "sections": {}}
    for name in args.sections:
        print(f"[gpu-check] {name} ...", flush=True)
        started = time.perf_counter()
        try:
            report["sections"][name] = REGISTRY[name].run(device, sizes)
        except Exception:  # a failing section is reported and the others still run
            report["sections"][name] = {"ok": False, "error": traceback.format_exc()}
            print(report["sections"][name]["error"], flush=True)
        report["sections"][name]["seconds"] = time.perf_counter() - started
        print(
            f"[gpu-check] {name}: {'ok' if report['sections'][name].get('ok') else 'FAILED'} "
            f"({report['sections'][name]['seconds']:.1f} s)",
            flush=True,
        )
        (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    table = markdown(report)
    (out_dir / "gpu_check.md").write_text(table)
    print(table)
    print(f"written: {out_dir / 'gpu_check.json'}, {out_dir / 'gpu_check.md'}")
    return report


if __name__ == "__main__":
    report = main()
    sys.exit(0 if all(section.get("ok") for section in report["sections"].values()) else 1)
