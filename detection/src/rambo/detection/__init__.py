"""rambo.detection: Faster R-CNN with the RaMBO rank-based RoI classifier loss on Pascal VOC (paper Sec. 5.2)."""

import rambo.harness  # noqa: F401  (first: it sets the numerics mode before torch and numpy load)

__version__ = "0.1.0"  # equal to pyproject.toml's version (tests/test_packaging.py checks)
