import pytest
import torch

from rambo.core import APCLoss, MAPLoss
from rambo.detection.mmdet_inputs import select_weighted_rois
from rambo.detection.rank_classifier_loss import RankClassifierLoss, labels_to_relevance


def brute_relevance(labels, num_classes, background_label):
    rows = []
    for label in labels.tolist():
        row = [False] * num_classes
        if label != background_label:
            row[label - 1 if background_label == 0 else label] = True
        rows.append(row)
    return torch.tensor(rows, dtype=torch.bool).reshape(len(rows), num_classes)


@pytest.mark.parametrize("background_label", [0, 4])
def test_labels_to_relevance_matches_brute_force(background_label):
    labels = torch.tensor([0, 1, 2, 3, 4, 4, 0, 2])
    relevant = labels_to_relevance(labels, 4, background_label)
    assert torch.equal(relevant, brute_relevance(labels, 4, background_label))
    assert not relevant[labels == background_label].any()  # background: negative in every column


def test_labels_to_relevance_rejects_bad_labels():
    with pytest.raises(ValueError, match="lie in 0..3"):
        labels_to_relevance(torch.tensor([0, 5]), 3, 0)
    with pytest.raises(ValueError, match="background_label"):
        labels_to_relevance(torch.tensor([0, 1]), 3, 1)
    with pytest.raises(ValueError, match="1-d"):
        labels_to_relevance(torch.zeros(2, 2, dtype=torch.long), 3, 0)


def brute_ap_loss(scores, relevant, margin):
    """1 - AP of one ranking by Eq. 14, 21, 22: relevant scores shifted down by margin/2, others up."""
    shifted = [s - margin / 2 if r else s + margin / 2 for s, r in zip(scores, relevant)]
    precisions = []
    for s, r in zip(shifted, relevant):
        if r:
            rank = 1 + sum(t > s for t in shifted)
            rank_relevant = 1 + sum(t > s for t, q in zip(shifted, relevant) if q)
            precisions.append(rank_relevant / rank)
    return 1 - sum(precisions) / len(precisions)


def brute_map_and_apc(scores, relevant, margin, current=None, c=1.0 / 3.0):
    """The authors' detection loss by its definition (paper Eq. 22, 23; their coefficient c):
    (1 - c) * mean over present classes of the AP loss of each column of ``scores`` (the current
    batch followed by the remembered ones) + c * the AP loss of the flattened current batch (its
    first ``current`` rows)."""
    current = scores.shape[0] if current is None else current
    columns = [k for k in range(scores.shape[1]) if relevant[:, k].any()]
    map_loss = sum(brute_ap_loss(scores[:, k].tolist(), relevant[:, k].tolist(), margin) for k in columns) / len(
        columns
    )
    apc_loss = brute_ap_loss(scores[:current].flatten().tolist(), relevant[:current].flatten().tolist(), margin)
    return (1 - c) * map_loss + c * apc_loss


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("margin", [0.0, 0.15])
def test_loss_matches_the_authors_formulation_by_brute_force(dtype, margin):
    generator = torch.Generator().manual_seed(0)
    for _ in range(5):
        logits = torch.rand(12, 5, generator=generator, dtype=dtype)
        labels = torch.randint(0, 5, (12,), generator=generator)
        if not (labels > 0).any():
            continue
        value = RankClassifierLoss(4, margin=margin, lam=0.5, tau=0)(logits, labels)
        expected = brute_map_and_apc(logits[:, 1:], brute_relevance(labels, 4, 0), margin)
        assert float(value) == pytest.approx(expected, abs=1e-6)


def test_rank_classifier_loss_ranks_object_logits():
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(10, 4, generator=generator, dtype=torch.float64)  # C = 3, background column 0
    labels = torch.tensor([0, 1, 2, 3, 0, 0, 1, 3, 2, 0])
    loss = RankClassifierLoss(3, background_label=0, margin=0.15, lam=0.5, tau=0)
    expected = brute_map_and_apc(logits[:, 1:], brute_relevance(labels, 3, 0), 0.15)
    assert float(loss(logits, labels)) == pytest.approx(expected)
    # mmdet's convention (background last) on the same RoIs gives the same value.
    mmdet = RankClassifierLoss(3, background_label=3, margin=0.15, lam=0.5, tau=0)
    mmdet_labels = torch.where(labels == 0, 3, labels - 1)
    assert float(mmdet(logits[:, [1, 2, 3, 0]], mmdet_labels)) == pytest.approx(expected)
    with pytest.raises(ValueError, match=r"\[N, 4\]"):
        loss(logits[:, :3], labels)


