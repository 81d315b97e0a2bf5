"""The RaMBO RoI classifier loss: `(1 - c) L_mAP + c L_AP-C`, c = 1/3 (paper 4.6, 5.2).

The formulation is the authors' (their detection loss: an inter-class coefficient c with the
paper's "2 : 1" ratio of the two terms as `(1 - c) : c`; the score memory of the last `tau`
batches extends the ranking of L_mAP only, L_AP-C ranks the current batch). The coefficients sit
before the blackbox rank, as in their code, so `lam` means what it means in the paper's tables.
Any further weight (`loss_weight`) scales only the gradient that leaves the loss
([`rambo.core.scale_gradient`][rambo.core.scale_gradient]): a weight on the loss value would multiply lambda as well.

What is ranked. Each sampled RoI is an item; its scores are the classifier's logits of the C
object classes, `[N, C]`. Column `c` ranks all RoIs for class `c` (L_mAP, Eq. 22 averaged
over classes) and the flattened matrix ranks everything at once (L_AP-C, Eq. 23). A RoI is
relevant in the column of its ground-truth class; background RoIs are relevant nowhere, so they
are negatives in every column, as in the AP-loss of Chen et al. 2019a that the paper follows for
AP-C. The background column is not used; at inference the detections are ranked by these same
object logits
([`rambo.detection.roi_heads.ConfigurableLossRoIHeads`][rambo.detection.roi_heads.ConfigurableLossRoIHeads],
`score_function="logit"`).

Why logits and not softmax probabilities: ranking the softmax outputs gave (measured on the tiny
synthetic set, 60 iterations) a classifier gradient norm of 0.000-0.005 against 0.01-0.13 on
logits, and no learning at all (mAP 0.003 vs 0.106): the blackbox gradient is a rank difference
divided by lambda, and the softmax Jacobian (about p = 1 / (C + 1)) shrinks it further.

The margin (`margin_mode`). `fixed` (the default) is the paper's Eq. 14: relevant scores move
down by alpha / 2, irrelevant ones up by alpha / 2 ([`rambo.core.shift_by_margin`][rambo.core.shift_by_margin], inside
the core losses). `authors_random` is the authors' detection code (martius-lab/blackbox-backprop
`blackbox_backprop/mAP.py` at 075bf56, `raw_map_computation`): every entry of the ranked
matrix gets its own draw, `scores - alpha * |z| * (relevant - 1/2)` with `z ~ N(0, 1)`, i.e.
relevant scores down and irrelevant ones up by `alpha |z| / 2` (alpha / 2 times |z|, whose mean
is sqrt(2 / pi) ~ 0.80). As there, the draws are fresh at every call, for L_mAP over the batch and
its memory (drawn as a `[C, N + M]` matrix, their transposed layout) and separately for L_AP-C
over the flattened batch (`[1, N C]`), in that order; the memory keeps the unshifted scores.
The draws come from this loss's own `torch.Generator`
([`AuthorsRandomMargin`][rambo.detection.rank_classifier_loss.AuthorsRandomMargin]) on the scores' device, seeded by
`margin_seed` or, when None, by one draw from the global generator at construction (the run's seed: the app seeds it
before building the model, identically on every DDP process, so every process draws the same margins for the same global
batch); its state travels with `state_dict()` so a resumed run continues the same draws.

Several processes (DDP): with `global_batch=True` (the default, the paper's loss) every process
ranks the global batch, the RoIs of all processes' images, and its memory holds global batches
([`rambo.detection.distributed`][rambo.detection.distributed]); `global_batch=False` ranks each process's own RoIs with
its own memory (cheaper, not the paper's loss). One process: the two are the same.
"""

from __future__ import annotations

import torch

from rambo.core import APCLoss, MAPLoss, ScoreMemory, scale_gradient
from rambo.core.loss_path import assert_on_device, host_checks, use_dense
from rambo.core.validation import check_margin

from .distributed import global_batch


