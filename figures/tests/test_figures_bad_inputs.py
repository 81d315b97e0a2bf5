"""A figure whose input (a score or retrieval dump, the SoDeep checkpoint, a benchmark) is missing,
damaged or of another form stops with one line naming the file and what to do, exit code 2, and
writes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch


def tree_digest(folder: Path) -> dict[str, str]:
    """``{path: SHA-256}`` of every file under ``folder``."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def scores_dump(path: Path, **arrays) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    defaults = {"scores": np.array([[0.9, 0.1], [0.2, 0.8]]), "relevant": np.array([[True, False], [False, True]])}
    np.savez(path, **{**defaults, **arrays})
    return path


def cut(path: Path, size: int) -> Path:
    path.write_bytes(path.read_bytes()[:size])
    return path


def bench(path: Path, rows) -> Path:
    path.write_text(json.dumps({"meta": {"threads": 1}, "rows": rows}))
    return path


EXPORT = "results/mini/exports/synthetic_log"
EXPORT_FIX = (
    "write it again with `python -m rambo.retrieval.export` (the pipeline: `dvc repro retrieval_export@synthetic_log`)"
)


def damaged_scores(root: Path):
    good = scores_dump(root / "other.npz")
    bad = cut(scores_dump(root / EXPORT / "scores.npz"), 100)
    return ["fig3_margin_scores", "--without-margin", str(bad), "--with-margin", str(good)], (
        f"{bad}: not a readable .npz archive (BadZipFile: File is not a zip file); {EXPORT_FIX}"
    )


def scores_without_relevant(root: Path):
    path = root / EXPORT / "scores.npz"
    path.parent.mkdir(parents=True)
    np.savez(path, scores=np.zeros((2, 2)))
    return ["fig3_margin_scores", "--without-margin", str(path), "--with-margin", str(path)], (
        f"{path}: lacks the array(s) ['relevant'] (it has ['scores']); it needs ['scores', 'relevant']; {EXPORT_FIX}"
    )


def scores_of_other_shapes(root: Path):
    path = scores_dump(root / "scores.npz", relevant=np.array([True, False]))
    return ["fig3_margin_scores", "--without-margin", str(path), "--with-margin", str(path)], (
        f"{path}: scores (2, 2) and relevant (2,) differ in shape; write it again with `python -m rambo.retrieval.export`"
    )


def retrievals_missing(root: Path):
    path = root / EXPORT / "retrievals.npz"
    return ["fig4_retrievals", "--retrievals", str(path)], f"{path}: not found; {EXPORT_FIX}"


def damaged_sorter(root: Path):
    path = root / "sorter" / "sodeep_sorter.pt"
    path.parent.mkdir()
    torch.save({"state_dict": {}, "config": {"hidden": 2, "layers": 1, "length": 4}}, path)
    cut(path, 200)
    return ["fig6_surrogate_landscapes", "--sodeep", str(path)], (
        f"{path}: not a readable torch file (RuntimeError: PytorchStreamReader failed reading zip archive: failed "
        f"finding central directory); train it (again) with `python -m rambo.figures.train_sodeep --out "
        f"{path.parent}` (the pipeline: `dvc repro figures_sodeep`)"
    )


def sorter_of_another_config(root: Path):
    path = root / "sodeep_sorter.pt"
    torch.save({"state_dict": {}, "config": {"hidden": 2}}, path)
    return ["fig6_surrogate_landscapes", "--sodeep", str(path)], (
        f"{path}: config.layers is missing (config has hidden); train it (again) with `python -m "
        f"rambo.figures.train_sodeep --out {root}` (the pipeline: `dvc repro figures_sodeep`)"
    )


def truncated_benchmark(root: Path):
    path = cut(bench(root / "ap_loss.json", [{"n": 10, "ours_ms": 1.0, "sort_ms": 1.0}]), 30)
    return ["table6_speed", "--bench", str(path)], (
        f"{path}: not valid JSON (truncated at byte 30); write it with `make bench` (python -m rambo.core.benchmark)"
    )


def benchmark_row_without_sort(root: Path):
    path = bench(root / "ap_loss.json", [{"n": 10, "ours_ms": 1.0}])
    return ["table6_speed", "--bench", str(path)], (
        f"{path}: rows[0].sort_ms is missing (rows[0] has n, ours_ms); write it with `make bench` "
        "(python -m rambo.core.benchmark)"
    )


CASES = [
    damaged_scores,
    scores_without_relevant,
    scores_of_other_shapes,
    retrievals_missing,
    damaged_sorter,
    sorter_of_another_config,
    truncated_benchmark,
    benchmark_row_without_sort,
]


@pytest.mark.parametrize("case", CASES, ids=[case.__name__ for case in CASES])
def test_a_bad_figure_input_is_one_error_line_and_nothing_is_written(tmp_path, case):
    (module, *args), message = case(tmp_path)
    out = tmp_path / "out"
    before = tree_digest(tmp_path)

    done = subprocess.run(
        [sys.executable, "-m", f"rambo.figures.{module}", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"},
    )

    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"error: {message}\n")
    assert tree_digest(tmp_path) == before
    assert not out.exists()
