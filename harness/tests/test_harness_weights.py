"""The weights check: a file is the official one when the SHA-256 of the whole file starts with the
digits in its official name (torch.hub's convention), or matches a SHA256SUMS that lists it."""

import hashlib

import pytest
import torch

from rambo.harness import weights
from rambo.harness.pretrained import cache_path, weights_location
from rambo.harness.weights import WeightsError, WeightsFile, check_weights


def official(content: bytes, stem: str = "net") -> tuple[str, bytes]:
    """A URL whose file name carries the SHA-256 prefix of ``content``, as torchvision's do."""
    return f"https://example.org/models/{stem}-{hashlib.sha256(content).hexdigest()[:8]}.pth", content


def test_the_prefix_is_torch_hubs_digits_of_the_official_names():
    assert weights.hash_prefix("resnet50-0676ba61.pth") == "0676ba61"
    assert weights.hash_prefix("resnet101-63fe2227.pth") == "63fe2227"
    assert weights.hash_prefix("resnext101_32x4d-a5af3160.pth") == "a5af3160"
    with pytest.raises(ValueError, match="carries no SHA-256 prefix"):
        weights.hash_prefix("resnet50.pth")


def test_a_correct_file_passes_and_the_whole_file_is_hashed(tmp_path, capsys):
    url, content = official(b"weights " * 1000)
    path = tmp_path / "w.pth"
    path.write_bytes(content)
    assert check_weights([WeightsFile("net", url, path)]) == [path]
    assert f"net {path} SHA-256 {hashlib.sha256(content).hexdigest()[:16]}... as expected" in capsys.readouterr().err
    assert weights.sha256_of(path) == hashlib.sha256(content).hexdigest()


def test_a_truncated_file_is_refused_naming_both_hashes(tmp_path):
    url, content = official(b"weights " * 1000)
    path = tmp_path / "w.pth"
    path.write_bytes(content[:-1])  # one byte short: its prefix differs
    with pytest.raises(WeightsError) as error:
        check_weights([WeightsFile("net", url, path, ("row_a",))])
    message = str(error.value)
    found, expected = hashlib.sha256(content[:-1]).hexdigest(), url.rsplit("-", 1)[1][:8]
    assert f"net (rows row_a): {path} has SHA-256 {found}, expected {expected}" in message
    assert "the prefix in the official name" in message and url in message


def test_every_missing_file_is_named_with_its_url_in_one_message(tmp_path):
    files = [
        WeightsFile("a", "https://example.org/a-0123abcd.pth", tmp_path / "cache" / "a-0123abcd.pth"),
        WeightsFile("b", "https://example.org/b-4567abcd.pth", tmp_path / "b.pth"),
    ]
    with pytest.raises(WeightsError) as error:
        check_weights(files)
    message = str(error.value)
    assert message.startswith("2 pretrained weights file(s) missing")
    assert f"mkdir -p {tmp_path / 'cache'} && wget -O {files[0].path} https://example.org/a-0123abcd.pth" in message
    assert f"wget -O {tmp_path / 'b.pth'} https://example.org/b-4567abcd.pth" in message
    assert "model.pretrained=false" in message


def test_many_rows_are_named_in_short(tmp_path):
    item = WeightsFile("a", "https://example.org/a-0123abcd.pth", tmp_path / "a.pth", tuple(f"r{i}" for i in range(6)))
    with pytest.raises(WeightsError, match=r"a \(rows r0, r1, r2 and 3 more\)"):
        check_weights([item])


def test_weights_path_and_the_torch_hub_cache_under_torch_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "home"))
    url, content = official(b"cached")
    assert cache_path(url) == tmp_path / "home" / "hub" / "checkpoints" / url.rsplit("/", 1)[1]
    assert weights_location(url) == cache_path(url) == weights_location(url, None)
    cache_path(url).parent.mkdir(parents=True)
    cache_path(url).write_bytes(content)
    assert check_weights([WeightsFile("net", url, weights_location(url))]) == [cache_path(url)]
    own = tmp_path / "elsewhere.pth"
    assert weights_location(url, str(own)) == own
    with pytest.raises(WeightsError, match="elsewhere.pth is missing"):  # weights_path wins over the cache
        check_weights([WeightsFile("net", url, weights_location(url, str(own)))])
    assert torch.hub.get_dir() == str(tmp_path / "home" / "hub")


def test_a_sha256sums_file_replaces_the_official_hash_of_the_files_it_lists(tmp_path, capsys):
    """paper-smoke's stand-ins: refused by the official prefix, accepted by the SHA256SUMS naming them."""
    url = "https://download.pytorch.org/models/resnet50-0676ba61.pth"
    stand_in = tmp_path / "resnet50-0676ba61.pth"
    stand_in.write_bytes(b"stand-in")
    item = WeightsFile("resnet50", url, stand_in)
    with pytest.raises(WeightsError, match="expected 0676ba61 .the prefix in the official name"):
        check_weights([item])
    sums = weights.write_sha256sums(tmp_path / "sums" / weights.SHA256SUMS, [stand_in])
    assert sums.read_text() == f"{hashlib.sha256(b'stand-in').hexdigest()}  resnet50-0676ba61.pth\n"
    assert check_weights([item], weights.read_sha256sums(sums), str(sums)) == [stand_in]
    assert f"the SHA-256 of resnet50-0676ba61.pth from {sums}, not its official one" in capsys.readouterr().err
    stand_in.write_bytes(b"changed")
    with pytest.raises(WeightsError, match=f"expected {hashlib.sha256(b'stand-in').hexdigest()} .listed in {sums}"):
        check_weights([item], weights.read_sha256sums(sums), str(sums))


def test_a_malformed_or_missing_sha256sums_is_named(tmp_path):
    bad = tmp_path / "SHA256SUMS"
    bad.write_text("0676ba61  resnet50-0676ba61.pth\n")  # a prefix is not a SHA-256
    with pytest.raises(WeightsError, match=r"SHA256SUMS:1: expected '<sha256>  <filename>'"):
        weights.read_sha256sums(bad)
    with pytest.raises(WeightsError, match="the hashes file .*nowhere does not exist"):
        weights.read_sha256sums(tmp_path / "nowhere")
