"""rambo.core: rank-based losses by blackbox differentiation of exact ranking (RaMBO, CVPR 2020).

Public API (each name links to its entry):

- [`EmbeddingLoss`][rambo.core.EmbeddingLoss]`(loss, tau=0, global_batch=True)`: the embedding-level entry point.
    - `loss(embeddings [B, D], labels [B])`: each element ranks the others (+ memory);
    - `loss(embeddings, labels, ref_embeddings, ref_labels)`: each element ranks the reference set.
- [`RecallLoss`][rambo.core.RecallLoss]`(margin, lam, weighting)`: Eq. 16-20,
  `loss(scores [Q, N], relevant [Q, N] bool)`.
- [`APLoss`][rambo.core.APLoss]`(margin, lam)`: Eq. 21-22, `loss(scores [Q, N], relevant [Q, N] bool)`.
- [`MAPLoss`][rambo.core.MAPLoss]`(margin, lam)`, [`APCLoss`][rambo.core.APCLoss]`(margin, lam)`: Eq. 6/22 and
  Eq. 23, `loss(scores [N, C], labels [N, C] bool)`.
- [`RecallAtKSurrogate`][rambo.core.RecallAtKSurrogate], [`FastAPLoss`][rambo.core.FastAPLoss],
  [`SmoothAPLoss`][rambo.core.SmoothAPLoss]: comparison surrogates, `loss(scores, relevant)`.
- [`SiMix`][rambo.core.SiMix]`(loss)`: similarity mixup, `simix(embeddings, labels)`.
- [`EmbeddingMemory`][rambo.core.EmbeddingMemory]`(loss, tau)`: `EmbeddingLoss` with a score memory (Sec. 4.3).
- [`ScoreMemory`][rambo.core.ScoreMemory]`(loss, tau)`: Sec. 4.3 for score rows (detection).
- [`RowMemory`][rambo.core.RowMemory]`(loss, tau)`: the authors' recall memory (score rows appended), for
  comparison.
- [`rank`][rambo.core.rank]`(scores, lam)`: exact ranks, Alg. 1 backward.
- [`rank_items`][rambo.core.rank_items]`(scores, index, lam)`: `rank(scores, lam)[index]`, backward re-ranking
  only the moved items.
- [`scale_gradient`][rambo.core.scale_gradient]`(tensor, factor)`: weight a rank loss without changing its
  lambda.
- [`pairwise_scores`][rambo.core.pairwise_scores]`(embeddings, labels)`: `[B, B-1]` cosine scores and relevance.
- [`unit_rows`][rambo.core.unit_rows]`(embeddings)`: rows of unit length, at any scale (zero rows stay zero).
- [`rambo.core.distributed`][rambo.core.distributed]: `global_batch`, `gather_with_grad`: the global batch
  under DDP.
- [`rambo.core.metrics`][rambo.core.metrics]: `average_precision`, `recall_at_k`, `map_at_r`, `r_precision`.
"""

__version__ = "0.1.0"  # equal to pyproject.toml's version (tests/test_packaging.py checks)

from . import distributed, metrics
from .ap_loss import APLoss
from .embedding_loss import EmbeddingLoss, EmbeddingMemory
from .fast_ap import FastAPLoss
from .gradient_scale import scale_gradient
from .item_ranking import rank_items
from .map_loss import APCLoss, MAPLoss
from .margin import shift_by_margin
from .pairwise import pairwise_scores, unit_rows
from .rank_loss import RankLoss
from .ranking import exact_rank, rank, rank_within_relevant
from .recall_at_k_surrogate import RecallAtKSurrogate
from .recall_loss import RecallLoss
from .score_memory import RowMemory, ScoreMemory
from .simix import SiMix
from .smooth_ap import SmoothAPLoss
from .surrogate_loss import SurrogateLoss

__all__ = [
    "APCLoss",
    "APLoss",
    "EmbeddingLoss",
    "EmbeddingMemory",
    "FastAPLoss",
    "MAPLoss",
    "RankLoss",
    "RecallAtKSurrogate",
    "RecallLoss",
    "RowMemory",
    "ScoreMemory",
    "SiMix",
    "SmoothAPLoss",
    "SurrogateLoss",
    "distributed",
    "exact_rank",
    "metrics",
    "pairwise_scores",
    "unit_rows",
    "rank",
    "rank_items",
    "rank_within_relevant",
    "scale_gradient",
    "shift_by_margin",
]
