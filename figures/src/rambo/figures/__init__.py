"""rambo.figures: the paper's figures, one module per figure, run from the repository root with
`python -m rambo.figures.<module> --out figures/out/<profile> ...` (the DVC stages `figure_1` ...
`figure_6`, `table_6`, `figures_sodeep`); the helper modules beside them hold one concept each
(figures/README.md)."""

import rambo.harness  # noqa: F401  (first: it sets the numerics mode before torch and numpy load)

__version__ = "0.1.0"  # equal to pyproject.toml's version (tests/test_packaging.py checks)
