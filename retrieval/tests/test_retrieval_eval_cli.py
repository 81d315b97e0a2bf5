"""`rambo-eval` (rambo.retrieval.eval_cli): the numbers are retrieval_metrics', bad input is named."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rambo.retrieval.eval_cli import main, run
from rambo.retrieval.evaluate import retrieval_metrics

torch.set_num_threads(1)
BIN = Path(sys.executable).parent


def _set(n, dim=8, classes=6, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, dim)).astype(np.float32), rng.integers(0, classes, n).astype(np.int64)


def _save(path: Path, array: np.ndarray, as_tensor=True) -> str:
    if path.suffix == ".npy":
        np.save(path, array)
    else:
        torch.save(torch.from_numpy(array) if as_tensor else array, path)
    return str(path)


def _error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".npy", ".pt"])
def test_same_set_equals_retrieval_metrics_and_writes_json(tmp_path, suffix, capsys):
    embeddings, labels = _set(40)
    out = tmp_path / "m.json"
    got = run(
        [
            "--embeddings",
            _save(tmp_path / f"e{suffix}", embeddings),
            "--labels",
            _save(tmp_path / f"l{suffix}", labels),
            "--ks",
            "1",
            "2",
            "4",
            "--out",
            str(out),
        ]
    )
    expected = retrieval_metrics(embeddings, labels, (1, 2, 4))
    assert got == pytest.approx(expected)
    assert json.loads(out.read_text()) == pytest.approx(expected)
    printed = capsys.readouterr().out
    assert "R@1" in printed and "MAP@R" in printed and "R-precision" in printed


@pytest.mark.parametrize("suffix", [".npy", ".pt"])
def test_query_gallery_equals_retrieval_metrics(tmp_path, suffix):
    query, query_labels = _set(15, seed=1)
    gallery, gallery_labels = _set(30, seed=2)
    got = run(
        [
            "--query-embeddings",
            _save(tmp_path / f"q{suffix}", query),
            "--query-labels",
            _save(tmp_path / f"ql{suffix}", query_labels),
            "--gallery-embeddings",
            _save(tmp_path / f"g{suffix}", gallery),
            "--gallery-labels",
            _save(tmp_path / f"gl{suffix}", gallery_labels),
            "--ks",
            "1",
            "5",
            "10",
        ]
    )
    assert got == pytest.approx(retrieval_metrics(gallery, gallery_labels, (1, 5, 10), query, query_labels))


def test_pt_file_holding_a_numpy_array_and_float64_embeddings(tmp_path):
    embeddings, labels = _set(20)
    got = run(
        [
            "--embeddings",
            _save(tmp_path / "e.pt", embeddings.astype(np.float64), as_tensor=False),
            "--labels",
            _save(tmp_path / "l.pt", labels, as_tensor=False),
            "--ks",
            "1",
        ]
    )
    assert got == pytest.approx(retrieval_metrics(embeddings, labels, (1,)))


def test_default_ks_are_clipped_to_the_gallery(tmp_path, capsys):
    embeddings, labels = _set(50)
    got = run(["--embeddings", _save(tmp_path / "e.npy", embeddings), "--labels", _save(tmp_path / "l.npy", labels)])
    assert got == pytest.approx(retrieval_metrics(embeddings, labels, (1, 10)))  # 100, 1000 > 49 others
    assert "[100, 1000]" in capsys.readouterr().err


def test_missing_file(tmp_path, capsys):
    embeddings, _ = _set(10)
    err = _error(
        capsys, ["--embeddings", _save(tmp_path / "e.npy", embeddings), "--labels", str(tmp_path / "nope.npy")]
    )
    assert "nope.npy: no such file" in err


def test_unknown_extension(tmp_path, capsys):
    embeddings, labels = _set(10)
    csv = tmp_path / "l.csv"
    np.savetxt(csv, labels)
    err = _error(capsys, ["--embeddings", _save(tmp_path / "e.npy", embeddings), "--labels", str(csv)])
    assert "unknown extension '.csv'" in err


def test_shape_mismatch_count_and_dimension(tmp_path, capsys):
    embeddings, labels = _set(10)
    err = _error(
        capsys,
        ["--embeddings", _save(tmp_path / "e.npy", embeddings), "--labels", _save(tmp_path / "l.npy", labels[:7])],
    )
    assert "shape mismatch" in err and "10 embeddings" in err and "7 labels" in err
    query, query_labels = _set(5, dim=4)
    err = _error(
        capsys,
        [
            "--query-embeddings",
            _save(tmp_path / "q.npy", query),
            "--query-labels",
            _save(tmp_path / "ql.npy", query_labels),
            "--gallery-embeddings",
            str(tmp_path / "e.npy"),
            "--gallery-labels",
            _save(tmp_path / "gl.npy", labels),
        ],
    )
    assert "shape mismatch" in err and "dimension 4" in err
    err = _error(
        capsys, ["--embeddings", _save(tmp_path / "v.npy", embeddings[0]), "--labels", str(tmp_path / "l.npy")]
    )
    assert "[n, dim]" in err


def test_non_integer_labels(tmp_path, capsys):
    embeddings, labels = _set(10)
    err = _error(
        capsys,
        ["--embeddings", _save(tmp_path / "e.pt", embeddings), "--labels", _save(tmp_path / "l.pt", labels + 0.5)],
    )
    assert "labels must be integer class ids" in err and "float64" in err


def test_nan_embeddings(tmp_path, capsys):
    embeddings, labels = _set(10)
    embeddings[3, 1] = np.nan
    err = _error(
        capsys, ["--embeddings", _save(tmp_path / "e.npy", embeddings), "--labels", _save(tmp_path / "l.npy", labels)]
    )
    assert "NaN or inf" in err and "[3]" in err


def test_pt_holding_something_else(tmp_path, capsys):
    embeddings, labels = _set(10)
    torch.save({"embeddings": torch.from_numpy(embeddings)}, tmp_path / "e.pt")
    err = _error(capsys, ["--embeddings", str(tmp_path / "e.pt"), "--labels", _save(tmp_path / "l.npy", labels)])
    assert "holds a dict, not a tensor or array" in err


def test_arguments_of_both_modes_or_of_neither(tmp_path, capsys):
    embeddings, labels = _set(10)
    e, lab = _save(tmp_path / "e.npy", embeddings), _save(tmp_path / "l.npy", labels)
    assert "not both" in _error(capsys, ["--embeddings", e, "--labels", lab, "--query-embeddings", e])
    assert "all four" in _error(capsys, ["--query-embeddings", e, "--query-labels", lab])
    assert "nothing to evaluate" in _error(capsys, [])


def test_console_scripts_are_installed(tmp_path):
    script = BIN / "rambo-eval"
    if not script.exists():
        script = shutil.which("rambo-eval")
    assert script, "rambo-eval is not installed: pip install -e ./retrieval"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "--query-embeddings" in result.stdout
    embeddings, labels = _set(12)
    result = subprocess.run(
        [
            str(script),
            "--embeddings",
            _save(tmp_path / "e.npy", embeddings),
            "--labels",
            _save(tmp_path / "l.npy", labels[:5]),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "shape mismatch" in result.stderr
    # A successful evaluation exits 0, with the metrics on stdout and nothing on stderr (an earlier
    # version exited 1 with the metrics dict on stderr, stopping any `&&` chain or `set -e` script).
    out = tmp_path / "m.json"
    result = subprocess.run(
        [
            str(script),
            "--embeddings",
            _save(tmp_path / "e.npy", embeddings),
            "--labels",
            _save(tmp_path / "l.npy", labels),
            "--ks",
            "1",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "12 queries, 11 gallery items per query" and lines[-1] == f"wrote {out}"
    written = json.loads(out.read_text())
    assert sorted(line.split()[0] for line in lines[1:-1]) == sorted(written) and "R@1" in written
    assert float(lines[1].split()[1]) == pytest.approx(written[lines[1].split()[0]], abs=5e-5)
    assert main(["--embeddings", str(tmp_path / "e.npy"), "--labels", str(tmp_path / "l.npy")]) == 0
