"""The pretrained weights a profile's rows load, checked before any job starts: each file is found
where the runs will read it and its SHA-256 compared with the expected one.

The expected hash is torch.hub's convention for checkpoint files: the hex digits after the last
`-` of the official file name (`resnet50-0676ba61.pth`, open-mmlab's
`resnext101_32x4d-a5af3160.pth`) are the first digits of the SHA-256 of the whole file
(`torch.hub.HASH_REGEX`; `torch.hub.download_url_to_file` refuses a download whose digest does
not start with them). The whole file is hashed and its hex digest must start with those digits.

A `SHA256SUMS` file (the `sha256sum` format: `<sha256>  <official file name>` per line)
replaces the expected hash of the files it lists, as a mirror's `MD5SUMS` does for archives
([`rambo.harness.mirror`][rambo.harness.mirror]): `make paper-smoke` checks small stand-in files that way, which the
official hashes refuse. Nothing is downloaded here.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch.hub

from .atomic import write_text

SHA256SUMS = "SHA256SUMS"
CHUNK_BYTES = 1 << 20


class WeightsError(RuntimeError):
    """Pretrained weights a row needs are missing or not the expected file; the message names every one."""


def hash_prefix(filename: str) -> str:
    """The SHA-256 prefix in an official checkpoint file name (torch.hub's `HASH_REGEX`)."""
    match = torch.hub.HASH_REGEX.search(filename)
    if match is None or not match.group(1):
        raise ValueError(f"{filename!r} carries no SHA-256 prefix (torch.hub's '<name>-<hex digits>.<ext>')")
    return match.group(1)


def sha256_of(path: str | os.PathLike) -> str:
    """Hex SHA-256 of the whole file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def parse_sha256sums(text: str, origin: str = SHA256SUMS) -> dict[str, str]:
    """`{filename: sha256}` from `sha256sum` output (`<sha256>  <name>` or `<sha256> *<name>`)."""
    sums = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split(maxsplit=1)
        digest = fields[0].lower()
        if len(fields) != 2 or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise WeightsError(f"{origin}:{number}: expected '<sha256>  <filename>', got {line!r}")
        sums[fields[1].strip().lstrip("*")] = digest
    return sums


def read_sha256sums(path: str | os.PathLike) -> dict[str, str]:
    """The `SHA256SUMS` file at `path` as `{filename: sha256}`."""
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"the hashes file {path} does not exist")
    return parse_sha256sums(path.read_text(), str(path))


def write_sha256sums(target: str | os.PathLike, files: Iterable[str | os.PathLike]) -> Path:
    """Write `target` (a `SHA256SUMS` file, atomically) listing each of `files` by its file name."""
    sums = {Path(f).name: sha256_of(f) for f in files}
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text(target, "".join(f"{sums[name]}  {name}\n" for name in sorted(sums)))
    return target


@dataclass(frozen=True)
class WeightsFile:
    """One weights file some rows load: the backbone, its official `url`, where the runs read it
    (`path`: `model.weights_path`, else the torch hub cache) and the rows that need it."""

    backbone: str
    url: str
    path: Path
    rows: tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        """The official file name (the last part of `url`); its digits are the expected hash."""
        return self.url.rsplit("/", 1)[-1]


def _rows_text(rows: tuple[str, ...]) -> str:
    """` (rows a, b, c and 4 more)`: which rows need a file, short enough for one line."""
    if not rows:
        return ""
    more = f" and {len(rows) - 3} more" if len(rows) > 4 else ""
    return f" (rows {', '.join(rows[:3] if more else rows)}{more})"


def check_weights(
    files: Iterable[WeightsFile], sums: Mapping[str, str] | None = None, sums_origin: str = SHA256SUMS
) -> list[Path]:
    """Hash every file and return their paths; one [`WeightsError`][rambo.harness.weights.WeightsError] naming every
    missing file (its path and a `wget` line) and every wrong one (the SHA-256 found and the one expected).

    The expected hash of a file is the prefix in its official name, or the full SHA-256 that
    `sums` (read from `sums_origin`) lists under that name; a line on stderr says when the
    listed one is used.
    """
    sums = dict(sums or {})
    files = list(files)
    missing, wrong, found = [], [], []
    for item in files:
        listed = item.filename in sums
        expected = sums[item.filename] if listed else hash_prefix(item.filename)
        rows = _rows_text(item.rows)
        if not item.path.is_file():
            missing.append(
                f"  {item.backbone}{rows}: {item.path} is missing; get it with\n"
                f"    mkdir -p {item.path.parent} && wget -O {item.path} {item.url}"
            )
            continue
        digest = sha256_of(item.path)
        if not digest.startswith(expected):
            source = f"listed in {sums_origin}" if listed else f"the prefix in the official name {item.filename}"
            wrong.append(
                f"  {item.backbone}{rows}: {item.path} has SHA-256 {digest}, expected {expected} ({source}): "
                f"it is incomplete or not {item.url}; delete it and get it again"
            )
            continue
        if listed:
            print(f"weights: the SHA-256 of {item.filename} from {sums_origin}, not its official one", file=sys.stderr)
        print(f"weights: {item.backbone} {item.path} SHA-256 {digest[:16]}... as expected", file=sys.stderr)
        found.append(item.path)
    if missing or wrong:
        parts = []
        if missing:
            parts.append(
                f"{len(missing)} pretrained weights file(s) missing (never downloaded at run time):\n"
                + "\n".join(missing)
            )
        if wrong:
            parts.append(f"{len(wrong)} pretrained weights file(s) with the wrong SHA-256:\n" + "\n".join(wrong))
        raise WeightsError(
            "\n".join(parts) + "\nPut each at its path (model.weights_path=FILE in the runs' overrides names another "
            "place; the torch hub cache is $TORCH_HOME/hub/checkpoints, default ~/.cache/torch/hub/checkpoints), "
            "or set model.pretrained=false to start those rows from random initialisation."
        )
    return found
