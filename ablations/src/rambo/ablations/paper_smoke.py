"""Run the whole paper DAG on this CPU in minutes: `make paper-smoke` (CI runs it after `make test`).

In a scratch copy of the repository (`build/paper-smoke/repo`: the checkout's own results,
`params.yaml` and `dvc.lock` are never touched) it writes the stand-in archives of SOP, CUB,
In-shop and VOC 2007/2012 with their `MD5SUMS` into `data/stand-in`, and small stand-in files of
the ImageNet weights the paper's rows load with their `SHA256SUMS` (the pipeline runs with
`TORCH_HOME=data/stand-in/torch`, whose hub cache holds them), selects the `paper-smoke`
profile, runs `dvc repro` (in the native numerics mode unless `RAMBO_NUMERICS` is set: the
smoke's numbers mean nothing, its DAG does), then checks that a second `dvc repro` runs nothing
and that every table cell the profile names is filled. It prints the wall time, the stages run and
the disk the copy took, and writes them to `build/paper-smoke/summary.json`.

The copy holds the paper models' checkpoints (`NEEDED_GB`), which nothing reads once the
checks are done: a passing smoke deletes it (`--keep` keeps it), so the disk is free again for
whatever runs next (CI's later steps, a login node's other users); a failing one keeps it to be
looked at, and the next smoke deletes it before it starts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rambo.harness.run_files import one_line_errors, read_json, read_yaml

from .checkout import REPO
from .workspace import sync

BIN = Path(sys.executable).parent
# What a paper-smoke copy writes: the paper models' finished checkpoints, without optimiser state
# (16 retrieval ResNet-50s, 99 MB each; 7 Faster R-CNN R50, 166 MB; 2 R101 and 2 X101, 242 MB) and
# small stand-in data: 3.7 GB measured at the end of a smoke (``disk_gb`` of its summary), plus,
# while a run trains, its checkpoint with the optimiser state, the one of the epoch before and a
# checkpoint's temporary file (about 1.5 GB for an X101): 6 GB free is enough, with room to spare.
NEEDED_GB = 6
STAND_IN_TORCH_HOME = (
    "data/stand-in/torch"  # TORCH_HOME of the smoke's pipeline: its hub cache holds the stand-in weights
)
STAND_IN_WEIGHTS_SUMS = "data/stand-in/SHA256SUMS"  # the profile's --weights-sums


def copy_repository(destination: Path, profile: str) -> Path:
    """A fresh workspace of `profile` (`workspace`): the checkout's files without the
    pipeline's outputs, DVC without git, and `params.yaml` of `profile`."""
    if destination.exists():
        shutil.rmtree(destination)
    return sync(destination, profile)