@pytest.mark.outcome
def test_gradient_reaches_object_logits_only_and_lowers_the_loss():
    generator = torch.Generator().manual_seed(2)
    logits = torch.randn(40, 5, generator=generator, requires_grad=True)
    labels = torch.randint(0, 5, (40,), generator=generator)
    loss = RankClassifierLoss(4, tau=0)
    value = loss(logits, labels)
    value.backward()
    value = value.detach()
    assert logits.grad[:, 0].abs().sum() == 0 and logits.grad[:, 1:].abs().sum() > 0
    with torch.no_grad():
        stepped = logits - 5.0 * logits.grad
    assert float(loss(stepped, labels)) < float(value)


def test_score_memory_extends_the_ranking_with_previous_batches():
    generator = torch.Generator().manual_seed(3)
    batches = [
        (torch.randn(8, 4, generator=generator, dtype=torch.float64), torch.randint(0, 4, (8,), generator=generator))
        for _ in range(3)
    ]
    loss = RankClassifierLoss(3, tau=2).train()
    values = [float(loss(logits, labels)) for logits, labels in batches]
    # Third call: the current batch followed by the two remembered ones, ranked together.
    scores = torch.cat([b[0][:, 1:] for b in (batches[2], batches[0], batches[1])])
    relevant = torch.cat([brute_relevance(b[1], 3, 0) for b in (batches[2], batches[0], batches[1])])
    assert values[2] == pytest.approx(brute_map_and_apc(scores, relevant, 0.15, current=8))  # AP-C: batch 3 only
    state = loss.state_dict()
    restored = RankClassifierLoss(3, tau=2)
    restored.load_state_dict(state)
    # The memory now holds batches 1 and 2 (tau = 2) and travels with the state dict.
    scores = torch.cat([b[0][:, 1:] for b in batches])
    relevant = torch.cat([brute_relevance(b[1], 3, 0) for b in batches])
    assert float(restored(*batches[0])) == pytest.approx(brute_map_and_apc(scores, relevant, 0.15, current=8))


def test_select_weighted_rois_for_mmdet_arguments():
    cls_score = torch.arange(15.0).reshape(5, 3)
    labels = torch.tensor([0, 2, 1, 2, 0])
    kept_scores, kept_labels = select_weighted_rois(cls_score, labels, torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0]))
    assert torch.equal(kept_scores, cls_score[[0, 2, 3]]) and kept_labels.tolist() == [0, 1, 2]
    assert select_weighted_rois(cls_score, labels, None)[0] is cls_score
    with pytest.raises(ValueError, match="other than 0 and 1"):
        select_weighted_rois(cls_score, labels, torch.full((5,), 0.5))
    with pytest.raises(ValueError, match=r"labels must be \[N\]"):
        select_weighted_rois(cls_score, labels[:3], None)
    with pytest.raises(ValueError, match="cls_score"):
        select_weighted_rois(cls_score[:, :1], labels, None)


def test_gradient_is_the_authors_composition_at_the_same_lambda():
    """(1 - c) L_mAP(batch + memory) + c L_AP-C(batch), with the coefficients before the rank as in
    the authors' code: the same loss and gradient as composing the core losses that way."""
    generator = torch.Generator().manual_seed(4)
    batches = [
        (
            0.05 * torch.randn(10, 4, generator=generator, dtype=torch.float64),
            torch.randint(0, 4, (10,), generator=generator),
        )
        for _ in range(3)
    ]
    loss = RankClassifierLoss(3, margin=0.15, lam=5.0, tau=2).train()  # large lambda: ranks swap in 30 rows
    for logits, labels in batches[:2]:
        loss(logits, labels)
    logits, labels = batches[2][0].clone().requires_grad_(True), batches[2][1]
    loss(logits, labels).backward()
    reference = batches[2][0].clone().requires_grad_(True)
    relevant = brute_relevance(labels, 3, 0)
    remembered = torch.cat([batches[0][0][:, 1:], batches[1][0][:, 1:]])
    remembered_relevant = torch.cat([brute_relevance(b[1], 3, 0) for b in batches[:2]])
    map_term = MAPLoss(0.15, 5.0)(torch.cat([reference[:, 1:], remembered]), torch.cat([relevant, remembered_relevant]))
    value = (2 / 3) * map_term + (1 / 3) * APCLoss(0.15, 5.0)(reference[:, 1:], relevant)
    value.backward()
    assert torch.allclose(logits.grad, reference.grad, atol=1e-12) and logits.grad.abs().sum() > 0


