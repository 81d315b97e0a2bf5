"""The data stage of the pipeline, the same for both apps: put every dataset a profile's runs read
under one data folder, where the runs will look for it.

Each dataset's folder and source come from the app's own training config, composed with the same
Hydra overrides the runs get (given after ``--``), so the data stage and the runs always agree on
``data.root``. What to do with a dataset (generate it, or download and extract it) is the app's
``prepare_one(name, data_config, source)``; :class:`DataStage` gives each app its ``prepare`` and
``main`` around it, and :class:`Source` says where archives come from and where they are kept.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from hydra import compose, initialize_config_dir

from .download import DownloadError
from .extract import ArchiveError


class PrepareError(RuntimeError):
    """A dataset cannot be prepared as asked (e.g. a real dataset under a profile that generates data)."""


@dataclass(frozen=True)
class Source:
    """Where a data stage gets archives, and where it keeps them.

    ``verify``: check MD5s (False accepts files that have no pinned checksum); ``mirror``: a folder
    or URL holding the archives under their official names (:mod:`rambo.harness.mirror`), used
    instead of the official URLs; ``archive_dir``: where downloaded archives are kept (None: in the
    dataset's own folder).
    """

    verify: bool = True
    mirror: str | None = None
    archive_dir: Path | None = None


def compose_data(config_dir: str | Path, name: str, data_dir: str | Path, overrides: Sequence[str] = ()):
    """The ``data`` node of the app's ``train`` config with ``data=<name>`` and ``data_dir``."""
    with initialize_config_dir(str(config_dir), version_base="1.3"):
        cfg = compose("train", overrides=[f"data={name}", f"data_dir={data_dir}", "output_dir=unused", *overrides])
    return cfg.data


@dataclass(frozen=True)
class DataStage:
    """One app's data stage: its ``prepare`` (a function) and ``main`` (its command line).

    ``prog``/``description``: the command line's name and help; ``config_dir``: the app's configs
    (their ``train`` config composes each dataset's ``data`` node); ``choices``: the datasets it
    knows; ``prepare_one(name, data_config, source)``: what to do with one of them. An app's
    ``prepare`` module binds both: ``prepare, main = STAGE.prepare, STAGE.main``.
    """

    prog: str
    description: str
    config_dir: str | Path
    choices: Sequence[str]
    prepare_one: Callable

    def prepare(self, data_dir: str | Path, names: Sequence[str], overrides: Sequence[str] = (),
                source: Source = Source()) -> list[Path]:  # fmt: skip
        """``prepare_one`` for each dataset in ``names`` under ``data_dir`` (the runs' ``data_dir``,
        composed with the runs' ``overrides``); returns the folders it put in place."""
        unknown = sorted(set(names) - set(self.choices))
        if unknown:
            raise ValueError(f"unknown datasets {unknown}; choose from {tuple(self.choices)}")
        return [Path(self.prepare_one(name, compose_data(self.config_dir, name, data_dir, overrides), source)) for name in names]

    def main(self, argv: Sequence[str] | None = None) -> int:
        """``prog --data-dir DIR --data NAME... [--mirror M] [--archives DIR] [-- OVERRIDES]``: prints each
        folder; a download or archive that fails prints ``error: ...`` with the manual steps and returns 1."""
        parser = argparse.ArgumentParser(prog=self.prog, description=self.description)
        parser.add_argument("--data-dir", required=True, help="the runs' data_dir")
        parser.add_argument("--data", nargs="+", required=True, choices=self.choices, help="datasets (the runs' data=...)")
        parser.add_argument("--no-verify", action="store_true", help="ignored (kept for old scripts): pinned checksums "
                            "are always checked, and files without one are used with a warning")
        parser.add_argument("--mirror", help="a folder or URL holding the archives under their official names "
                            "(checksums from its MD5SUMS where it lists them), used instead of the official URLs")
        parser.add_argument("--archives", type=Path, help="keep downloaded archives in this folder (default: each "
                            "dataset's folder)")
        parser.add_argument("overrides", nargs="*", help="Hydra overrides of the runs, after --")
        args = parser.parse_args(argv)
        try:
            if args.no_verify:
                print("warning: --no-verify is ignored: pinned checksums are always checked, and files without "
                      "one (In-shop) are used with a warning", file=sys.stderr)
            source = Source(verify=True, mirror=args.mirror, archive_dir=args.archives)
            folders = self.prepare(args.data_dir, args.data, args.overrides, source)
        except (DownloadError, ArchiveError, PrepareError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        for folder in folders:
            print(folder)
        return 0
