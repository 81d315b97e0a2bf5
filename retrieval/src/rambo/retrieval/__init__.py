"""rambo.retrieval: image retrieval with rank-based losses (RaMBO, CVPR 2020) and the Recall@k surrogate.

Modules: `datasets` (loaders, synthetic set, downloads), `samplers`, `model`, `engine`, `evaluate`,
`train` (Hydra app), `two_pass` (chunked backward for large batches), `contrastive_loss` (baseline);
the rank losses themselves, and their distributed form, are `rambo.core`'s.
"""

import rambo.harness  # noqa: F401  (first: it sets the numerics mode before torch and numpy load)

__version__ = "0.1.0"  # equal to pyproject.toml's version (tests/test_packaging.py checks)