def test_a_loss_weight_scales_the_gradient_but_not_lambda():
    """loss_weight w: the same items move, w times as much; a weight on the loss value instead
    would also multiply lambda (Alg. 1 perturbs by lam * dL/drank) and move other items."""
    generator = torch.Generator().manual_seed(5)
    logits = 0.05 * torch.randn(60, 6, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 6, (60,), generator=generator)

    def gradient(weight, on_value=False):
        x = logits.clone().requires_grad_(True)
        loss = RankClassifierLoss(5, lam=0.5, tau=0, loss_weight=1.0 if on_value else weight)
        value = loss(x, labels)
        (weight * value if on_value else value).backward()
        return x.grad, value.detach()

    unit, unit_value = gradient(1.0)
    weighted, weighted_value = gradient(8.0)
    assert torch.allclose(weighted, 8.0 * unit, atol=1e-12) and weighted_value == unit_value
    assert torch.equal(weighted != 0, unit != 0) and unit.abs().sum() > 0
    on_value, _ = gradient(8.0, on_value=True)
    assert not torch.allclose(on_value, 8.0 * unit)  # what this design avoids
    with pytest.raises(ValueError, match="loss_weight"):
        RankClassifierLoss(5, loss_weight=0.0)
    with pytest.raises(ValueError, match="interclass_coef"):
        RankClassifierLoss(5, interclass_coef=1.5)


def _detection_steps(steps=9, rois=96, classes=5):
    """RoI logits with ties (the loss must break them as the sparse path does) and labels, per step."""
    batches = []
    for step in range(steps):
        generator = torch.Generator().manual_seed(step)
        logits = torch.randint(-4, 5, (rois, classes + 1), generator=generator).float() / 2
        batches.append((logits, torch.randint(0, classes + 1, (rois,), generator=generator)))
    return batches


def _gradients(loss, batches, run=None):
    run = loss if run is None else run
    grads = []
    for logits, labels in batches:
        leaf = logits.clone().requires_grad_(True)
        run(leaf, labels).backward()
        grads.append(leaf.grad)
    return grads


@pytest.mark.parametrize("background_label", [0, 5])
def test_the_dense_detection_loss_gives_the_sparse_gradients_while_its_memory_fills_and_never_waits(background_label):
    """The GPU path (rambo.core.loss_path "dense") on the CPU: 9 steps, the memory of 7
    full from the 8th; bit-identical gradients, and no host sync in a call (the sparse one has many)."""
    from rambo.core.host_syncs import count_host_syncs
    from rambo.core.loss_path import loss_path

    batches = _detection_steps()
    with loss_path("sparse"):
        sparse = _gradients(RankClassifierLoss(5, background_label, tau=7, loss_weight=2.0), batches)
    dense_loss = RankClassifierLoss(5, background_label, tau=7, loss_weight=2.0)
    with loss_path("dense"):
        dense = _gradients(dense_loss, batches[:-1])
        logits, labels = batches[-1]
        leaf = logits.clone().requires_grad_(True)
        syncs, ops = count_host_syncs(lambda: dense_loss(leaf, labels).backward())
        dense.append(leaf.grad)
    assert (syncs, dict(ops)) == (0, {})
    for step, (a, b) in enumerate(zip(dense, sparse)):
        assert torch.equal(a, b) and torch.equal(a.signbit(), b.signbit()), f"step {step}"
    with loss_path("sparse"):
        assert count_host_syncs(lambda: RankClassifierLoss(5, background_label)(*batches[0]))[0] > 10


