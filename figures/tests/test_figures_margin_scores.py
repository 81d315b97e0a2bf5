import json

import numpy as np
import pytest
import torch

from rambo.figures.score_distributions import load_pair_scores, positive_above_negative


def brute_force_positive_above_negative(positives, negatives):
    total = 0.0
    for p in positives.tolist():
        for n in negatives.tolist():
            total += 1.0 if p > n else 0.5 if p == n else 0.0
    return total / (len(positives) * len(negatives))


def test_positive_above_negative_matches_pair_count():
    positives = torch.tensor([0.3, 0.5, 0.5, 0.9], dtype=torch.float64)
    negatives = torch.tensor([0.1, 0.5, 0.7, 0.2, 0.5], dtype=torch.float64)
    assert positive_above_negative(positives, negatives) == pytest.approx(
        brute_force_positive_above_negative(positives, negatives), abs=1e-12
    )
    positives, negatives = torch.randn(37, dtype=torch.float64) + 1, torch.randn(53, dtype=torch.float64)
    assert positive_above_negative(positives, negatives) == pytest.approx(
        brute_force_positive_above_negative(positives, negatives), abs=1e-12
    )


def test_load_pair_scores_reads_npz_and_pt_and_rejects_bad_files(tmp_path):
    scores = np.array([[0.9, 0.1, 0.4], [0.2, 0.8, 0.3]])
    relevant = np.array([[True, False, False], [False, True, True]])
    np.savez(tmp_path / "a.npz", scores=scores, relevant=relevant)
    torch.save({"scores": torch.from_numpy(scores), "relevant": torch.from_numpy(relevant).int()}, tmp_path / "a.pt")
    for name in ("a.npz", "a.pt"):
        positives, negatives = load_pair_scores(tmp_path / name)
        assert sorted(positives.tolist()) == [0.3, 0.8, 0.9]
        assert sorted(negatives.tolist()) == [0.1, 0.2, 0.4]
    np.savez(tmp_path / "b.npz", scores=scores)
    with pytest.raises(ValueError, match="relevant"):
        load_pair_scores(tmp_path / "b.npz")
    np.savez(tmp_path / "c.npz", scores=scores, relevant=relevant[:, :2])
    with pytest.raises(ValueError, match="shape"):
        load_pair_scores(tmp_path / "c.npz")
    with pytest.raises(ValueError, match="not found"):
        load_pair_scores(tmp_path / "missing.npz")


def _synthetic_dump(path, separation, spread, seed):
    generator = np.random.default_rng(seed)
    relevant = generator.random((20, 50)) < 0.1
    scores = np.clip(generator.normal(0.0, spread, relevant.shape) + separation * relevant, -1, 1)
    np.savez(path, scores=scores.astype(np.float32), relevant=relevant)
    return scores, relevant


@pytest.mark.outcome
def test_fig3_script_summarises_both_runs(run_figure, tmp_path, assert_figure_written):
    # Without margin: positives and negatives crowd together; with margin: separated (paper Fig. 3).
    flat, flat_relevant = _synthetic_dump(tmp_path / "no_margin.npz", separation=0.1, spread=0.05, seed=0)
    _synthetic_dump(tmp_path / "margin.npz", separation=0.6, spread=0.2, seed=1)
    out = run_figure(
        "fig3_margin_scores",
        "--without-margin",
        str(tmp_path / "no_margin.npz"),
        "--with-margin",
        str(tmp_path / "margin.npz"),
        "--margin",
        "0.05",
        "--bins",
        "20",
    )
    assert_figure_written(out, "fig3_margin_scores")
    numbers = json.loads((out / "fig3_margin_scores.json").read_text())
    without, with_margin = numbers["without margin"], numbers["with margin $\\alpha$ = 0.05"]
    assert without["positives"] == int(flat_relevant.sum())
    assert without["positive_mean"] == pytest.approx(float(flat[flat_relevant].astype(np.float32).mean()), abs=1e-6)
    assert with_margin["positive_above_negative"] > without["positive_above_negative"]


def test_fig3_subsamples_large_dumps(run_figure, tmp_path):
    _synthetic_dump(tmp_path / "a.npz", separation=0.3, spread=0.1, seed=2)
    out = run_figure(
        "fig3_margin_scores",
        "--without-margin",
        str(tmp_path / "a.npz"),
        "--with-margin",
        str(tmp_path / "a.npz"),
        "--max-pairs",
        "50",
    )
    numbers = json.loads((out / "fig3_margin_scores.json").read_text())
    assert numbers["without margin"]["positives"] == numbers["without margin"]["negatives"] == 50
