"""The paper-settings ledger (`ablations/paper_settings.yaml`), checked against the configs the
paper profile composes.

    python -m rambo.ablations.paper_settings            # every entry of every paper experiment; exit 1 on drift

For every paper experiment (retrieval: `experiment=<row> profile=paper`; detection:
`experiment=<row>`, which picks its own profile) the ledger's entries that apply to it
(`common`, then each group whose `applies_to` globs match, then `experiments.<row>`; a
later entry of the same key replaces an earlier one) are compared with the resolved config:

* an entry holds when the resolved value equals its `value`;
* an entry with `status: open` is a known defect not fixed yet: the resolved value must equal
  its `current` (so the ledger still notices when it changes, fixed or not) and it is listed
  as open;
* an entry with `in_config: false` is decided in code, not in a config key: listed, not compared.

Anything else, and a key the config does not have, is drift: the check fails and names it.

Every entry records what the paper states (`paper_value`: the value in the entry's own terms,
or `not stated`) and, where a reference implementation is followed or departed from, what that
code does (`code_value`, optional). An entry whose `value` differs from either must be a
`deviation` (earlier versions let an entry differ from the paper silently, as the CE rows'
batch and learning rate did); a `deviation` whose value differs from neither is a stale row.
Every entry with a `deviation` (a setting the project deliberately does differently) names its
row of the deviations table of `docs/faithfulness.md` (`readme_row`, the row's first cell); a row
that is not there fails the check as well, so the table cannot lose a deviation the ledger keeps.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from .checkout import ABLATIONS, REPO

LEDGER = ABLATIONS / "paper_settings.yaml"
DEVIATIONS_PAGE = REPO / "docs" / "faithfulness.md"
DEVIATIONS_HEADING = "## Deviations from the paper and the authors' code"
MISSING = object()
NOT_STATED = "not stated"  # the paper_value of a setting the paper does not state
# The paper experiments of each app, as globs over its configs/experiment/ files, and the overrides
# that compose them the way the paper profile's stages do.
APPS = {
    "retrieval": (("sop_*", "cub_*", "inshop_*"), ("profile=paper",)),
    "detection": (("table5_*", "table8_*"), ()),
}


@dataclass(frozen=True)
class Finding:
    app: str
    experiment: str
    key: str
    kind: str  # "drift", "missing", "open", "code"
    resolved: object
    expected: object
    source: str

    def line(self) -> str:
        if self.kind == "code":
            return f"{self.app}/{self.experiment}: {self.key} (in code, not a config key): {self.expected!r} [{self.source}]"
        if self.kind == "missing":
            return f"{self.app}/{self.experiment}: {self.key} is not in the composed config (ledger: {self.expected!r}) [{self.source}]"
        verb = "open, still" if self.kind == "open" else "resolves to"
        return f"{self.app}/{self.experiment}: {self.key} {verb} {self.resolved!r}, ledger {self.expected!r} [{self.source}]"


def load_ledger(path: Path = LEDGER) -> dict:
    ledger = yaml.safe_load(path.read_text())
    for app in APPS:
        if app not in ledger:
            raise ValueError(f"{path}: no '{app}' section")
    return ledger


def entries_for(section: dict, experiment: str) -> dict[str, dict]:
    """The entries that apply to `experiment`, by key (later ones replace earlier ones)."""
    entries: dict[str, dict] = {}
    for entry in section.get("common", []):
        entries[entry["key"]] = entry
    for group in section.get("groups", []):
        if any(fnmatch.fnmatch(experiment, pattern) for pattern in group["applies_to"]):
            for entry in group["entries"]:
                entries[entry["key"]] = entry
    for entry in (section.get("experiments") or {}).get(experiment, []):
        entries[entry["key"]] = entry
    return entries


def same(resolved, expected) -> bool:
    """Equal, numbers up to float rounding (a YAML 3e-6 against a config's 3.0e-06)."""
    numbers = (int, float)
    if isinstance(resolved, bool) or isinstance(expected, bool):
        return type(resolved) is type(expected) and resolved == expected
    if isinstance(resolved, numbers) and isinstance(expected, numbers):
        return math.isclose(resolved, expected, rel_tol=1e-12, abs_tol=0.0)
    if isinstance(resolved, list) and isinstance(expected, list):
        return len(resolved) == len(expected) and all(same(r, e) for r, e in zip(resolved, expected))
    return resolved == expected


def config_dir(app: str) -> Path:
    """The Hydra config folder of `rambo.<app>`."""
    import importlib

    return Path(importlib.import_module(f"rambo.{app}").__file__).parent / "configs"


def experiments_of(app: str) -> list[str]:
    configs = config_dir(app) / "experiment"
    patterns, _ = APPS[app]
    return sorted({p.stem for pattern in patterns for p in configs.glob(f"{pattern}.yaml")})


def compose_experiment(app: str, experiment: str, extra: tuple[str, ...] = ()) -> dict:
    """The resolved config of one paper experiment, as a plain dict."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    configs = config_dir(app)
    overrides = [f"experiment={experiment}", *APPS[app][1], *extra, "output_dir=/nonexistent/ledger-check"]
    with initialize_config_dir(config_dir=str(configs), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)


def select(config: dict, key: str):
    value = config
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    return value


def check(ledger: dict, compose=compose_experiment) -> list[Finding]:
    """Every finding of every paper experiment; `compose(app, experiment)` gives its config."""
    findings = []
    for app in APPS:
        section = ledger[app]
        experiments = experiments_of(app)
        covered = set(section.get("experiments_covered", []))
        for experiment in sorted(set(experiments) ^ covered):
            where = "has no ledger entry list" if experiment in experiments else "is not a paper experiment of the app"
            findings.append(
                Finding(app, experiment, "experiments_covered", "drift", None, None, f"the experiment {where}")
            )
        for experiment in experiments:
            config = compose(app, experiment)
            for key, entry in entries_for(section, experiment).items():
                source = str(entry.get("source", "no source")).strip()
                if entry.get("in_config", True) is False:
                    findings.append(Finding(app, experiment, key, "code", None, entry["value"], source))
                    continue
                resolved = select(config, key)
                if resolved is MISSING:
                    findings.append(Finding(app, experiment, key, "missing", None, entry["value"], source))
                elif entry.get("status") == "open":
                    kind = "open" if same(resolved, entry["current"]) else "drift"
                    expected = entry["value"] if kind == "open" else entry["current"]
                    findings.append(Finding(app, experiment, key, kind, resolved, expected, source))
                elif not same(resolved, entry["value"]):
                    findings.append(Finding(app, experiment, key, "drift", resolved, entry["value"], source))
    return findings


def all_entries(ledger: dict):
    """`(app, entry)` for every entry of the ledger (common, groups, experiments)."""
    for app in APPS:
        section = ledger[app]
        for entry in section.get("common", []):
            yield app, entry
        for group in section.get("groups", []):
            for entry in group["entries"]:
                yield app, entry
        for entries in (section.get("experiments") or {}).values():
            for entry in entries:
                yield app, entry


def undeclared_deviations(ledger: dict) -> list[str]:
    """One line per entry that breaks the paper_value / code_value rule (module docstring): no
    `paper_value`; a value that differs from the paper's or the code's without a `deviation`;
    a `deviation` that differs from neither."""
    problems = []
    for app, entry in all_entries(ledger):
        key, value = entry["key"], entry.get("value")
        if "paper_value" not in entry:
            problems.append(f"{app}: {key} records no paper_value (the paper's stated value, or {NOT_STATED!r})")
            continue
        differs = []
        if entry["paper_value"] != NOT_STATED and not same(value, entry["paper_value"]):
            differs.append(f"the paper's {entry['paper_value']!r}")
        if "code_value" in entry and not same(value, entry["code_value"]):
            differs.append(f"the code's {entry['code_value']!r}")
        if differs and "deviation" not in entry:
            problems.append(f"{app}: {key} is {value!r}, not {' or '.join(differs)}, and is not marked a deviation")
        elif not differs and "deviation" in entry:
            paper = "not stated by the paper" if entry["paper_value"] == NOT_STATED else "the paper's"
            code = "the code's" if "code_value" in entry else "no code_value recorded"
            problems.append(f"{app}: {key} is marked a deviation, but its value {value!r} is {paper} ({code})")
    return problems


def readme_deviation_rows(readme: str) -> set[str]:
    """The first cells of the rows of the deviations table (docs/faithfulness.md)."""
    if DEVIATIONS_HEADING not in readme:
        raise ValueError(f"docs/faithfulness.md has no section {DEVIATIONS_HEADING!r}")
    section = readme.split(DEVIATIONS_HEADING, 1)[1].split("\n#", 1)[0]
    rows = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("|")]
    return {row for row in rows[2:]}  # after the header and its rule


def missing_deviation_rows(ledger: dict, readme: str) -> list[str]:
    """One line per ledger deviation whose row of the deviations table is missing (or which names none)."""
    rows, problems = readme_deviation_rows(readme), []
    for app, entry in all_entries(ledger):
        if "deviation" not in entry:
            continue
        row = entry.get("readme_row")
        if row is None:
            problems.append(f"{app}: {entry['key']} keeps a deviation but names no readme_row")
        elif row not in rows:
            problems.append(
                f"{app}: {entry['key']} keeps a deviation; the deviations table of docs/faithfulness.md has no row {row!r}"
            )
    return sorted(set(problems))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--ledger", type=Path, default=LEDGER)
    parser.add_argument(
        "--readme",
        type=Path,
        default=DEVIATIONS_PAGE,
        help="the page whose deviations table must hold the ledger's deviations",
    )
    parser.add_argument("--show-open", action="store_true", help="also list the open entries and those decided in code")
    args = parser.parse_args(argv)
    ledger = load_ledger(args.ledger)
    findings = check(ledger)
    rows = missing_deviation_rows(ledger, args.readme.read_text()) + undeclared_deviations(ledger)
    for line in rows:
        print(line)
    drift = [f for f in findings if f.kind in ("drift", "missing")]
    opened = [f for f in findings if f.kind == "open"]
    for finding in drift + (opened + [f for f in findings if f.kind == "code"] if args.show_open else []):
        print(finding.line())
    print(
        f"ledger check: {len(drift)} drifted, {len(opened)} open (known, not fixed yet), "
        f"{sum(f.kind == 'code' for f in findings)} decided in code; "
        f"{sum('deviation' in e for _, e in all_entries(ledger))} deviations kept, {len(rows)} undeclared or missing from docs/faithfulness.md"
    )
    return 1 if drift or rows else 0


if __name__ == "__main__":
    sys.exit(main())