def test_bad_labels_fail_on_the_device_on_the_dense_path():
    from rambo.core.loss_path import loss_path

    with loss_path("dense"), pytest.raises(RuntimeError, match="labels must lie in 0..5"):
        labels_to_relevance(torch.tensor([0, 6]), 5, 0)
    with loss_path("dense", checks="raise"), pytest.raises(ValueError, match="got range 0..6"):
        labels_to_relevance(torch.tensor([0, 6]), 5, 0)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(
    "backend",
    [
        "aot_eager",
        pytest.param(
            "inductor",
            marks=pytest.mark.skipif(
                __import__("os").environ.get("ATEN_CPU_CAPABILITY") == "default",
                reason="inductor's C++ does not build with ATEN_CPU_CAPABILITY=default (torch 2.14)",
            ),
        ),
    ],
)
def test_the_detection_loss_compiles_as_one_graph_with_the_eager_gradients(backend):
    batches = _detection_steps()
    loss = RankClassifierLoss(5, 0, tau=7)
    explained = torch._dynamo.explain(lambda x, labels: loss(x, labels))(
        batches[0][0].clone().requires_grad_(True), batches[0][1]
    )
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    expected = _gradients(RankClassifierLoss(5, 0, tau=7), batches)
    torch._dynamo.reset()
    compiled_loss = RankClassifierLoss(5, 0, tau=7)
    got = _gradients(compiled_loss, batches, torch.compile(compiled_loss, backend=backend, fullgraph=True))
    for step, (a, b) in enumerate(zip(got, expected)):
        assert torch.equal(a, b), f"step {step}"


def brute_ap_of_shifted(shifted, relevant):
    """1 - AP of one ranking of already shifted scores (Eq. 21, 22)."""
    precisions = []
    for s, r in zip(shifted, relevant):
        if r:
            rank = 1 + sum(t > s for t in shifted)
            rank_relevant = 1 + sum(t > s for t, q in zip(shifted, relevant) if q)
            precisions.append(rank_relevant / rank)
    return 1 - sum(precisions) / len(precisions)


def authors_shift(scores, relevant, margin, z):
    """The authors' mAP.py margin entry by entry: ``scores - margin * |z| * (target - 0.5)``, i.e. a
    relevant score down by margin |z| / 2, an irrelevant one up by margin |z| / 2."""
    out = torch.empty_like(scores)
    for i in range(scores.shape[0]):
        for k in range(scores.shape[1]):
            half = margin * abs(float(z[i, k])) / 2
            out[i, k] = float(scores[i, k]) - half if relevant[i, k] else float(scores[i, k]) + half
    return out


def test_the_authors_random_margin_is_margin_abs_normal_with_their_signs_drawn_per_call():
    """margin_mode=authors_random against blackbox_backprop/mAP.py@075bf56 re-done by hand: per call a
    [C, N + M] normal matrix for L_mAP over the batch and its memory (their transposed layout), then a
    [1, N C] one for L_AP-C over the flattened batch, from the loss's generator seeded by margin_seed."""
    margin, lam, c, num_classes = 0.4, 0.5, 1.0 / 3.0, 4
    loss = RankClassifierLoss(num_classes, margin=margin, lam=lam, tau=2, margin_mode="authors_random", margin_seed=5)
    seen = {}
    loss.map_memory.loss.loss.register_forward_pre_hook(
        lambda m, args: seen.__setitem__("map", args[0].detach().clone())
    )
    loss.apc_loss.loss.register_forward_pre_hook(lambda m, args: seen.__setitem__("apc", args[0].detach().clone()))
    reference = torch.Generator().manual_seed(5)
    generator = torch.Generator().manual_seed(2)
    batches = [
        (torch.randn(9, num_classes + 1, generator=generator), torch.tensor([0, 1, 2, 0, 4, 3, 1, 0, 2])),
        (torch.randn(9, num_classes + 1, generator=generator), torch.tensor([3, 0, 0, 1, 1, 2, 4, 0, 0])),
    ]
    remembered = []
    for logits, labels in batches:
        value = loss(logits, labels)
        scores, relevant = logits[:, 1:], brute_relevance(labels, num_classes, 0)
        all_scores = torch.cat([scores] + [s for s, _ in remembered])
        all_relevant = torch.cat([relevant] + [r for _, r in remembered])
        z_map = torch.randn(num_classes, all_scores.shape[0], generator=reference).T
        z_apc = torch.randn(1, scores.numel(), generator=reference).reshape(scores.shape)
        expected_map = authors_shift(all_scores, all_relevant, margin, z_map)
        expected_apc = authors_shift(scores, relevant, margin, z_apc)
        torch.testing.assert_close(seen["map"], expected_map)
        torch.testing.assert_close(seen["apc"], expected_apc)
        # the signs: relevant entries down, irrelevant up, by margin |z| / 2 (never the fixed margin / 2)
        moved = seen["map"] - all_scores
        assert (moved[all_relevant] <= 0).all() and (moved[~all_relevant] >= 0).all()
        torch.testing.assert_close(moved.abs(), margin * z_map.abs() / 2)
        columns = [k for k in range(num_classes) if all_relevant[:, k].any()]
        map_loss = sum(
            brute_ap_of_shifted(expected_map[:, k].tolist(), all_relevant[:, k].tolist()) for k in columns
        ) / len(columns)
        apc_loss = brute_ap_of_shifted(expected_apc.flatten().tolist(), relevant.flatten().tolist())
        assert float(value) == pytest.approx((1 - c) * map_loss + c * apc_loss, abs=1e-6)
        remembered.append((scores, relevant))  # the memory holds the unshifted scores, oldest first
    assert len(loss.map_memory) == 2


