import hashlib
from pathlib import Path

import pytest

from rambo.harness import data_stage
from rambo.harness.download import DownloadError
from rambo.harness.weights import write_sha256sums


def app_configs(folder):
    """A minimal app config tree: train.yaml with a data group, as both apps have."""
    (folder / "data").mkdir(parents=True)
    (folder / "train.yaml").write_text("defaults:\n  - _self_\n  - data: a\ndata_dir: data\noutput_dir: x\n")
    (folder / "data" / "a.yaml").write_text("root: ${data_dir}/a\nsize: 1\n")
    (folder / "data" / "b.yaml").write_text("root: ${data_dir}/b\nsize: 2\n")
    return folder


def test_each_dataset_is_prepared_where_the_runs_read_it(tmp_path, capsys):
    configs = app_configs(tmp_path / "configs")
    seen = []

    def prepare_one(name, data, source):
        seen.append((name, data.root, data.size, source))
        return data.root

    assert (
        data_stage.DataStage("prog", "d", configs, ("a", "b"), prepare_one).main(
            [
                "--data-dir",
                "/d",
                "--data",
                "a",
                "b",
                "--no-verify",
                "--mirror",
                "/m",
                "--archives",
                "/k",
                "--",
                "data.size=5",
            ]
        )
        == 0
    )
    # --no-verify does not turn pinned checksums off: it is ignored, and says so.
    source = data_stage.Source(verify=True, mirror="/m", archive_dir=Path("/k"))
    assert seen == [("a", "/d/a", 5, source), ("b", "/d/b", 5, source)]
    captured = capsys.readouterr()
    assert captured.out.split() == ["/d/a", "/d/b"] and "--no-verify is ignored" in captured.err


def test_a_failed_download_is_one_clean_error_line(tmp_path, capsys):
    configs = app_configs(tmp_path / "configs")

    def offline(name, data, source):
        raise DownloadError("could not download x\nFetch it by hand ...")

    assert data_stage.DataStage("prog", "d", configs, ("a",), offline).main(["--data-dir", "/d", "--data", "a"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: could not download x") and "Traceback" not in err


def app_with_rows(folder, weights: bytes = b"big weights"):
    """An app config tree with a model and an experiment group, and the official URL of backbone
    ``big``: its file name carries the SHA-256 prefix of ``weights``, as torchvision's names do."""
    configs = app_configs(folder)
    (configs / "train.yaml").write_text(
        "defaults:\n  - _self_\n  - data: a\n  - model: small\n  - experiment: null\ndata_dir: data\noutput_dir: x\n"
    )
    (configs / "model").mkdir()
    (configs / "model" / "small.yaml").write_text("backbone: small\npretrained: false\nweights_path: null\n")
    (configs / "model" / "big.yaml").write_text("backbone: big\npretrained: true\nweights_path: null\n")
    (configs / "experiment").mkdir()
    for row, model in (("row_small", "small"), ("row_big", "big"), ("row_big2", "big")):
        (configs / "experiment" / f"{row}.yaml").write_text(
            f"# @package _global_\ndefaults:\n  - override /model: {model}\n"
        )
    url = f"https://example.org/models/big-{hashlib.sha256(weights).hexdigest()[:8]}.pth"

    def weights_url(backbone):
        if backbone != "big":
            raise ValueError(f"no ImageNet weights for backbone {backbone!r}")
        return url

    seen = []
    stage = data_stage.DataStage(
        "prog",
        "d",
        configs,
        ("a",),
        lambda name, data, source: seen.append(name) or data.root,
        task="app",
        weights_url=weights_url,
    )
    return stage, url, seen


def test_rows_without_pretrained_weights_make_the_check_a_no_op(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty"))
    stage, _, seen = app_with_rows(tmp_path / "configs")
    assert stage.main(["--data-dir", "/d", "--data", "a", "--rows", "row_small"]) == 0
    assert seen == ["a"] and "weights: none needed (model.pretrained is false in all 1 rows)" in capsys.readouterr().err
    assert stage.weights_files(["row_big"], ["model.pretrained=false"]) == []


def test_missing_weights_stop_the_stage_before_any_dataset_naming_file_and_url(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "home"))
    stage, url, seen = app_with_rows(tmp_path / "configs")
    assert stage.main(["--data-dir", "/d", "--data", "a", "--rows", "row_small", "row_big", "row_big2"]) == 1
    err = capsys.readouterr().err
    cached = tmp_path / "home" / "hub" / "checkpoints" / url.rsplit("/", 1)[1]
    assert err.startswith("error: 1 pretrained weights file(s) missing") and "Traceback" not in err
    assert f"big (rows row_big, row_big2): {cached} is missing" in err and f"wget -O {cached} {url}" in err
    assert seen == []  # no dataset was prepared


def test_weights_in_the_torch_hub_cache_or_at_weights_path_pass(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "home"))
    stage, url, seen = app_with_rows(tmp_path / "configs")
    cached = tmp_path / "home" / "hub" / "checkpoints" / url.rsplit("/", 1)[1]
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"big weights")
    assert stage.check_weights(["row_big", "row_small"]) == [cached]
    own = tmp_path / "own.pth"
    own.write_bytes(b"big weights")
    assert stage.check_weights(["row_big"], [f"model.weights_path={own}"]) == [own]
    own.write_bytes(b"other weights")  # weights_path is what the runs read: the good cached copy does not count
    assert stage.main(["--data-dir", "/d", "--data", "a", "--rows", "row_big", "--", f"model.weights_path={own}"]) == 1
    err = capsys.readouterr().err
    assert f"{own} has SHA-256 {hashlib.sha256(b'other weights').hexdigest()}, expected {url[-12:-4]}" in err
    assert seen == []


