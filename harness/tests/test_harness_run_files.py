"""Reading the files earlier stages wrote: a bad one is one line naming it, what is wrong, and the fix."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rambo.harness.run_files import (
    ListOf,
    MissingRunFileError,
    RunFileError,
    read_json,
    read_npz,
    read_torch,
    read_yaml,
)

FIX = "rerun its stage"
METRICS = {"paper_protocol": {"R@1": float}, "provenance?": ({"device?": dict}, None)}


def tree_digest(folder: Path) -> dict[str, str]:
    """``{path: SHA-256}`` of every file under ``folder``."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def problem(tmp_path: Path, reader, name: str, content: bytes | None, *args) -> str:
    """The message ``reader`` raises for a file ``name`` holding ``content`` (None: no file); the
    reader writes nothing."""
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    before = tree_digest(tmp_path)
    with pytest.raises(RunFileError) as raised:
        reader(path, FIX, *args)
    assert tree_digest(tmp_path) == before
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and message.endswith(f"; {FIX}")
    return message[len(f"{path}: ") : -len(f"; {FIX}")]


GOOD = json.dumps({"paper_protocol": {"R@1": 0.5, "R@2": 0.6}, "provenance": {"device": {}}}, indent=2).encode()


@pytest.mark.parametrize(
    "content, expected",
    [
        (GOOD[:40], "not valid JSON (truncated at byte 40)"),
        (GOOD[:34], "not valid JSON (truncated at byte 34)"),  # inside a string
        (b'{"paper_protocol": tru', "not valid JSON (truncated at byte 22)"),  # inside a literal
        (b'{"paper_protocol" 1}', "not valid JSON (line 1, column 19: Expecting ':' delimiter)"),
        (b"", "empty"),
        (b"  \n", "holds only whitespace"),
        (b'{"a": "\xff"}', "not UTF-8 text (byte 7)"),
        (b"[1, 2]", "it holds a list of 2 item(s), not an object"),
        (b"{}", "paper_protocol is missing (the file has no keys)"),
        (b'{"paper_protocol": {"R@2": 1}}', "paper_protocol.R@1 is missing (paper_protocol has R@2)"),
        (b'{"paper_protocol": {"R@1": "high"}}', "paper_protocol.R@1 is the string 'high', not a number"),
        (b'{"paper_protocol": {"R@1": true}}', "paper_protocol.R@1 is true, not a number"),
        (b'{"paper_protocol": [1]}', "paper_protocol is a list of 1 item(s), not an object"),
        (
            b'{"paper_protocol": {"R@1": 1}, "provenance": "x"}',
            "provenance is the string 'x', not an object or null",
        ),
        (
            b'{"paper_protocol": {"R@1": 1}, "provenance": {"device": 3}}',
            "provenance.device is the number 3, not an object",
        ),
    ],
)
def test_a_bad_json_file_is_one_line_naming_what_is_wrong(tmp_path, content, expected):
    assert problem(tmp_path, read_json, "metrics.json", content, METRICS) == expected


def test_a_good_json_file_is_read_and_optional_keys_may_be_absent_or_null(tmp_path):
    (tmp_path / "a.json").write_bytes(GOOD)
    assert read_json(tmp_path / "a.json", FIX, METRICS)["paper_protocol"]["R@1"] == 0.5
    (tmp_path / "b.json").write_text('{"paper_protocol": {"R@1": 1}, "provenance": null}')
    assert read_json(tmp_path / "b.json", FIX, METRICS)["provenance"] is None
    (tmp_path / "c.json").write_text('{"paper_protocol": {"R@1": 1}}')
    assert read_json(tmp_path / "c.json", FIX, METRICS) == {"paper_protocol": {"R@1": 1}}


def test_a_missing_file_is_also_a_file_not_found_error(tmp_path):
    assert problem(tmp_path, read_json, "absent.json", None) == "not found"
    with pytest.raises(MissingRunFileError):
        read_json(tmp_path / "absent.json", FIX)
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "absent.json", FIX)


