"""Make params.yaml the parameters of a profile: ``python ablations/set_profile.py mini``.

params.yaml is what every DVC stage reads; ablations/profiles/<name>.yaml holds each profile. The
file is replaced only when it differs, so that switching to the profile already in place leaves
every stage up to date.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rambo.harness.atomic import write_text

PROFILES = Path(__file__).resolve().parent / "profiles"


def set_profile(name: str, params: Path = Path("params.yaml")) -> bool:
    """Copy the profile to ``params``; returns whether the file changed."""
    source = PROFILES / f"{name}.yaml"
    if not source.is_file():
        known = ", ".join(sorted(p.stem for p in PROFILES.glob("*.yaml")))
        raise SystemExit(f"unknown profile {name!r}; known profiles: {known}")
    text = source.read_text()
    if params.is_file() and params.read_text() == text:
        return False
    write_text(params, text)
    return True


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python ablations/set_profile.py PROFILE")
    changed = set_profile(sys.argv[1])
    print(f"params.yaml: profile {sys.argv[1]}" + (" (switched)" if changed else " (unchanged)"))
