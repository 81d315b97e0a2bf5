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


@pytest.mark.parametrize("damage", ["half", "1000 bytes", "garbage", "empty"])
def test_a_damaged_checkpoint_is_one_named_error_with_its_path_and_what_to_do(tmp_path, damage):
    from rambo.harness.checkpoint import NEXT_STEP, DamagedCheckpoint

    path = tmp_path / "checkpoint.pt"
    save_checkpoint({"weight": torch.randn(64, 512), "rng": rng_states(), "epoch": 1}, path)
    whole = path.read_bytes()
    path.write_bytes(
        {"half": whole[: len(whole) // 2], "1000 bytes": whole[:1000], "garbage": b"\x89garbage" * 500, "empty": b""}[
            damage
        ]
    )
    with pytest.raises(DamagedCheckpoint) as caught:
        load_checkpoint(path)
    error = caught.value
    assert isinstance(error, ValueError) and error.path == path
    assert str(error) == f"{path} is a damaged checkpoint ({error.reason}); {NEXT_STEP}"
    assert "\n" not in str(error)
    expected = {
        "half": "",
        "1000 bytes": "failed finding central directory",
        "garbage": "not a checkpoint this project can load safely",
        "empty": "it is empty",
    }[damage]
    assert expected in error.reason
