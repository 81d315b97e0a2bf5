"""One profile's run leaves the checkout's files alone, and a committed reproduction reproduces
itself. In a fresh clone of HEAD (whose profile is mini), ``make reproduce PROFILE=tiny`` runs in
tiny's own workspace (``build/profiles/tiny``, :mod:`rambo.ablations.workspace`): ``git status
--porcelain`` must be empty and nothing staged afterwards. The clone then makes tiny its committed
profile (``params.yaml``) and commits what the workspace wrote (its ``dvc.lock``, ``results/tiny/``,
``figures/out/tiny/``), after checking that no committed results file lacks a key the run wrote
(:func:`keys_committed_files_lack`); a fresh clone of *that* commit runs ``make reproduce`` at its
root, every run retrained (a clone has no checkpoints: they are git-ignored and never in DVC's
cache), and ``git status --porcelain`` must be empty and a second ``dvc repro`` must run nothing:
the workspace made exactly what the checkout makes. Last, a value the runs refuse, set in
``params.yaml``, must stop ``dvc repro`` before any result file changes.

What differs from a user's ``make reproduce`` in a fresh clone, and why:

* the clones have no ``.venv`` of their own: ``make`` is called with ``VENV=<this venv>`` (the one
  running pytest) and ``-o <that venv>/.installed``, so the ``install`` prerequisite is taken as
  done instead of creating a venv per clone (minutes, and the network). The ``reproduce`` recipe
  itself runs unchanged: the workspace (or the checkout) then ``dvc repro`` with the venv first on
  PATH.
* that venv's editable installs point at the checkout it was built in, so ``PYTHONPATH`` puts the
  clone's ``src`` folders (core, harness, retrieval, detection, figures, ablations) first: every run,
  figure and table imports the clone's sources, and its provenance
  (``rambo.harness.provenance.git_state``) names the clone's commit. The test checks this before
  running anything.
* ``MAKEFLAGS``/``MAKELEVEL`` of a calling ``make`` are dropped, and ``WANDB_MODE=offline``: the
  tiny profile's ``wandb_mode`` is ``auto``, as mini's, so every run logs to W&B offline as a user's
  mini runs do without an API key, and its random run id and ``wandb/`` folders must not reach
  ``dvc.lock`` (they did, before ``.dvcignore`` and the id's side file).

The clones are real ``git clone``s (file://), so the test sees the checkout's HEAD, not its
uncommitted files; each clone has its own DVC cache (``.dvc/cache`` inside it: ``.dvc/config`` sets
no cache dir, which the test checks), so nothing computed by one clone reaches the other. Both
clones live under pytest's ``tmp_path`` and are deleted at the end (kept with ``RAMBO_KEEP_CLONES=1``).

Slow (two whole tiny pipelines, several minutes on 2 cores): marked ``slow`` and ``reproduce``, left
out of ``make test``; ``make test-reproduce`` runs it (CI does).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
VENV = BIN.parent
SOURCES = ("core", "harness", "retrieval", "detection", "figures", "ablations")
AUTHOR = ["-c", "user.name=rambo reproduce test", "-c", "user.email=reproduce-test@rambo.invalid"]
RUN_STAGES = (
    "retrieval_train@",
    "retrieval_ablation@",
    "detection_warm_start@",
    "detection_train@",
    "detection_ablation@",
)
DIFF_CHARS = 1500  # of each changed file's diff in a failure message
MESSAGE_CHARS = 8000  # of the whole failure message's diffs

pytestmark = [pytest.mark.slow, pytest.mark.reproduce]


def clone_env(clone: Path) -> dict:
    """The environment of a command in ``clone``: the venv first on PATH, the clone's sources first
    on PYTHONPATH, no make flags of a calling make."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    sources = [str(clone / s / "src") for s in SOURCES]
    env["PYTHONPATH"] = os.pathsep.join(sources + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    env["WANDB_MODE"] = "offline"  # never online from a test, and never disabled: W&B's files are what it checks
    return env


def run(args: list[str], cwd: Path, timeout: int = 3600, check: bool = True) -> str:
    done = subprocess.run(args, cwd=cwd, env=clone_env(cwd), capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    if check:
        assert done.returncode == 0, f"`{' '.join(args)}` failed in {cwd} (exit {done.returncode}):\n{output[-6000:]}"
    return output


def clone(source: str, destination: Path) -> Path:
    run(["git", "clone", "--quiet", "--no-hardlinks", source, str(destination)], destination.parent)
    return destination


def reproduce(clone_dir: Path, *profile: str) -> tuple[str, float]:
    """``make reproduce [PROFILE=...]`` in ``clone_dir`` with this venv (see the module docstring);
    its output and wall time."""
    start = time.monotonic()
    output = run(["make", "-o", str(VENV / ".installed"), f"VENV={VENV}", "reproduce", *profile], clone_dir)
    return output, time.monotonic() - start


def check_fresh(clone_dir: Path) -> None:
    """The clone imports its own sources, has no checkpoints or DVC cache, and a cache of its own."""
    modules = ", ".join(f"rambo.{name}" for name in SOURCES)
    shown = run(
        [sys.executable, "-c", f"import {modules}\nprint('\\n'.join(m.__file__ for m in ({modules})))"], clone_dir
    )
    for name, path in zip(SOURCES, shown.split()):
        assert Path(path).resolve().is_relative_to(clone_dir.resolve() / name / "src"), (name, path)
    assert not list((clone_dir / "results").glob("*/checkpoints"))
    assert not (clone_dir / ".dvc" / "cache").exists()
    cache = run([str(BIN / "dvc"), "cache", "dir"], clone_dir).strip().splitlines()[-1]
    assert Path(cache).resolve().is_relative_to(clone_dir.resolve()), cache


def flatten(value, prefix: str = "") -> dict:
    """Leaf values by key path; a list of ``{"path": ...}`` entries (dvc.lock's deps and outs) is keyed
    by those paths."""
    if isinstance(value, dict):
        return {
            k: v
            for key, item in value.items()
            for k, v in flatten(item, f"{prefix}.{key}" if prefix else str(key)).items()
        }
    if isinstance(value, list) and value and all(isinstance(i, dict) and "path" in i for i in value):
        return {
            k: v
            for item in value
            for k, v in flatten({x: y for x, y in item.items() if x != "path"}, f"{prefix}[{item['path']}]").items()
        }
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in flatten(item, f"{prefix}[{i}]").items()}
    return {prefix: value}


def changed_keys(clone_dir: Path, name: str) -> list[str] | None:
    """The key paths of a JSON or YAML file that differ between HEAD and the working tree, or None."""
    if not name.endswith((".json", ".yaml", ".lock")):
        return None
    loads = json.loads if name.endswith(".json") else yaml.safe_load
    try:
        old = flatten(loads(run(["git", "show", f"HEAD:{name}"], clone_dir)))
        new = flatten(loads((clone_dir / name).read_text()))
    except (ValueError, yaml.YAMLError, AssertionError, OSError):
        return None
    return sorted(k for k in old.keys() | new.keys() if old.get(k, "<absent>") != new.get(k, "<absent>"))


def key_paths(value, prefix: str = "") -> set[str]:
    """Every key path of a JSON value, list positions written ``[*]`` (a run's history is as long as
    its profile's epochs; its entries' keys are what the code writes)."""
    if isinstance(value, dict):
        return {p for key, item in value.items() for p in {f"{prefix}/{key}"} | key_paths(item, f"{prefix}/{key}")}
    if isinstance(value, list):
        return {p for item in value for p in key_paths(item, f"{prefix}[*]")}
    return set()


def keys_committed_files_lack(clone_dir: Path) -> dict[str, list[str]]:
    """The key paths that the code wrote into a results file of the tiny profile (a
    run's ``metrics.json`` or ``curve.json``, a table's JSON, under ``results/tiny/``) in ``clone_dir``'s
    working tree and that the committed mini version of that file (the same path under
    ``results/mini/``) lacks, per file. The tiny profile writes the same files as the committed mini
    ones, so a key missing there is one the committed results were made without (e.g.
    ``mean_cosine``, added after they were trained)."""
    lacking = {}
    changed = run(["git", "diff", "--name-only", "HEAD", "--", "results/tiny"], clone_dir).split()
    created = run(["git", "ls-files", "--others", "--exclude-standard", "--", "results/tiny"], clone_dir).split()
    for name in sorted(set(changed + created)):
        if not name.endswith(".json") or not (clone_dir / name).is_file():
            continue  # not a results JSON, or a file the run's stage removed
        try:
            committed = json.loads(run(["git", "show", f"HEAD:results/mini/{name[len('results/tiny/') :]}"], clone_dir))
        except (AssertionError, ValueError):
            continue  # a file mini has not (its profile's own): nothing committed to lack a key
        missing = key_paths(json.loads((clone_dir / name).read_text())) - key_paths(committed)
        if missing:
            lacking[name] = sorted(missing)
    return lacking


def describe_changes(clone_dir: Path, porcelain: str) -> str:
    """Which files changed, which of their keys, and the start of each diff."""
    parts = [porcelain]
    for line in porcelain.splitlines():
        name = line[3:].strip().strip('"')
        if line.startswith("??"):
            continue
        keys = changed_keys(clone_dir, name)
        if keys is not None:
            shown = ", ".join(keys[:30]) + (f", ... ({len(keys)} keys)" if len(keys) > 30 else "")
            parts.append(f"{name}: keys that differ: {shown}")
        diff = run(["git", "diff", "HEAD", "--stat", "--patch", "--", name], clone_dir)  # staged too (dvc autostage)
        parts.append(diff[:DIFF_CHARS] + ("\n[... diff cut]" if len(diff) > DIFF_CHARS else ""))
    text = "\n".join(parts)
    return text[:MESSAGE_CHARS] + ("\n[... cut]" if len(text) > MESSAGE_CHARS else "")


def refused_value_leaves_the_runs(clone_dir: Path) -> list[str]:
    """A value the runs refuse, set in ``params.yaml`` (a retrieval batch of 7 images, not a multiple of
    the samples per class), stops ``dvc repro`` at the data stage's check, before DVC removes a
    training stage's outputs: every file under ``results/`` is as it was. The params file is restored."""
    params = clone_dir / "params.yaml"
    original = params.read_text()
    before = {p: p.read_bytes() for p in (clone_dir / "results").rglob("*") if p.is_file()}
    params.write_text(original.replace("overrides: profile=tiny", "overrides: batch_size=7 profile=tiny", 1))
    try:
        done = subprocess.run(
            [str(BIN / "dvc"), "repro"], cwd=clone_dir, env=clone_env(clone_dir), capture_output=True, text=True
        )
    finally:
        params.write_text(original)
    after = {p: p.read_bytes() for p in (clone_dir / "results").rglob("*") if p.is_file()}
    problems = []
    if done.returncode == 0 or "batch_size=7: must be a multiple" not in done.stdout + done.stderr:
        problems.append(
            f"dvc repro with batch_size=7 did not stop at the check:\n{(done.stdout + done.stderr)[-3000:]}"
        )
    if after != before:
        changed = sorted(str(p.relative_to(clone_dir)) for p in before.keys() ^ after.keys())
        changed += sorted(str(p.relative_to(clone_dir)) for p in before.keys() & after.keys() if before[p] != after[p])
        problems.append(f"dvc repro with a refused value changed results: {changed[:20]}")
    return problems


@pytest.fixture
def workdir(tmp_path):
    """The clones' folder, deleted afterwards unless RAMBO_KEEP_CLONES=1 (to look into a failure)."""
    yield tmp_path
    if os.environ.get("RAMBO_KEEP_CLONES") != "1":
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_committed_tiny_reproduction_reproduces_itself_in_a_fresh_clone(workdir):
    if shutil.which("git") is None or shutil.which("make") is None:
        pytest.skip("git and make are needed")
    started = time.monotonic()
    head = run(["git", "rev-parse", "HEAD"], REPO).strip()

    first = clone(f"file://{REPO}", workdir / "clone1")
    assert run(["git", "rev-parse", "HEAD"], first).strip() == head
    check_fresh(first)
    _, first_s = reproduce(first, "PROFILE=tiny")
    left = run(["git", "status", "--porcelain"], first) + run(["git", "diff", "--cached", "--name-only"], first)
    assert not left.strip(), f"make reproduce PROFILE=tiny changed or staged the checkout's files:\n{left}"
    workspace = first / "build" / "profiles" / "tiny"
    assert (workspace / "results" / "tiny" / "tables" / "tables.md").is_file()
    # tiny becomes the clone's committed profile, with what its workspace made
    run([sys.executable, "-m", "rambo.ablations.set_profile", "tiny"], first)
    shutil.copy2(workspace / "dvc.lock", first / "dvc.lock")
    for folder in ("results/tiny", "figures/out/tiny"):
        shutil.copytree(workspace / folder, first / folder, ignore=shutil.ignore_patterns("checkpoints"))
    lacking = keys_committed_files_lack(first)
    assert not lacking, "committed results files lack keys the code writes (regenerate them):\n" + "\n".join(
        f"{name}: {', '.join(keys[:12])}" for name, keys in sorted(lacking.items())[:20]
    )
    run(["git", "add", "-A"], first)  # everything `git status` shows, in the scratch clone only
    run(["git", *AUTHOR, "commit", "--quiet", "-m", "tiny reproduction (test_clean_reproduce)"], first)

    second = clone(f"file://{first}", workdir / "clone2")
    check_fresh(second)
    stages = run([str(BIN / "dvc"), "stage", "list", "--name-only"], second).split()
    runs = [s for s in stages if s.startswith(RUN_STAGES)]
    assert runs, stages
    output, second_s = reproduce(second)
    not_retrained = [s for s in runs if f"Running stage '{s}'" not in output]
    assert not not_retrained, f"stages not rerun in the second clone: {not_retrained}"
    logged = list((second / "results" / "tiny" / "runs").glob("*/*/seed*/wandb/offline-run-*"))
    # the pipeline keeps checkpoints (and so the W&B id beside each) in results/tiny/checkpoints, not in the run folder
    ids = list((second / "results" / "tiny" / "checkpoints").glob("*/*/seed*/checkpoint.pt.wandb-id"))
    assert logged and ids, "the runs did not log to W&B offline: the check below would not see W&B's files"

    problems = []
    porcelain = run(["git", "status", "--porcelain"], second)
    if porcelain.strip():
        problems.append("git status --porcelain after the rerun is not empty:\n" + describe_changes(second, porcelain))
    again = run([str(BIN / "dvc"), "repro"], second)
    if "Running stage" in again:
        ran = [line for line in again.splitlines() if line.startswith("Running stage")]
        problems.append("a second dvc repro ran stages:\n" + "\n".join(ran))
    problems += refused_value_leaves_the_runs(second)
    print(
        f"\nreproduce in clone 1: {first_s:.0f} s; in clone 2: {second_s:.0f} s; "
        f"whole test: {time.monotonic() - started:.0f} s"
    )
    assert not problems, "\n\n".join(problems)