def labels_to_relevance(labels: torch.Tensor, num_classes: int, background_label: int) -> torch.Tensor:
    """`labels [N]` (class ids plus one background id) -> `relevant [N, C]` bool over object classes.

    `background_label`: 0 in torchvision (objects 1..C go to columns 0..C-1) or C in mmdetection
    (objects 0..C-1 are their own columns). A background row is all False.
    """
    if labels.dim() != 1:
        raise ValueError(f"labels must be 1-d [N], got shape {tuple(labels.shape)}")
    if background_label not in (0, num_classes):
        raise ValueError(
            f"background_label must be 0 (torchvision) or num_classes={num_classes} (mmdet), got {background_label}"
        )
    labels = labels.long()
    columns = labels - 1 if background_label == 0 else labels
    if not host_checks(labels):  # rambo.core.loss_path "propagate": a device-side assert, no wait for the host
        assert_on_device(((labels >= 0) & (labels <= num_classes)).all(), f"labels must lie in 0..{num_classes}")
    elif labels.numel() and (int(labels.min()) < 0 or int(labels.max()) > num_classes):
        raise ValueError(f"labels must lie in 0..{num_classes}, got range {int(labels.min())}..{int(labels.max())}")
    if use_dense(labels):  # fixed shapes, no nonzero(): each label against every column (background matches none)
        return columns.unsqueeze(1) == torch.arange(num_classes, device=labels.device)
    foreground = labels != background_label
    relevant = torch.zeros(labels.numel(), num_classes, dtype=torch.bool, device=labels.device)
    relevant[foreground.nonzero().squeeze(1), columns[foreground]] = True
    return relevant


MARGIN_MODES = ("fixed", "authors_random")


