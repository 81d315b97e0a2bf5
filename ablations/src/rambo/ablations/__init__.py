"""rambo.ablations: the pipeline's tools around the runs (profiles, tables and claims, the
paper-settings ledger, paper-smoke, the W&B report), run from the repository root with
`python -m rambo.ablations.<module>` (ablations/README.md)."""

import rambo.harness  # noqa: F401  (first: it sets the numerics mode before torch and numpy load)

__version__ = "0.1.0"  # equal to pyproject.toml's version (tests/test_packaging.py checks)
