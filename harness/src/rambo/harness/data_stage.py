"""The data stage of the pipeline, the same for both apps: put every dataset a profile's runs read
under one data folder, where the runs will look for it.

Each dataset's folder and source come from the app's own training config, composed with the same
Hydra overrides the runs get (given after `--`), so the data stage and the runs always agree on
`data.root`. What to do with a dataset (generate it, or download and extract it) is the app's
`prepare_one(name, data_config, source)`; [`DataStage`][rambo.harness.data_stage.DataStage] gives each app its `prepare`
and `main` around it, and [`Source`][rambo.harness.data_stage.Source] says where archives come from and where they are
kept.

Before any dataset, the stage checks the pretrained weights its rows load (`--rows` or
`--rows-from params.yaml`): each row is composed as the runs compose it, and every file of a row
with `model.pretrained` set is found (`model.weights_path`, else the torch hub cache) and its
SHA-256 checked ([`rambo.harness.weights`][rambo.harness.weights]), so a pipeline's (or a cluster's) training jobs
never start without their weights. Rows that load none (the mini and tiny profiles) make it a no-op.

After the datasets are in place, the stage reads every image of each once (the app's
`unreadable(name, data_config, overrides)`) and lists every file that cannot be read, so that no
training job starts on a broken dataset; `--check` does only that, on datasets already in place
(a folder of yours: `--check --data imagefolder -- data.root=DIR`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from .download import DownloadError
from .extract import ArchiveError
from .pretrained import weights_location
from .weights import WeightsError, WeightsFile, check_weights, read_sha256sums

MADE_LATER = ("data.root", "init_checkpoint")  # files of the pipeline's own stages, absent before them


class PrepareError(RuntimeError):
    """A dataset cannot be prepared as asked (e.g. a real dataset under a profile that generates data)."""


@dataclass(frozen=True)
class Source:
    """Where a data stage gets archives, and where it keeps them.

    `verify`: check MD5s (False accepts files that have no pinned checksum); `mirror`: a folder
    or URL holding the archives under their official names ([`rambo.harness.mirror`][rambo.harness.mirror]), used
    instead of the official URLs; `archive_dir`: where downloaded archives are kept (None: in the
    dataset's own folder).
    """

    verify: bool = True
    mirror: str | None = None
    archive_dir: Path | None = None


def compose_data(config_dir: str | Path, name: str, data_dir: str | Path, overrides: Sequence[str] = ()):
    """The `data` node of the app's `train` config with `data=<name>` and `data_dir`."""
    with initialize_config_dir(str(config_dir), version_base="1.3"):
        cfg = compose("train", overrides=[f"data={name}", f"data_dir={data_dir}", "output_dir=unused", *overrides])
    return cfg.data


def compose_rows(config_dir: str | Path, rows: Sequence[str], overrides: Sequence[str] = ()) -> dict:
    """`{row: its model node}`: the app's `train` config with `experiment=<row>` and `overrides`."""
    with initialize_config_dir(str(config_dir), version_base="1.3"):
        return {
            row: compose("train", overrides=[f"experiment={row}", *overrides, "output_dir=unused"]).model
            for row in rows
        }


def rows_of_params(path: str | Path, task: str) -> list[str]:
    """Every row a pipeline's params file runs for `task`: its `experiments`, `ablations` and
    `warm_start.experiments` (the keys dvc.yaml's stages of that task are made from)."""
    node = OmegaConf.to_container(OmegaConf.load(path)).get(task)
    if not isinstance(node, dict) or "experiments" not in node:
        raise PrepareError(f"{path} has no {task}.experiments: not a pipeline params file (ablations/profiles/*.yaml)")
    warm_starts = (node.get("warm_start") or {}).get("experiments") or []
    return list(dict.fromkeys([*node["experiments"], *(node.get("ablations") or []), *warm_starts]))


def seeds_of_params(path: str | Path) -> list[str]:
    """The seeds a pipeline's params file sweeps (its `seeds`, a comma list: `0,1,2`); none
    when it holds another Hydra sweep (`range(3)`), which the runs expand themselves."""
    seeds = str(OmegaConf.to_container(OmegaConf.load(path)).get("seeds", ""))
    return [] if "(" in seeds or not seeds.strip() else [seed.strip() for seed in seeds.split(",")]


@dataclass(frozen=True)
class DataStage:
    """One app's data stage: its `prepare` (a function) and `main` (its command line).

    `prog`/`description`: the command line's name and help; `config_dir`: the app's configs
    (their `train` config composes each dataset's `data` node); `choices`: the datasets it
    knows; `prepare_one(name, data_config, source)`: what to do with one of them. An app's
    `prepare` module binds both: `prepare, main = STAGE.prepare, STAGE.main`.
    """

    prog: str
    description: str
    config_dir: str | Path
    choices: Sequence[str]
    prepare_one: Callable
    task: str | None = None  # the app's key in a pipeline params file (``--rows-from``)
    # (name, data config, overrides) -> one line per image that cannot be read; None: the app reads no images here
    unreadable: Callable[[str, object, Sequence[str]], list[str]] | None = None
    weights_url: Callable[[str], str] | None = None  # backbone -> the official URL of its ImageNet weights
    checker: str | None = None  # the app's config check, ``package.module:problems`` (what its train.yaml names)
    # the check's last line when it lists files (`{count}`: how many)
    unreadable_summary: str = (
        "{count} image(s) cannot be read (listed above): replace or remove them, or train with "
        "data.skip_unreadable=true to leave them out (counted in the run's metrics)"
    )

    def prepare(
        self, data_dir: str | Path, names: Sequence[str], overrides: Sequence[str] = (), source: Source = Source()
    ) -> list[Path]:
        """`prepare_one` for each dataset in `names` under `data_dir` (the runs' `data_dir`,
        composed with the runs' `overrides`); returns the folders it put in place."""
        unknown = sorted(set(names) - set(self.choices))
        if unknown:
            raise ValueError(f"unknown datasets {unknown}; choose from {tuple(self.choices)}")
        return [
            Path(self.prepare_one(name, compose_data(self.config_dir, name, data_dir, overrides), source))
            for name in names
        ]

    def check_images(self, data_dir: str | Path, names: Sequence[str], overrides: Sequence[str] = ()) -> list[str]:
        """Every image of the datasets `names` (composed as [`prepare`][rambo.harness.data_stage.DataStage.prepare]
        composes them) read once; returns one line per image that cannot be read (none: all are readable)."""
        if self.unreadable is None:
            return []
        lines = []
        for name in names:
            found = self.unreadable(name, compose_data(self.config_dir, name, data_dir, overrides), overrides)
            lines += [f"{name}: {line}" for line in found]
        return lines

    def weights_files(self, rows: Sequence[str], overrides: Sequence[str] = ()) -> list[WeightsFile]:
        """The weights files `rows` (composed with `overrides`) load: one per backbone and path,
        naming the rows that need it; none for rows with `model.pretrained` false."""
        needed: dict[tuple[str, Path], tuple[str, list[str]]] = {}
        for row, model in compose_rows(self.config_dir, rows, overrides).items():
            if not model.get("pretrained"):
                continue
            if self.weights_url is None:
                raise WeightsError(f"row {row} sets model.pretrained but {self.prog} knows no pretrained weights")
            try:
                url = self.weights_url(model.backbone)
            except ValueError as error:
                raise WeightsError(f"row {row}: {error}") from None
            key = (model.backbone, weights_location(url, model.get("weights_path")))
            needed.setdefault(key, (url, []))[1].append(row)
        return [WeightsFile(backbone, url, path, tuple(names)) for (backbone, path), (url, names) in needed.items()]

    def row_problems(
        self,
        rows: Sequence[str],
        overrides: Sequence[str] = (),
        data_dir: str | Path = "data",
        seeds: Sequence[str] = (),
    ) -> list[str]:
        """Every problem the app's own config check (`checker`) finds in `rows`, each composed as
        its runs compose it (`experiment=<row>`, `data_dir`, `overrides`, each of `seeds`):
        one line per problem, naming the row. The pipeline runs this before any dataset, so a value
        the runs would refuse stops `dvc repro` at the data stage, before DVC removes a training
        stage's outputs to rerun it. What the pipeline itself makes later (`data.root`,
        `init_checkpoint`) is left to the runs' own check."""
        if self.checker is None:
            return []
        from hydra.errors import HydraException

        from .config_check import load_checker

        check, lines = load_checker(self.checker), []
        with initialize_config_dir(str(self.config_dir), version_base="1.3"):
            for row in rows:
                found: list[str] = []
                for seed in seeds or [None]:
                    chosen = [f"experiment={row}", f"data_dir={data_dir}", *overrides, "output_dir=unused"]
                    chosen += [] if seed is None else [f"seed={seed}"]
                    try:
                        problems = [
                            str(p) for p in check(compose("train", overrides=chosen)) if p.key not in MADE_LATER
                        ]
                    except HydraException as error:  # an override Hydra cannot apply
                        problems = [str(error).strip().splitlines()[0]]
                    found += [problem for problem in problems if problem not in found]
                lines += [f"row {row}: {problem}" for problem in found]
        return lines

    def check_weights(
        self, rows: Sequence[str], overrides: Sequence[str] = (), sums: str | Path | None = None
    ) -> list[Path]:
        """Check the weights `rows` load ([`weights_files`][rambo.harness.data_stage.DataStage.weights_files],
        [`rambo.harness.weights.check_weights`][rambo.harness.weights.check_weights]); `sums`: a `SHA256SUMS` file whose
        hashes replace those of the files it lists."""
        files = self.weights_files(rows, overrides)
        if not files:
            print(f"weights: none needed (model.pretrained is false in all {len(rows)} rows)", file=sys.stderr)
            return []
        table = read_sha256sums(sums) if sums is not None else None
        return check_weights(files, table, str(sums) if sums is not None else "")

    def main(self, argv: Sequence[str] | None = None) -> int:
        """`prog --data-dir DIR --data NAME... [--mirror M] [--archives DIR] [--rows ROW... | --rows-from PARAMS]
        [--weights-sums FILE] [--weights-overrides OVERRIDE...] [-- OVERRIDES]`: checks the rows' weights,
        then prints each folder and reads every image of those datasets once; missing or wrong weights,
        a download or archive that fails, or an unreadable image print `error: ...` (each unreadable
        file on a line of its own) and return 1. `--check`: only the image check."""
        parser = argparse.ArgumentParser(prog=self.prog, description=self.description)
        parser.add_argument("--data-dir", required=True, help="the runs' data_dir")
        parser.add_argument(
            "--data", nargs="+", required=True, choices=self.choices, help="datasets (the runs' data=...)"
        )
        parser.add_argument(
            "--no-verify",
            action="store_true",
            help="ignored (kept for old scripts): pinned checksums "
            "are always checked, and files without one are used with a warning",
        )
        parser.add_argument(
            "--mirror",
            help="a folder or URL holding the archives under their official names "
            "(checksums from its MD5SUMS where it lists them), used instead of the official URLs",
        )
        parser.add_argument(
            "--archives", type=Path, help="keep downloaded archives in this folder (default: each dataset's folder)"
        )
        parser.add_argument(
            "--rows",
            nargs="+",
            default=[],
            help="experiments whose pretrained weights are "
            "checked (composed with the runs' overrides) before any dataset",
        )
        parser.add_argument(
            "--rows-from",
            type=Path,
            help="a pipeline params file (params.yaml): check the weights of "
            f"every row it runs ({self.task}.experiments, .ablations, .warm_start.experiments)",
        )
        parser.add_argument(
            "--weights-sums",
            type=Path,
            help="a SHA256SUMS file whose hashes replace the official ones "
            "of the weights files it lists (stand-in weights)",
        )
        parser.add_argument(
            "--weights-overrides",
            nargs="+",
            help="compose the rows of the weights check with these "
            "Hydra overrides instead of the runs' (paper-smoke: profile=paper)",
        )
        parser.add_argument(
            "--check",
            action="store_true",
            help="only read every image of the datasets (already in place, as the runs compose them) once and list "
            "every file that cannot be read, exit code 1 if any; prepares nothing. The stage itself runs this "
            "check after preparing",
        )
        parser.add_argument("overrides", nargs="*", help="Hydra overrides of the runs, after --")
        args = parser.parse_args(argv)
        if args.check:
            return self._report_unreadable(args.data_dir, args.data, args.overrides, [])
        try:
            rows = list(args.rows)
            if args.rows_from is not None:
                if self.task is None:
                    raise PrepareError(f"{self.prog} has no task name to read rows from {args.rows_from}")
                rows += [row for row in rows_of_params(args.rows_from, self.task) if row not in rows]
            seeds = seeds_of_params(args.rows_from) if args.rows_from is not None else []
            problems = self.row_problems(rows, args.overrides, args.data_dir, seeds)
            if problems:
                for line in problems:
                    print(f"error: {args.rows_from or '--rows'}: {line}", file=sys.stderr)
                return 2
            if rows:
                overrides = args.overrides if args.weights_overrides is None else args.weights_overrides
                self.check_weights(rows, overrides, args.weights_sums)
            if args.no_verify:
                print(
                    "warning: --no-verify is ignored: pinned checksums are always checked, and files without "
                    "one (In-shop) are used with a warning",
                    file=sys.stderr,
                )
            source = Source(verify=True, mirror=args.mirror, archive_dir=args.archives)
            folders = self.prepare(args.data_dir, args.data, args.overrides, source)
        except (DownloadError, ArchiveError, PrepareError, WeightsError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        return self._report_unreadable(args.data_dir, args.data, args.overrides, folders)

    def _report_unreadable(self, data_dir, names, overrides, folders) -> int:
        try:
            lines = self.check_images(data_dir, names, overrides)
        except (PrepareError, OSError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        for line in lines:
            print(f"unreadable: {line}", file=sys.stderr)
        if lines:
            print(f"error: {self.unreadable_summary.format(count=len(lines))}", file=sys.stderr)
            return 1
        for folder in folders:
            print(folder)
        if self.unreadable is not None:
            print(f"images: every image of {', '.join(names)} can be read", file=sys.stderr)
        return 0
