import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from rambo.retrieval import export
from rambo.retrieval.train import CONFIG_DIR, train

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    data_dir, out = tmp_path_factory.mktemp("data"), tmp_path_factory.mktemp("run")
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=["profile=tiny", f"data_dir={data_dir}", f"output_dir={out}", "wandb.mode=disabled", "epochs=1"],
        )
    train(cfg)
    return out / "checkpoint.pt", data_dir / "synthetic_tiny"


def test_export_writes_pair_scores_and_retrievals(trained_run, tmp_path):
    checkpoint, root = trained_run
    summary = export.main(
        ["--checkpoint", str(checkpoint), "--out-dir", str(tmp_path), "--max-queries", "10", "--top-k", "3"]
    )
    with np.load(tmp_path / "scores.npz") as dump:
        scores, relevant = dump["scores"], dump["relevant"]
    with np.load(tmp_path / "retrievals.npz") as dump:
        query, results, correct = dump["query"], dump["results"], dump["correct"]
    n_test = summary["pairs"] // 10 + 1  # every query is paired with all test images but itself
    assert scores.shape == relevant.shape == (10 * (n_test - 1),)
    assert relevant.dtype == bool and np.all(np.abs(scores) <= 1 + 1e-5)
    assert query.shape == (10,) and results.shape == correct.shape[:2] + () == (10, 3)
    assert all((root / p).is_file() for p in query) and all((root / p).is_file() for p in results.ravel())
    assert not np.any(results == query[:, None])  # a query is never its own result
    lines = (root / "Ebay_test.txt").read_text().split("\n")[1:]
    classes = {path: class_id for _, class_id, _, path in (line.split() for line in lines if line.strip())}
    assert correct.tolist() == [[classes[r] == classes[q] for r in row] for q, row in zip(query, results)]


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no checkpoint"):
        export.main(["--checkpoint", str(tmp_path / "none.pt"), "--out-dir", str(tmp_path)])
