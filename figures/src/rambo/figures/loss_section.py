"""A fixed random 2-D section of the score space R^N on which rank-based losses are drawn.

`w(s, t) = centre + s * u + t * v` with a random centre `w0 ~ N(0, I)`, a random orthonormal
pair `(u, v)` and a random loss `L(w) = <a, rank(w)>` with `a ~ N(0, I)` (paper Fig. 1 and
App. C: "a (random but fixed) linear combination of the ranks ... a (random but fixed)
two-dimensional section"). The same seed gives the same section in Fig. 1, 5 and 6.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LossSection:
    """`centre: [N]`, `plane: [2, N]` (orthonormal rows u, v), `weights: [N]` (the loss's a)."""

    centre: torch.Tensor
    plane: torch.Tensor
    weights: torch.Tensor
    extent: float

    @classmethod
    def random(cls, dim: int = 20, extent: float = 1.0, seed: int = 0) -> LossSection:
        if dim < 2:
            raise ValueError(f"dim (length of the score vector) must be >= 2, got {dim}")
        if not extent > 0:
            raise ValueError(f"extent (half-width of the plotted square) must be > 0, got {extent}")
        generator = torch.Generator().manual_seed(seed)
        centre = torch.randn(dim, generator=generator, dtype=torch.float64)
        # QR of a Gaussian matrix: an orthonormal pair, uniformly oriented.
        plane = torch.linalg.qr(torch.randn(dim, 2, generator=generator, dtype=torch.float64)).Q.T.contiguous()
        weights = torch.randn(dim, generator=generator, dtype=torch.float64)
        return cls(centre, plane, weights, float(extent))

    def coordinates(self, resolution: int) -> torch.Tensor:
        """`[resolution]` plane coordinates from `-extent` to `extent`."""
        if resolution < 2:
            raise ValueError(f"resolution must be >= 2 grid points per axis, got {resolution}")
        return torch.linspace(-self.extent, self.extent, resolution, dtype=torch.float64)

    def grid(self, resolution: int) -> torch.Tensor:
        """`[resolution (t), resolution (s), N]` score vectors `w(s, t)`; row index is t (image y)."""
        coords = self.coordinates(resolution)
        t, s = torch.meshgrid(coords, coords, indexing="ij")
        return self.centre + s.unsqueeze(-1) * self.plane[0] + t.unsqueeze(-1) * self.plane[1]

    def value_range(self, resolution: int) -> tuple[float, float]:
        """Smallest and largest score on the grid: the fixed score range of FastAP's histogram here."""
        points = self.grid(resolution)
        return float(points.min()), float(points.max())

    def loss_of_ranks(self, ranks: torch.Tensor) -> torch.Tensor:
        """`L = <a, ranks>` for any (exact or surrogate) ranks `[..., N]` -> `[...]`."""
        return (ranks.to(self.weights.dtype) * self.weights).sum(-1)
