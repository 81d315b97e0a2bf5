import json

import pytest

from rambo.core.benchmark import PAPER_TABLE_6
from rambo.figures.table6_speed import load_benchmark


def _bench(path, device, rows):
    path.write_text(json.dumps({"meta": {"threads": 1, "device_name": device}, "rows": rows}))
    return path


def test_table6_plots_runs_beside_the_paper(run_figure, tmp_path, assert_figure_written):
    cpu = _bench(
        tmp_path / "cpu.json",
        "cpu",
        [
            {"n": 10**6, "device": "cpu", "ours_ms": 40.0, "reference_ms": 400.0, "sort_ms": 20.0},
            {"n": 10**5, "device": "cpu", "ours_ms": 4.0, "reference_ms": 30.0, "sort_ms": 2.0},
        ],
    )
    gpu = _bench(tmp_path / "gpu.json", "H200", [{"n": 10**8, "device": "cuda", "ours_ms": 90.0, "sort_ms": 50.0}])
    out = run_figure("table6_speed", "--bench", str(cpu), str(gpu))
    assert_figure_written(out, "table6_speed")
    runs = json.loads((out / "table6_speed.json").read_text())["runs"]
    assert [row["n"] for row in runs[0]["rows"]] == [10**5, 10**6]  # sorted by length
    assert runs[0]["rows"][1]["speedup_vs_reference"] == pytest.approx(10.0)
    assert runs[0]["rows"][0]["paper_ms"] == PAPER_TABLE_6["cpu"][10**5]
    assert runs[1]["rows"][0]["paper_ms"] == PAPER_TABLE_6["cuda"][10**8]
    assert runs[1]["rows"][0]["speedup_vs_reference"] is None


def test_load_benchmark_rejects_bad_files(tmp_path):
    with pytest.raises(ValueError, match="make bench"):
        load_benchmark(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="JSON"):
        load_benchmark(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="sort_ms"):
        load_benchmark(_bench(tmp_path / "row.json", "cpu", [{"n": 10, "ours_ms": 1.0}]))
    with pytest.raises(ValueError, match="rows"):
        load_benchmark(_bench(tmp_path / "empty.json", "cpu", []))
