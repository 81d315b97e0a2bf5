import logging
import sys

import pytest

from rambo.harness.pretrained import cache_path, find_weights
from rambo.harness.run_log import log_done, log_epoch, progress


def test_progress_bars_only_on_a_terminal(monkeypatch):
    items = [1, 2, 3]
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert progress(items) is items  # under DVC or a batch scheduler: no bar in the log
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    bar = progress(items, desc="epoch 1")
    assert bar is not items and list(bar) == items
    assert progress(items, enabled=False) is items


def test_one_summary_line_per_epoch_and_the_outputs_at_the_end(caplog):
    with caplog.at_level(logging.INFO, logger="rambo"):
        log_epoch(3, 8, {"loss": 0.123456, "lr": 0.001, "test/R@1": 0.54})
        log_done({"AP50": 0.5}, {"metrics": "out/metrics.json"})
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0] == "epoch 3/8 loss 0.1235 lr 0.001 test/R@1 0.54"
    assert lines[1] == "done: AP50 0.5" and lines[2] == "  metrics: out/metrics.json"


def test_weights_come_from_a_file_or_the_cache_and_are_never_downloaded(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    url = "https://download.pytorch.org/models/resnet18-f37072fd.pth"
    assert cache_path(url) == tmp_path / "checkpoints" / "resnet18-f37072fd.pth"
    with pytest.raises(FileNotFoundError, match=r"wget -O .*\n.*model.pretrained=false"):
        find_weights("resnet18", url)
    cache_path(url).parent.mkdir()
    cache_path(url).write_bytes(b"w")
    assert find_weights("resnet18", url) == cache_path(url)
    own = tmp_path / "mine.pth"
    own.write_bytes(b"w")
    assert find_weights("resnet18", url, own) == own
