import os

import pytest
import torch

from rambo.core.atomic import save_atomically, write_text_atomically


def test_write_text_atomically_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "metrics.json"
    write_text_atomically(path, "one")
    write_text_atomically(path, "two")
    assert path.read_text() == "two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["metrics.json"]


def test_a_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_atomically({"epoch": 1}, path)

    def crash(obj, f):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        save_atomically({"epoch": 2}, path)
    monkeypatch.undo()
    assert torch.load(path)["epoch"] == 1
    assert os.listdir(tmp_path) == ["checkpoint.pt"]
