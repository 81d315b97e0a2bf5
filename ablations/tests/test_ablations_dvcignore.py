"""DVC's view of a run folder: the per-run logs and Hydra's records are not results, so
they are out of the output hashes (dvc.lock changes only when results change), while the results
stay in. Asked of the real dvc, on the repository's own .dvcignore."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def dvc_ignores(paths: list[str]) -> set[str]:
    dvc = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))
    done = subprocess.run([dvc, "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr  # 1: none of them is ignored
    return set(done.stdout.split())


@pytest.mark.skipif(not (ROOT / ".dvc").is_dir(), reason="not a DVC checkout")
def test_logs_and_hydra_records_are_out_of_the_output_hashes_and_results_are_in():
    run = "results/mini/runs/retrieval/synthetic_log/seed0"
    logs = [f"{run}/train.log", f"{run}/.hydra/config.yaml", "results/mini/runs/retrieval/synthetic_log/multirun.yaml"]
    kept = [f"{run}/metrics.json", f"{run}/curve.json", f"{run}/headline.json"]
    assert dvc_ignores(logs + kept) == set(logs)


@pytest.mark.skipif(not (ROOT / ".dvc").is_dir(), reason="not a DVC checkout")
def test_the_draws_text_is_out_of_the_tables_stage_hash_and_their_runs_are_in():
    """``results/draws`` is a dep of the tables stage: its README and each draw's own tables are text
    to read, so an edit of them leaves ``dvc.lock`` as it is; what the stage reads stays in."""
    text = [
        "results/draws/README.md",
        "results/draws/native/claims.md",
        "results/draws/native/tables.md",
    ]
    read = [
        "results/draws/native/runs/retrieval/synthetic_log/seed0/metrics.json",
        "results/draws/native/fig2_minibatch_map.json",
    ]
    assert dvc_ignores(text + read) == set(text)