def test_rows_come_from_a_pipeline_params_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "home"))
    stage, url, seen = app_with_rows(tmp_path / "configs")
    params = tmp_path / "params.yaml"
    params.write_text(
        "app:\n  experiments: [row_small]\n  ablations: [row_big]\n  warm_start:\n    experiments: [row_big2]\n"
        "other:\n  experiments: [elsewhere]\n"
    )
    assert data_stage.rows_of_params(params, "app") == ["row_small", "row_big", "row_big2"]
    assert stage.main(["--data-dir", "/d", "--rows-from", str(params), "--data", "a"]) == 1
    assert "big (rows row_big, row_big2)" in capsys.readouterr().err
    with pytest.raises(data_stage.PrepareError, match="has no nothere.experiments"):
        data_stage.rows_of_params(params, "nothere")


def test_weights_overrides_and_a_sha256sums_check_stand_ins_as_another_profile_would(tmp_path, capsys, monkeypatch):
    """paper-smoke: its runs load no weights; the check composes the rows as the paper profile does
    and takes the stand-ins' hashes from a SHA256SUMS, which the official hash would refuse."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "home"))
    stage, url, seen = app_with_rows(tmp_path / "configs")
    stand_in = tmp_path / "home" / "hub" / "checkpoints" / url.rsplit("/", 1)[1]
    stand_in.parent.mkdir(parents=True)
    stand_in.write_bytes(b"stand-in")
    sums = write_sha256sums(tmp_path / "SHA256SUMS", [stand_in])
    runs = ["--", "model.pretrained=false"]
    assert stage.main(["--data-dir", "/d", "--data", "a", "--rows", "row_big", *runs]) == 0
    assert "none needed" in capsys.readouterr().err
    as_paper = ["--data-dir", "/d", "--data", "a", "--rows", "row_big", "--weights-overrides", "model.pretrained=true"]
    assert stage.main([*as_paper, *runs]) == 1
    assert f"expected {url[-12:-4]} (the prefix in the official name" in capsys.readouterr().err
    assert stage.main([*as_paper, "--weights-sums", str(sums), *runs]) == 0
    assert f"from {sums}, not its official one" in capsys.readouterr().err
    assert seen == ["a", "a"]  # the runs' own check (no weights) and the one with the SHA256SUMS went on to the data


def test_a_pretrained_row_of_a_backbone_without_weights_is_named(tmp_path, capsys):
    stage, _, _ = app_with_rows(tmp_path / "configs")
    assert stage.main(["--data-dir", "/d", "--data", "a", "--rows", "row_small", "--", "model.pretrained=true"]) == 1
    assert capsys.readouterr().err.startswith("error: row row_small: no ImageNet weights for backbone 'small'")


@pytest.mark.parametrize(
    "app, option, line",
    [
        (
            "retrieval",
            "batch_size=7",
            "row synthetic_log: batch_size=7: must be a multiple of data.sampler.samples_per_class=4 (a batch is "
            "classes x 4 images), e.g. batch_size=4 or 8",
        ),
        ("detection", "schedule.lr=0", "row mini_ce: schedule.lr=0: must be a number > 0 (learning rate)"),
    ],
)
def test_a_value_the_runs_would_refuse_stops_the_data_stage_before_any_dataset(tmp_path, app, option, line):
    """The data stage runs each row's own config check (every seed of params.yaml): the pipeline
    stops there, before DVC removes a training stage's outputs; nothing is written."""
    import shutil
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    shutil.copy(repo / "params.yaml", tmp_path / "params.yaml")
    params = (tmp_path / "params.yaml").read_text().replace("seeds: 0,1,2 ", "seeds: 0,-1,2 ")
    (tmp_path / "params.yaml").write_text(params)
    before = sorted(p.name for p in tmp_path.iterdir())
    command = [sys.executable, "-m", f"rambo.{app}.prepare", "--data-dir", "data", "--rows-from", "params.yaml"]
    done = subprocess.run(
        [*command, "--data", "synthetic", "--", option], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert f"error: params.yaml: {line}" in lines
    assert f"error: params.yaml: {line.split(':')[0]}: seed=-1: must be an integer >= 0" in lines
    assert all(text.startswith("error: params.yaml: row ") for text in lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
