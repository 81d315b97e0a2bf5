import pytest

from rambo.harness.wandb_run import decide_mode, start_run


def test_mode_is_decided_before_init(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    assert decide_mode("auto") == "offline"
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert decide_mode("auto") == "online"  # a key in ~/.netrc (what `wandb login` writes)
    (tmp_path / ".netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert decide_mode("auto") == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert decide_mode("auto") == "disabled"
    assert decide_mode("offline") == "offline"
    assert start_run("disabled", "p", "g", "n", {}, tmp_path) is None
    with pytest.raises(ValueError, match="wandb.mode"):
        decide_mode("sometimes")


def test_an_offline_run_is_resumed_by_its_id(monkeypatch, tmp_path):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    first = start_run("offline", "p", "g", "n", {"a": 1}, tmp_path)
    run_id = first.id
    first.log({"x": 1}, step=1)
    first.finish()
    again = start_run("offline", "p", "g", "n", {"a": 1}, tmp_path, run_id=run_id)
    assert again.id == run_id
    again.finish()
