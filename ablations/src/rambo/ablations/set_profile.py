"""Make params.yaml the parameters of a profile: `python -m rambo.ablations.set_profile mini`.

params.yaml is what every DVC stage reads; ablations/profiles/<name>.yaml holds each profile. The
file is replaced only when it differs, so that switching to the profile already in place leaves
every stage up to date. A params.yaml that is none of the profiles and not the committed one
(edited by hand) is never overwritten silently: `--force` (`make reproduce ...
FORCE_PROFILE=1`) replaces it, else the command stops and says so; run `dvc repro` directly to
use the edited file. The committed params.yaml (an older version of a profile, after a pull that
changed the profile) is not a local edit.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rambo.harness.atomic import write_text

from .checkout import ABLATIONS

PROFILES = ABLATIONS / "profiles"


def committed_text(params: Path) -> str | None:
    """`params` as committed in git's HEAD, or None (no git, not a repository, not tracked)."""
    try:
        shown = subprocess.run(
            ["git", "show", f"HEAD:./{params.name}"],
            cwd=params.resolve().parent,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return shown.stdout if shown.returncode == 0 else None


def set_profile(name: str, params: Path = Path("params.yaml"), force: bool = False) -> bool:
    """Copy the profile to `params`; returns whether the file changed. `SystemExit` naming the
    problem for an unknown profile, or for a locally edited `params` unless `force`."""
    source = PROFILES / f"{name}.yaml"
    if not source.is_file():
        known = ", ".join(sorted(p.stem for p in PROFILES.glob("*.yaml")))
        raise SystemExit(f"unknown profile {name!r}; known profiles: {known}")
    text = source.read_text()
    if params.is_file():
        current = params.read_text()
        if current == text:
            return False
        known = [profile.read_text() for profile in PROFILES.glob("*.yaml")]
        if not force and current not in known and current != committed_text(params):
            raise SystemExit(
                f"{params} has local edits (it is none of the profiles in {PROFILES}); not overwriting it.\n"
                f"Keep them: run `dvc repro` directly (with .venv/bin on PATH). Discard them: "
                f"`make reproduce PROFILE={name} FORCE_PROFILE=1` (or "
                f"`python -m rambo.ablations.set_profile {name} --force`)."
            )
    write_text(params, text)
    return True


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "--force"]
    if len(arguments) != 1:
        raise SystemExit("usage: python -m rambo.ablations.set_profile PROFILE [--force]")
    changed = set_profile(arguments[0], force="--force" in sys.argv[1:])
    print(f"params.yaml: profile {arguments[0]}" + (" (switched)" if changed else " (unchanged)"))