class AuthorsRandomMargin(torch.nn.Module):
    """The authors' random margin (module docstring) around a rank loss built without one.

    `loss(scores [N, C], relevant [N, C])` receives `scores - margin * |z| * (relevant - 1/2)`,
    `z` drawn from `generator` as a `[C, N]` matrix (`layout="columns"`, L_mAP's
    `transpose`) or a `[1, N C]` row (`layout="flat"`, L_AP-C's `reshape(-1, 1).transpose`),
    then brought to `[N, C]`. `noise`: the [`MarginNoise`][rambo.detection.rank_classifier_loss.MarginNoise] shared by
    the two terms.
    """

    def __init__(self, loss: torch.nn.Module, margin: float, noise: MarginNoise, layout: str):
        super().__init__()
        if layout not in ("columns", "flat"):
            raise ValueError(f"layout must be columns or flat, got {layout!r}")
        self.loss, self.margin, self.layout = loss, check_margin(margin), layout
        self._noise = [noise]  # not a submodule: its state is saved once, by the classifier loss
        self.ranked_dim = getattr(loss, "ranked_dim", -1)  # what a ScoreMemory around this extends

    def shift(self, scores: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
        """The shifted scores (float32 at least, as [`rambo.core.shift_by_margin`][rambo.core.shift_by_margin])."""
        scores = scores.to(torch.promote_types(scores.dtype, torch.float32))
        rows, columns = scores.shape
        if self.layout == "columns":
            z = self._noise[0].normal((columns, rows), scores).transpose(0, 1)
        else:
            z = self._noise[0].normal((1, rows * columns), scores).reshape(rows, columns)
        return scores - self.margin * (z.abs() * (relevant.to(scores.dtype) - 0.5))

    def forward(self, scores: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
        return self.loss(self.shift(scores, relevant), relevant)


class MarginNoise(torch.nn.Module):
    """A `torch.Generator` seeded with `seed`, created on the device of the first scores it
    draws for; its state is this module's extra state (`state_dict()`), restored on resume (on
    the same device type; on another one the draws start again from the seed)."""

    def __init__(self, seed: int):
        super().__init__()
        self.seed = int(seed)
        self.generator: torch.Generator | None = None
        self._pending: dict | None = None

    def normal(self, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        if self.generator is None or self.generator.device.type != like.device.type:
            self.generator = torch.Generator(device=like.device).manual_seed(self.seed)
            if self._pending is not None and self._pending["device_type"] == like.device.type:
                self.generator.set_state(self._pending["state"])
            self._pending = None
        return torch.randn(shape, generator=self.generator, device=like.device, dtype=like.dtype)

    def get_extra_state(self) -> dict:
        if self.generator is None:
            return dict(self._pending) if self._pending is not None else {"device_type": None, "state": None}
        return {"device_type": self.generator.device.type, "state": self.generator.get_state()}

    def set_extra_state(self, state: dict) -> None:
        self.generator = None
        self._pending = state if state.get("state") is not None else None


class RankClassifierLoss(torch.nn.Module):
    """The classifier loss as the RoI heads call it: `loss(class_logits [N, C+1], labels [N])`.

    `(1 - interclass_coef) * L_mAP(scores and memory) + interclass_coef * L_AP-C(scores)`, the
    gradient reaching the logits multiplied by `loss_weight`.

    Args:
        num_classes: C (object classes, background excluded).
        background_label: where background sits in `labels` and in the logits' columns:
            0 (torchvision: column 0) or C (mmdetection: the last column).
        margin, lam, tau: alpha, lambda and the score memory length (paper 5.2: 0.15, 0.5, 7).
        interclass_coef: c, the weight of L_AP-C (1/3: the paper's 2 : 1 ratio, the authors' code).
        loss_weight: a pure gradient scale (1 in the paper); the loss value and lambda are unchanged.
        global_batch: under DDP, rank the RoIs of every process (True, the paper's loss: one GPU ranks
            the whole batch) or only this process's (False); no effect in a single process.
        margin_mode: `fixed` (the paper's Eq. 14, alpha / 2) or `authors_random` (alpha |z| / 2
            per entry, the authors' mAP.py; module docstring).
        margin_seed: the seed of `authors_random`'s generator; None: one draw of the global
            generator at construction. Unused with `fixed`.
    """

    def __init__(
        self,
        num_classes: int,
        background_label: int = 0,
        margin: float = 0.15,
        lam: float = 0.5,
        tau: int = 7,
        interclass_coef: float = 1.0 / 3.0,
        loss_weight: float = 1.0,
        global_batch: bool = True,
        margin_mode: str = "fixed",
        margin_seed: int | None = None,
    ):
        super().__init__()
        if background_label not in (0, num_classes):
            raise ValueError(f"background_label must be 0 or num_classes={num_classes}, got {background_label}")
        if not 0.0 <= interclass_coef <= 1.0:
            raise ValueError(f"interclass_coef must lie in [0, 1], got {interclass_coef}")
        if not loss_weight > 0:
            raise ValueError(f"loss_weight must be > 0, got {loss_weight}")
        self.num_classes = int(num_classes)
        self.background_label = int(background_label)
        self.interclass_coef = float(interclass_coef)
        self.loss_weight = float(loss_weight)
        if not isinstance(global_batch, bool):
            raise ValueError(f"global_batch must be true or false, got {global_batch!r}")
        self.global_batch = global_batch
        if margin_mode not in MARGIN_MODES:
            raise ValueError(f"margin_mode must be one of {MARGIN_MODES}, got {margin_mode!r}")
        self.margin_mode = margin_mode
        if margin_mode == "fixed":
            self.map_memory = ScoreMemory(MAPLoss(margin=margin, lam=lam), tau)  # L_mAP over the batch and memory
            self.apc_loss = APCLoss(margin=margin, lam=lam)  # L_AP-C over the current batch
        else:  # the core losses without a margin, the authors' random one applied before them
            if margin_seed is None:
                margin_seed = int(torch.randint(0, 2**62, (1,)).item())
            self.margin_noise = MarginNoise(margin_seed)
            self.map_memory = ScoreMemory(
                AuthorsRandomMargin(MAPLoss(margin=0.0, lam=lam), margin, self.margin_noise, "columns"), tau
            )
            self.apc_loss = AuthorsRandomMargin(APCLoss(margin=0.0, lam=lam), margin, self.margin_noise, "flat")

    def object_scores(self, class_logits: torch.Tensor) -> torch.Tensor:
        """The logits of the C object classes, `[N, C]` (the background column dropped)."""
        if class_logits.dim() != 2 or class_logits.shape[1] != self.num_classes + 1:
            raise ValueError(f"class_logits must be [N, {self.num_classes + 1}], got {tuple(class_logits.shape)}")
        if self.background_label == 0:
            return class_logits[:, 1:]
        return class_logits[:, : self.num_classes]

    def forward(self, class_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.object_scores(class_logits)  # this process's shape checked before any collective
        if self.global_batch:  # under DDP: the global batch, the local gradient x world size (no-op alone)
            class_logits, labels = global_batch(class_logits, labels)
        relevant = labels_to_relevance(labels, self.num_classes, self.background_label)
        scores = scale_gradient(self.object_scores(class_logits), self.loss_weight)
        c = self.interclass_coef
        return (1.0 - c) * self.map_memory(scores, relevant) + c * self.apc_loss(scores, relevant)
