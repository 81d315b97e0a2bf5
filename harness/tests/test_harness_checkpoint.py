import pickle
import random

import numpy as np
import pytest
import torch

from rambo.harness.checkpoint import load_checkpoint, rng_states, save_checkpoint, set_rng_states


def draws():
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def test_every_generator_is_restored_through_a_weights_only_load(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    draws()
    save_checkpoint({"rng": rng_states(), "epoch": 4}, tmp_path / "checkpoint.pt")
    expected = draws()
    draws()  # move every generator on
    state = load_checkpoint(tmp_path / "checkpoint.pt")  # weights_only=True inside
    set_rng_states(state["rng"])
    assert draws() == expected and state["epoch"] == 4
    assert set(state["rng"]) >= {"python", "numpy", "torch"}


def test_a_checkpoint_with_code_in_it_is_refused(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("this would run on load",))

    path = tmp_path / "evil.pt"
    with open(path, "wb") as handle:
        pickle.dump({"model": Payload()}, handle, protocol=2)
    with pytest.raises(ValueError, match="not a checkpoint this project can load safely"):
        load_checkpoint(path)


def test_missing_and_foreign_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "none.pt")
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(ValueError, match="holds a list"):
        load_checkpoint(tmp_path / "list.pt")
    (tmp_path / "text.pt").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="text.pt"):
        load_checkpoint(tmp_path / "text.pt")