def run(args: list[str], cwd: Path, echo: bool = False, env: dict | None = None) -> str:
    """Run a command with the venv first on PATH (and `env` set); its output (streamed when `echo`);
    exit on failure."""
    env = dict(os.environ, **(env or {}), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    process = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if echo:
            print(line, end="", flush=True)
    if process.wait() != 0:
        tail = "" if echo else "".join(lines[-60:])
        raise SystemExit(f"{tail}\n`{' '.join(args)}` failed in {cwd} (exit {process.returncode})")
    return "".join(lines)


def write_stand_ins(folder: Path) -> list[Path]:
    """The stand-in archives of every dataset of the paper profile, and their MD5SUMS."""
    from rambo.detection import stand_in as detection_stand_in
    from rambo.harness.mirror import write_md5sums
    from rambo.retrieval.datasets import stand_in as retrieval_stand_in

    archives = [*retrieval_stand_in.write_archives(folder), *detection_stand_in.write_archives(folder)]
    write_md5sums(folder, archives)
    return archives


def write_stand_in_weights(torch_home: Path, sums: Path) -> list[Path]:
    """A small stand-in file, under its official name in `torch_home`'s hub cache, for every ImageNet
    weights file the paper profile's rows load (as the apps' data stages name them), and `sums`
    (a `SHA256SUMS`) naming them. The official hashes refuse them; the smoke's data stages check
    them against `sums` (`--weights-sums`) with the rows composed as the paper profile composes
    them (`--weights-overrides profile=paper`). Its runs load no weights (profile=smoke)."""
    from rambo.detection.prepare import STAGE as detection
    from rambo.harness.data_stage import rows_of_params
    from rambo.harness.weights import write_sha256sums
    from rambo.retrieval.prepare import STAGE as retrieval

    paper = REPO / "ablations" / "profiles" / "paper.yaml"
    names = {
        item.filename: item.url
        for stage in (retrieval, detection)
        for item in stage.weights_files(rows_of_params(paper, stage.task), ["profile=paper"])
    }
    folder = torch_home / "hub" / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for name, url in sorted(names.items()):
        (folder / name).write_bytes(f"stand-in for {url} (make paper-smoke): not weights\n".encode())
        files.append(folder / name)
    write_sha256sums(sums, files)
    return files


def filled_cells(repo: Path) -> tuple[int, list[str]]:
    """How many table cells have a value, and the runs the profile's tables name that fill none. A
    bad params or table file is a [`rambo.harness.run_files.RunFileError`][rambo.harness.run_files.RunFileError]."""
    fix = f"the smoke's stages wrote it: run `make paper-smoke` again ({repo} is kept to be looked at)"
    params = read_yaml(repo / "params.yaml", fix, {"profile": str, "tables": {"runs": {"*": str}}})
    named = set(params["tables"]["runs"].values())
    filled, used = 0, set()
    for path in sorted((repo / "results" / params["profile"] / "tables").glob("table*.json")):  # the profile's own
        for row in read_json(path, fix, TABLE)["rows"]:
            for cell in row["cells"]:
                if cell["status"] == "ok":
                    filled += 1
                    used.add(cell["experiment"])
    return filled, sorted(named - used)


#: What is read of a table's JSON (`tables`).
TABLE = {"rows": [{"cells": [{"status": str, "experiment?": (str, None)}]}]}


def footprint_bytes(folder: Path) -> int:
    """The disk `folder` takes, as `du` counts it: allocated blocks of every file under it, a
    file with several hard links once, symbolic links not followed."""
    seen, total = set(), 0
    for root, _, files in os.walk(folder):
        for name in files:
            facts = os.lstat(os.path.join(root, name))
            if (facts.st_dev, facts.st_ino) not in seen:
                seen.add((facts.st_dev, facts.st_ino))
                total += facts.st_blocks * 512
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "build" / "paper-smoke", help="scratch folder")
    parser.add_argument("--profile", default="paper-smoke")
    parser.add_argument(
        "--keep", action="store_true", help="keep the scratch copy (its checkpoints, runs, tables) after a pass"
    )
    args = parser.parse_args(argv)
    # The paper experiments must be the paper's before they are smoke-run (ablations/paper_settings.yaml).
    from rambo.ablations import paper_settings

    if paper_settings.main([]) != 0:
        print("FAILED: the paper profile's settings drifted from the ledger (above)", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    if (args.out / "repo").exists():  # the last smoke's copy goes first: its space counts as free
        shutil.rmtree(args.out / "repo")
    free_gb = shutil.disk_usage(args.out).free / 1e9
    if free_gb < NEEDED_GB:
        print(
            f"FAILED: {args.out} has {free_gb:.1f} GB free; paper-smoke needs {NEEDED_GB} GB there "
            "(the paper models' checkpoints: about 3.7 GB kept, up to 1.5 GB more while a model trains). "
            "Free some space or pass --out on a larger disk.",
            file=sys.stderr,
        )
        return 1
    repo = copy_repository(args.out / "repo", args.profile)
    started = time.monotonic()
    archives = write_stand_ins(repo / "data" / "stand-in")
    print(f"stand-in archives: {', '.join(a.name for a in archives)} ({time.monotonic() - started:.0f} s)", flush=True)
    torch_home = repo / STAND_IN_TORCH_HOME
    stand_in_weights = write_stand_in_weights(torch_home, repo / STAND_IN_WEIGHTS_SUMS)
    print(f"stand-in weights: {', '.join(w.name for w in stand_in_weights)} in {torch_home}", flush=True)
    # The smoke checks the DAG's shape on stand-in data, whose numbers mean nothing: it runs the fast
    # native kernels unless RAMBO_NUMERICS says otherwise (the portable mode's own check is make test-numerics).
    env = {"TORCH_HOME": str(torch_home), "RAMBO_NUMERICS": os.environ.get("RAMBO_NUMERICS", "native")}
    print(f"numerics mode of the smoke's runs: {env['RAMBO_NUMERICS']}", flush=True)
    first = run([str(BIN / "dvc"), "repro"], repo, echo=True, env=env)
    seconds = time.monotonic() - started
    stages = re.findall(r"Running stage '([^']+)'", first)
    second = run([str(BIN / "dvc"), "repro"], repo, env=env)
    rerun = re.findall(r"Running stage '([^']+)'", second)
    filled, missing = filled_cells(repo)
    # the data stages' weights check ran on every stand-in (its line per file checked)
    checked = set(re.findall(r"^weights: \S+ (\S+) SHA-256 [0-9a-f]+\.\.\. as expected$", first, re.MULTILINE))
    unchecked = sorted(str(w) for w in stand_in_weights if str(w) not in checked)
    summary = {
        "profile": args.profile,
        "wall_seconds": round(seconds),
        "stages": stages,
        "second_repro_ran": rerun,
        "table_cells_filled": filled,
        "table_cells_missing": missing,
        "weights_checked": sorted(checked),
        "weights_unchecked": unchecked,
        "disk_gb": round(footprint_bytes(repo) / 1e9, 2),
    }
    failed = bool(rerun or missing or not filled or unchecked)
    summary["copy_kept"] = str(repo) if failed or args.keep else None
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"\n{args.profile}: {len(stages)} stages in {seconds:.0f} s; {filled} table cells filled; "
        f"second dvc repro ran {len(rerun)} stages; the copy took {summary['disk_gb']} GB of disk; "
        f"summary: {args.out / 'summary.json'}"
    )
    if failed:
        print(
            f"FAILED: second repro ran {rerun}; runs in no table cell: {missing}; weights not checked: {unchecked}. "
            f"The copy is kept to be looked at: {repo}",
            file=sys.stderr,
        )
        return 1
    if args.keep:
        print(f"the copy is kept (--keep): {repo}")
    else:
        shutil.rmtree(repo)
        print(f"the copy is deleted ({summary['disk_gb']} GB free again; --keep keeps it)")
    return 0


if __name__ == "__main__":
    with one_line_errors():  # a bad table file of the copy: one error line naming it, exit code 2
        raise SystemExit(main())