def test_the_authors_random_margin_is_reproducible_and_resumes_its_draws():
    generator = torch.Generator().manual_seed(4)
    batches = [
        (torch.randn(10, 6, generator=generator), torch.randint(0, 6, (10,), generator=generator)) for _ in range(3)
    ]

    def values(loss, which):
        return [float(loss(*batches[i])) for i in which]

    def build(seed):
        return RankClassifierLoss(5, margin=0.5, lam=0.5, tau=3, margin_mode="authors_random", margin_seed=seed)

    assert values(build(1), range(3)) == values(build(1), range(3))
    assert values(build(1), range(3)) != values(build(2), range(3))
    # no margin_seed: one draw of the global generator, so the run's seed decides the margins
    torch.manual_seed(9)
    first = RankClassifierLoss(5, margin=0.5, margin_mode="authors_random")
    torch.manual_seed(9)
    second = RankClassifierLoss(5, margin=0.5, margin_mode="authors_random")
    assert first.margin_noise.seed == second.margin_noise.seed and values(first, range(3)) == values(second, range(3))
    # the generator's state travels with the state dict: a resumed loss continues the same draws
    whole, part = build(3), build(3)
    expected = values(whole, range(3))
    values(part, range(2))
    resumed = build(99)
    resumed.load_state_dict(part.state_dict())
    assert values(resumed, [2]) == expected[2:]


def test_the_fixed_margin_mode_is_the_papers_and_unchanged():
    generator = torch.Generator().manual_seed(6)
    logits, labels = torch.rand(12, 5, generator=generator), torch.tensor([1, 0, 2, 3, 0, 4, 1, 0, 0, 2, 3, 0])
    default = RankClassifierLoss(4, margin=0.15, lam=0.5, tau=0)
    fixed = RankClassifierLoss(4, margin=0.15, lam=0.5, tau=0, margin_mode="fixed")
    assert default.margin_mode == "fixed" and not hasattr(fixed, "margin_noise")
    assert set(fixed.state_dict()) == set(default.state_dict()) and not any(
        "margin_noise" in k for k in fixed.state_dict()
    )
    expected = brute_map_and_apc(logits[:, 1:], brute_relevance(labels, 4, 0), 0.15)
    assert float(fixed(logits, labels)) == float(default(logits, labels)) == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError, match="margin_mode"):
        RankClassifierLoss(4, margin_mode="random")


def test_the_margin_mode_configs():
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    import rambo.detection

    conf = Path(rambo.detection.__file__).parent / "configs"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        rows = {
            name: compose(config_name="train", overrides=[f"experiment={name}"])
            for name in ("mini_rambo", "mini_rambo_authors_margin", "table5_r50_voc07_rambo", "table8_lam0p1_margin")
        }
    assert {name: cfg.loss.module.margin_mode for name, cfg in rows.items()} == {
        "mini_rambo": "fixed",
        "mini_rambo_authors_margin": "authors_random",
        "table5_r50_voc07_rambo": "fixed",
        "table8_lam0p1_margin": "fixed",
    }
    authors, mini = rows["mini_rambo_authors_margin"], rows["mini_rambo"]
    assert authors.experiment_name == "mini_rambo_authors_margin" and authors.init_checkpoint == mini.init_checkpoint
    differing = {k for k in mini.loss if mini.loss[k] != authors.loss[k]}
    assert differing == {"margin_mode", "module"} and (authors.schedule, authors.model, authors.data) == (
        mini.schedule,
        mini.model,
        mini.data,
    )
