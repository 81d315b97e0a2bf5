"""Measure the pipeline, stage by stage, in a fresh clone: `make pipeline-timing MODE=native` (or
`portable`), `python -m rambo.ablations.pipeline_timing --mode MODE`.

It clones the checkout's HEAD into `build/pipeline-timing/<mode>/` (so every run trains from
scratch: a clone has no checkpoints), runs `make reproduce` there in the numerics mode `MODE`
with this environment's `.venv` (the clone's own sources first on `PYTHONPATH`, as
tests/test_clean_reproduce.py does), times each DVC stage (`stage_times`), then runs `git
status --porcelain` in the clone: empty when the clone wrote exactly the committed results. It adds
the mode's measurement to `benchmarks/pipeline_timing.json` (date, machine, commit, seconds per
stage, from its start to the next stage's, DVC's checks between them included, and per kind of
stage, git status) and rewrites `benchmarks/pipeline_timing.md`, the
side-by-side table the documentation includes. Measure the two modes back to back on an idle
machine: the table compares seconds of different calls.

The clone is deleted when the measurement is written (`--keep` keeps it: its runs are then a draw
of that mode, e.g. the native draw of results/draws/). A `pipeline_timing.json` that cannot be
read, or a stage-times record that is not what `stage_times` writes, is one `error:` line
naming the file, exit code 2 ([`rambo.harness.run_files`][rambo.harness.run_files]); the record is checked before the
clone is made, so no measurement is spent on a file that cannot take it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from rambo.harness.atomic import write_json, write_text
from rambo.harness.run_files import one_line_errors, read_json

from .checkout import REPO

BIN = Path(sys.executable).parent
VENV = BIN.parent
SOURCES = ("core", "harness", "retrieval", "detection", "figures", "ablations")
KINDS = (  # the kinds of stage, by name prefix, in the table's order
    ("data", ("data_",)),
    ("retrieval training", ("retrieval_train@", "retrieval_ablation@")),
    ("detection training", ("detection_warm_start@", "detection_train@", "detection_ablation@")),
    ("exports", ("retrieval_export@",)),
    ("figures", ("figure_", "figures_", "table_6")),
    ("tables", ("tables",)),
)
OUT = REPO / "benchmarks" / "pipeline_timing.json"
_SECONDS = {"*": float}
#: What is read of a stage-times record (`stage_times`).
STAGE_TIMES = {"seconds": float, "stages": _SECONDS}
#: What is read of the measurements file: one measurement per mode.
MEASUREMENTS = {
    "*": {
        "date": str,
        "machine": str,
        "commit": str,
        "seconds": float,
        "kinds": _SECONDS,
        "stages": _SECONDS,
        "git_status_clean": bool,
        "changed_files": int,
    }
}


def read_measurements(path: Path) -> dict:
    """The measurements recorded in `path` (`{}` without the file); a bad file is a
    [`rambo.harness.run_files.RunFileError`][rambo.harness.run_files.RunFileError]."""
    if not path.is_file():
        return {}
    fix = f"restore it (`git checkout -- {path}`) or delete it: the next measurement writes it anew"
    return read_json(path, fix, MEASUREMENTS)


def kind_of(stage: str) -> str:
    return next((kind for kind, prefixes in KINDS if stage.startswith(prefixes)), "other")


def machine() -> str:
    """The CPU model and core count of the machine measured (a measurement's record, not a result)."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def measure(mode: str, folder: Path) -> dict:
    """Clone HEAD into `folder`, `make reproduce` there in `mode`; the measurement."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", f"file://{REPO}", str(folder)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "GLIBC_TUNABLES")}
    env.update(RAMBO_NUMERICS=mode, PATH=f"{BIN}{os.pathsep}{env['PATH']}")
    env["PYTHONPATH"] = os.pathsep.join(str(folder / s / "src") for s in SOURCES)
    record = folder.parent / f"{mode}-stages.json"
    command = ["make", "-o", str(VENV / ".installed"), f"VENV={VENV}", "reproduce", f"STAGE_TIMES_RECORD={record}"]
    started = datetime.datetime.now(datetime.timezone.utc)
    done = subprocess.run(command, cwd=folder, env=env)
    if done.returncode != 0:
        raise SystemExit(f"error: make reproduce failed in {folder} (exit {done.returncode}); the clone is kept")
    times = read_json(
        record,
        f"`make reproduce STAGE_TIMES_RECORD=...` writes it (rambo.ablations.stage_times): measure again "
        f"(`python -m rambo.ablations.pipeline_timing --mode {mode}`); the clone {folder} is kept",
        STAGE_TIMES,
    )
    status = subprocess.run(["git", "status", "--porcelain"], cwd=folder, capture_output=True, text=True, check=True)
    changed = [line[3:] for line in status.stdout.splitlines()]
    kinds: dict[str, float] = {}
    for stage, seconds in times["stages"].items():
        kinds[kind_of(stage)] = round(kinds.get(kind_of(stage), 0.0) + seconds, 1)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True).stdout.strip()
    return {
        "mode": mode,
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "commit": head,
        "seconds": times["seconds"],
        "kinds": kinds,
        "stages": times["stages"],
        "git_status_clean": not changed,
        "changed_files": len(changed),
    }


def markdown(measurements: dict) -> str:
    """The side-by-side table of the modes measured: per kind of stage, then per stage."""
    modes = [m for m in ("native", "portable") if m in measurements]
    lines = [
        "| mode | date | machine | commit | pipeline | git status after |",
        "|---|---|---|---|---|---|",
    ]
    for mode in modes:
        m = measurements[mode]
        clean = "empty" if m["git_status_clean"] else f"{m['changed_files']} files changed"
        lines.append(
            f"| {mode} | {m['date']} | {m['machine']} | `{m['commit'][:7]}` | {m['seconds']:.0f} s | {clean} |"
        )
    header = (
        "| stage | " + " | ".join(f"{m} (s)" for m in modes) + (" | portable / native |" if len(modes) == 2 else " |")
    )
    rule = "|---|" + "---:|" * len(modes) + ("---:|" if len(modes) == 2 else "")

    def row(name: str, values: list[float | None]) -> str:
        cells = [f"{v:.0f}" if v is not None else "-" for v in values]
        ratio = ""
        if len(values) == 2:
            ratio = f" {values[1] / values[0]:.2f}x |" if values[0] and values[1] is not None else " - |"
        return f"| {name} | " + " | ".join(cells) + " |" + ratio

    lines += ["", header, rule]
    for kind, _ in KINDS:
        lines.append(row(kind, [measurements[m]["kinds"].get(kind) for m in modes]))
    outside = [measurements[m]["seconds"] - sum(measurements[m]["kinds"].values()) for m in modes]
    lines.append(row("DVC's start before the first stage", outside))
    lines.append(row("**pipeline**", [measurements[m]["seconds"] for m in modes]))
    lines += ["", "<details><summary>Every stage</summary>", "", header, rule]
    stages = sorted({s for m in modes for s in measurements[m]["stages"]}, key=lambda s: (kind_of(s), s))
    for stage in stages:
        lines.append(row(f"`{stage}`", [measurements[m]["stages"].get(stage) for m in modes]))
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--mode", choices=("native", "portable"), required=True)
    parser.add_argument("--out", type=Path, default=OUT, help="the JSON record (the Markdown table beside it)")
    parser.add_argument("--keep", action="store_true", help="keep the clone (its runs are a draw of the mode)")
    args = parser.parse_args(argv)
    folder = REPO / "build" / "pipeline-timing" / args.mode
    read_measurements(args.out)  # a bad record stops here, before the measurement, not after it
    measurement = measure(args.mode, folder)
    measurements = read_measurements(args.out)
    measurements[args.mode] = measurement
    write_json(args.out, measurements)
    write_text(args.out.with_suffix(".md"), markdown(measurements))
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    print(
        f"{args.mode}: {measurement['seconds']:.0f} s, git status {'empty' if measurement['git_status_clean'] else 'not empty'}"
    )
    print(f"written: {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    with one_line_errors():  # a bad measurements file or stage-times record: one error line, exit code 2
        raise SystemExit(main())
