"""A profile's own DVC workspace, so that one profile's run never changes another's files.

The checkout's `params.yaml` and `dvc.lock` belong to its committed profile (`profile:` of
`params.yaml`: mini). `make reproduce PROFILE=<other>` runs the pipeline in
`build/profiles/<other>/` instead: a copy of the checkout's files (tracked, and untracked but not
ignored: a local edit of the code or of `ablations/profiles/<other>.yaml` is part of it) with that
profile's `params.yaml`, its own `dvc.lock`, data, runs, tables and figures, and DVC without git
(`core.no_scm`: nothing is staged). The workspace is kept between runs: each call brings the
copy's files up to date (only files whose bytes changed are written, files gone from the checkout
are removed), and `dvc repro` then reruns only what changed, as in the checkout.

Why a workspace and not a second `dvc.yaml` in the repository: DVC keeps one `dvc.lock` per
`dvc.yaml`, refuses two pipelines of one repository that declare the same output (both profiles'
data stages write `data/`), and runs every pipeline it finds on a bare `dvc repro`; a separate
DVC project per profile keeps `dvc repro` in the checkout what DVC users know.

    python -m rambo.ablations.workspace tiny     # prints the workspace's folder (make reproduce uses it)
"""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

from rambo.harness.atomic import write_text

from .checkout import PROFILE_FOLDER, REPO

BIN = Path(sys.executable).parent
GENERATED = ("results", "figures/out", "data", "dvc.lock", "params.yaml")  # made by the pipeline, not copied
KEPT = ("results/draws",)  # under GENERATED but an input: the committed runs of other machines (tables' second draw)
MANIFEST = ".workspace-files"  # the files the last sync copied: those gone from the checkout are removed


def checkout_files(repo: Path = REPO) -> list[str]:
    """The checkout's files a workspace copies: tracked, and untracked but not ignored, less the
    pipeline's outputs (`GENERATED`, but `KEPT`)."""
    if shutil.which("git") is None:
        raise SystemExit("git is needed to list the repository's files")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout
    kept = tuple(f"{k}/" for k in KEPT)
    return sorted(
        name
        for name in filter(None, listed.split("\0"))
        if (repo / name).is_file()
        and (name.startswith(kept) or not any(name == g or name.startswith(f"{g}/") for g in GENERATED))
    )


def profile_text(profile: str) -> str:
    """`ablations/profiles/<profile>.yaml`; `SystemExit` naming the known profiles otherwise."""
    source = PROFILE_FOLDER / f"{profile}.yaml"
    if not source.is_file():
        known = ", ".join(sorted(p.stem for p in PROFILE_FOLDER.glob("*.yaml")))
        raise SystemExit(f"error: unknown profile {profile!r}; known profiles: {known}")
    return source.read_text()


def sync(destination: Path, profile: str, repo: Path = REPO) -> Path:
    """Make `destination` the workspace of `profile`: the checkout's files, `params.yaml` of
    the profile, DVC without git; what the pipeline wrote there before is kept."""
    text = profile_text(profile)
    files = checkout_files(repo)
    destination.mkdir(parents=True, exist_ok=True)
    manifest = destination / MANIFEST
    before = set(manifest.read_text().splitlines()) if manifest.is_file() else set()
    for name in files:
        source, target = repo / name, destination / name
        if target.is_file() and filecmp.cmp(source, target, shallow=False):
            continue  # unchanged: DVC's hashes of it stay cached
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    for name in sorted(before - set(files)):
        (destination / name).unlink(missing_ok=True)
    write_text(manifest, "\n".join(files) + "\n")
    params = destination / "params.yaml"
    if not params.is_file() or params.read_text() != text:
        write_text(params, text)
    if not (destination / ".dvc" / "config.local").is_file():
        subprocess.run([str(BIN / "dvc"), "config", "--local", "core.no_scm", "true"], cwd=destination, check=True)
    return destination


def workspace_of(profile: str, repo: Path = REPO) -> Path:
    """Where `profile` runs: `build/profiles/<profile>`."""
    return repo / "build" / "profiles" / profile


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 1:
        print("usage: python -m rambo.ablations.workspace PROFILE", file=sys.stderr)
        return 2
    print(sync(workspace_of(arguments[0]), arguments[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
