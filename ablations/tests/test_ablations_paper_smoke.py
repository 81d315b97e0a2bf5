"""paper-smoke's stand-in weights: the data stages' real check refuses them by the official hashes,
and accepts the same files only through the SHA256SUMS the smoke writes and its profile names."""

import hashlib
import os
import shlex
from pathlib import Path

import pytest
import yaml

from rambo.ablations import paper_smoke
from rambo.detection.prepare import STAGE as detection
from rambo.harness.data_stage import rows_of_params
from rambo.harness.weights import WeightsError
from rambo.retrieval.prepare import STAGE as retrieval

REPO = Path(__file__).resolve().parents[2]

SMOKE = REPO / "ablations" / "profiles" / "paper-smoke.yaml"


def weights_args(prepare: str) -> tuple[str, list[str]]:
    """The ``--weights-sums`` file and the ``--weights-overrides`` of a data stage's arguments."""
    words = shlex.split(prepare)
    sums = words[words.index("--weights-sums") + 1]
    start = words.index("--weights-overrides") + 1
    end = next((i for i in range(start, len(words)) if words[i].startswith("--")), len(words))
    return sums, words[start:end]


def test_stand_in_weights_are_refused_by_the_official_hashes_and_pass_by_their_sha256sums(
    tmp_path, monkeypatch, capsys
):
    torch_home = tmp_path / paper_smoke.STAND_IN_TORCH_HOME
    monkeypatch.setenv("TORCH_HOME", str(torch_home))
    sums = tmp_path / paper_smoke.STAND_IN_WEIGHTS_SUMS
    files = paper_smoke.write_stand_in_weights(torch_home, sums)
    assert sorted(f.name for f in files) == [
        "resnet101-63fe2227.pth",
        "resnet50-0676ba61.pth",
        "resnext101_32x4d-a5af3160.pth",
    ]
    profile = yaml.safe_load(SMOKE.read_text())
    for task, stage in (("retrieval", retrieval), ("detection", detection)):
        named_sums, overrides = weights_args(profile[task]["prepare"])
        assert named_sums == paper_smoke.STAND_IN_WEIGHTS_SUMS and overrides == ["profile=paper"]
        rows = rows_of_params(SMOKE, task)
        # the smoke's own runs load no weights: the check composes the rows as the paper profile does
        assert stage.weights_files(rows, profile[task]["overrides"].split()) == []
        needed = stage.weights_files(rows, overrides)
        assert needed and all(item.path.parent == torch_home / "hub" / "checkpoints" for item in needed)
        with pytest.raises(WeightsError) as refused:  # the official hashes
            stage.check_weights(rows, overrides)
        for item in needed:
            found = hashlib.sha256(item.path.read_bytes()).hexdigest()
            assert f"{item.path} has SHA-256 {found}, expected {item.filename[-12:-4]}" in str(refused.value)
        assert stage.check_weights(rows, overrides, sums) == [item.path for item in needed]
    assert "not its official one" in capsys.readouterr().err


def test_footprint_counts_a_hard_linked_file_once_and_follows_no_symbolic_link(tmp_path):
    """What a passing smoke reports (and frees) is the disk its copy took, as ``du`` counts it."""
    copy = tmp_path / "repo"
    (copy / "results").mkdir(parents=True)
    (copy / "results" / "checkpoint.pt").write_bytes(os.urandom(1_000_000))
    os.link(copy / "results" / "checkpoint.pt", copy / "linked.pt")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(os.urandom(5_000_000))
    (copy / "data").symlink_to(tmp_path, target_is_directory=True)
    (copy / "weights.bin").symlink_to(outside)
    counted = paper_smoke.footprint_bytes(copy)
    assert 1_000_000 <= counted < 1_100_000  # one file's blocks, neither the link's target nor the linked folder
    assert paper_smoke.footprint_bytes(tmp_path) >= 6_000_000