@pytest.mark.parametrize(
    "schema, data, expected",
    [
        (
            {"rows": ListOf({"n": int}, least=1)},
            {"rows": []},
            "rows is an empty list, not a list of at least 1 item(s)",
        ),
        ({"rows": [{"n": int}]}, {"rows": [{"n": 1}, {"n": 1.5}]}, "rows[1].n is the number 1.5, not an integer"),
        ({"stages": {"*": float}}, {"stages": {"a": 1, "b": "slow"}}, "stages.b is the string 'slow', not a number"),
        ([{"epoch": int}], [{"epoch": 1}, {"loss": 2}], "[1].epoch is missing ([1] has loss)"),
    ],
)
def test_lists_and_maps_name_the_item_that_is_wrong(tmp_path, schema, data, expected):
    assert problem(tmp_path, read_json, "f.json", json.dumps(data).encode(), schema) == expected


@pytest.mark.parametrize(
    "content, expected",
    [
        (
            b"profile: mini\nseeds: [0, 1\n",
            "not valid YAML (line 3, column 1: expected ',' or ']', but got '<stream end>')",
        ),
        (b"# only a comment\n", "holds no YAML value (only comments or blank lines)"),
        (b"- a\n- b\n", "it holds a list of 2 item(s), not an object"),
        (b"profile: 3\n", "profile is the number 3, not a string"),
    ],
)
def test_a_bad_yaml_file_is_one_line_naming_what_is_wrong(tmp_path, content, expected):
    assert problem(tmp_path, read_yaml, "params.yaml", content, {"profile": str}) == expected


def test_npz_archives_damaged_or_lacking_an_array_are_one_line(tmp_path):
    np.savez(tmp_path / "good.npz", scores=np.zeros(3), relevant=np.ones(3))
    good = (tmp_path / "good.npz").read_bytes()
    assert read_npz(tmp_path / "good.npz", FIX, ("scores",))["scores"].shape == (3,)
    assert problem(tmp_path, read_npz, "cut.npz", good[:100], ("scores",)) == (
        "not a readable .npz archive (BadZipFile: File is not a zip file)"
    )
    assert problem(tmp_path, read_npz, "good.npz", None, ("scores", "labels")) == (
        "lacks the array(s) ['labels'] (it has ['relevant', 'scores']); it needs ['scores', 'labels']"
    )
    assert problem(tmp_path, read_npz, "empty.npz", b"", ("scores",)) == "empty"
    np.save(tmp_path / "one.npy", np.zeros(2))
    assert problem(tmp_path, read_npz, "one.npy", None, ("scores",)) == (
        "holds one array, not an .npz archive of named arrays"
    )


def test_torch_files_damaged_or_of_another_shape_are_one_line(tmp_path):
    torch.save({"state_dict": {}, "config": {"hidden": 2}}, tmp_path / "good.pt")
    good = (tmp_path / "good.pt").read_bytes()
    schema = {"state_dict": dict, "config": {"hidden": int, "layers": int}}
    assert problem(tmp_path, read_torch, "cut.pt", good[:200], schema) == (
        "not a readable torch file (RuntimeError: PytorchStreamReader failed reading zip archive: "
        "failed finding central directory)"
    )
    assert problem(tmp_path, read_torch, "good.pt", None, schema) == ("config.layers is missing (config has hidden)")


def test_a_command_under_one_line_errors_prints_one_error_line_and_exits_2(tmp_path):
    (tmp_path / "metrics.json").write_text('{"paper_protocol": {"R@1": 0.5')
    before = tree_digest(tmp_path)
    code = (
        "import sys\n"
        "from rambo.harness.run_files import one_line_errors, read_json\n"
        "with one_line_errors():\n"
        "    read_json(sys.argv[1], 'rerun its stage: `dvc repro retrieval_train@x`')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "metrics.json")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"error: {tmp_path / 'metrics.json'}: not valid JSON (truncated at byte 30); "
        "rerun its stage: `dvc repro retrieval_train@x`\n"
    )
    assert tree_digest(tmp_path) == before
