import errno
import os
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


def test_a_set_aside_takes_a_free_name_and_never_replaces_a_file(tmp_path):
    """``.damaged`` taken by a file, ``.damaged.1`` by a link that points nowhere: the third name."""
    from rambo.harness.checkpoint import set_aside
    from rambo.harness.testing import tree_digest

    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"third")
    (tmp_path / "checkpoint.pt.damaged").write_bytes(b"first")
    (tmp_path / "checkpoint.pt.damaged.1").symlink_to(tmp_path / "nowhere")
    before = tree_digest(tmp_path)
    aside = set_aside(path, "damaged")
    assert aside == tmp_path / "checkpoint.pt.damaged.2" and not path.exists()
    after = tree_digest(tmp_path)
    assert after.pop("checkpoint.pt.damaged.2") == before.pop("checkpoint.pt")
    assert after == before and os.readlink(tmp_path / "checkpoint.pt.damaged.1") == str(tmp_path / "nowhere")


def test_a_set_aside_on_a_file_system_without_hard_links_reserves_its_name_first(tmp_path, monkeypatch):
    from rambo.harness.checkpoint import set_aside

    def no_links(*args, **kwargs):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    (tmp_path / "checkpoint.pt.stale").write_bytes(b"first")
    (tmp_path / "checkpoint.pt").write_bytes(b"second")
    assert set_aside(tmp_path / "checkpoint.pt", "stale") == tmp_path / "checkpoint.pt.stale.1"
    assert (tmp_path / "checkpoint.pt.stale").read_bytes() == b"first"
    assert (tmp_path / "checkpoint.pt.stale.1").read_bytes() == b"second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt.stale", "checkpoint.pt.stale.1"]


def test_cuda_states_of_another_number_of_devices_are_the_users_to_fix(monkeypatch):
    """A checkpoint of a 2-GPU run resumed on a machine with 1 GPU: an input error (one line, exit 2)."""
    from rambo.harness.checkpoint import DeviceCountMismatch
    from rambo.harness.config_check import InputError

    states = rng_states()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(DeviceCountMismatch) as caught:
        set_rng_states({**states, "cuda": [torch.zeros(16, dtype=torch.uint8)] * 2})
    assert isinstance(caught.value, InputError) and isinstance(caught.value, ValueError)
    assert str(caught.value) == (
        "checkpoint holds 2 CUDA generator states, this machine has 1 devices: resume on as many devices"
    )
