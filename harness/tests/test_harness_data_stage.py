from pathlib import Path

from rambo.harness import data_stage
from rambo.harness.download import DownloadError


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

    assert data_stage.DataStage("prog", "d", configs, ("a", "b"), prepare_one).main(
                           ["--data-dir", "/d", "--data", "a", "b", "--no-verify", "--mirror", "/m", "--archives", "/k",
                            "--", "data.size=5"]) == 0  # fmt: skip
    # --no-verify no longer turns pinned checksums off (issue 21): it is ignored, and says so.
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
