"""Recall@k surrogate, SiMix, FastAP and Smooth-AP against loops over their definitions."""

import core_brute_force as bf
import pytest
import torch

from rambo.core import FastAPLoss, RecallAtKSurrogate, SiMix, SmoothAPLoss, pairwise_scores
from rambo.core.sigmoid_rank import sigmoid_ranks_of_relevant

DTYPES = [torch.float32, torch.float64]


def cosine_like(shape, dtype, ties=False):
    if ties:
        return torch.randint(-4, 5, shape).to(dtype) / 5
    return torch.rand(shape, dtype=dtype) * 2 - 1


def with_relevant(shape, fraction=0.3):
    relevant = torch.rand(shape) < fraction
    relevant[0, 0] = True
    return relevant


CASES = {
    "recall@k": (lambda: RecallAtKSurrogate(), bf.recall_at_k_surrogate_row, {}),
    "recall@k small tau": (
        lambda: RecallAtKSurrogate(ks=(1, 3), tau1=0.1, tau2=0.5),
        bf.recall_at_k_surrogate_row,
        {"ks": (1, 3), "tau1": 0.1, "tau2": 0.5},
    ),
    "recall@k tau2 per k": (
        lambda: RecallAtKSurrogate(ks=(1, 2, 4), tau2=(1, 2, 4)),
        bf.recall_at_k_surrogate_row,
        {"ks": (1, 2, 4), "tau2": (1, 2, 4)},
    ),
    "smooth-ap": (lambda: SmoothAPLoss(0.05), bf.smooth_ap_row, {"tau": 0.05}),
    "fast-ap": (lambda: FastAPLoss(10), bf.fast_ap_row, {}),
    "fast-ap 4 bins": (lambda: FastAPLoss(4, (-2.0, 1.0)), bf.fast_ap_row, {"bins": 4, "lo": -2.0, "hi": 1.0}),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 5), (3, 12), (8, 3)])
@pytest.mark.parametrize("ties", [False, True])
def test_surrogate_value_matches_brute_force(name, dtype, shape, ties):
    make, brute, kwargs = CASES[name]
    scores, relevant = cosine_like(shape, dtype, ties), with_relevant(shape)
    expected = bf.mean_over_rows(brute, scores.tolist(), relevant.tolist(), **kwargs)
    value = make()(scores, relevant)
    assert value.dtype == dtype
    tolerance = 1e-4 if dtype == torch.float32 else 1e-9
    assert value.item() == pytest.approx(expected, rel=tolerance, abs=tolerance)


@pytest.mark.parametrize("name", list(CASES))
def test_valid_mask_removes_items_from_the_ranking(name):
    make, brute, kwargs = CASES[name]
    scores, relevant = cosine_like((4, 9), torch.float64), with_relevant((4, 9), 0.4)
    valid = torch.rand(4, 9) < 0.7
    valid[0, 0] = True
    rows = [
        brute(s, r, valid=v, **kwargs)
        for s, r, v in zip(scores.tolist(), relevant.tolist(), valid.tolist())
        if any(a and b for a, b in zip(r, v))
    ]
    assert make()(scores, relevant, valid).item() == pytest.approx(sum(rows) / len(rows), rel=1e-9)


@pytest.mark.parametrize("name", list(CASES))
def test_surrogate_gradients_flow_and_match_finite_differences(name):
    make, _, _ = CASES[name]
    scores = cosine_like((3, 6), torch.float64).requires_grad_(True)
    relevant = with_relevant((3, 6), 0.4)
    loss = make()
    torch.autograd.gradcheck(lambda s: loss(s, relevant), (scores,), eps=1e-7, atol=1e-5)


def test_sigmoid_ranks_chunking_gives_the_same_values_and_gradients():
    scores = cosine_like((9, 11), torch.float64).requires_grad_(True)
    relevant = with_relevant((9, 11), 0.3)
    whole = sigmoid_ranks_of_relevant(scores, relevant, 0.05)
    chunked = sigmoid_ranks_of_relevant(scores, relevant, 0.05, chunk_elements=1)
    for a, b in zip(whole, chunked):
        assert torch.equal(a, b)
    (grad_whole,) = torch.autograd.grad(whole[0].sum() + whole[1].sum(), scores)
    (grad_chunked,) = torch.autograd.grad(chunked[0].sum() + chunked[1].sum(), scores)
    assert torch.allclose(grad_whole, grad_chunked)


def test_one_long_row_is_computed_in_blocks_of_bounded_size(monkeypatch):
    """A single row whose [P, N] differences exceed the budget is split over its relevant items
    (one row of 1e6 items with 1 % relevant once asked for a 40 GB block)."""
    from rambo.core import sigmoid_rank

    blocks, original = [], sigmoid_rank._chunk_ranks

    def spy(scores, relevant_index, *rest):
        blocks.append(scores.shape[0] * relevant_index.shape[1] * scores.shape[1])
        return original(scores, relevant_index, *rest)

    monkeypatch.setattr(sigmoid_rank, "_chunk_ranks", spy)
    generator = torch.Generator(torch.get_default_device()).manual_seed(0)
    scores = torch.rand(1, 5000, generator=generator, dtype=torch.float64)
    relevant = torch.rand(1, 5000, generator=generator) < 0.05
    chunked = sigmoid_ranks_of_relevant(scores, relevant, 0.05, chunk_elements=20_000)
    assert len(blocks) > 1 and max(blocks) <= 20_000
    monkeypatch.setattr(sigmoid_rank, "_chunk_ranks", original)
    whole = sigmoid_ranks_of_relevant(scores, relevant, 0.05, chunk_elements=10**9)
    for a, b in zip(whole, chunked):
        assert torch.allclose(a.double(), b.double())
    with pytest.raises(ValueError, match="chunk_elements"):
        sigmoid_ranks_of_relevant(scores, relevant, 0.05, chunk_elements=0)


def saved_elements(loss, n):
    """Elements autograd keeps for the backward pass of loss on an n x n score matrix."""
    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel()
        return tensor

    scores = torch.rand(n, n, requires_grad=True)
    relevant = torch.rand(n, n) < 0.5
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss(scores, relevant)
    return total


@pytest.mark.parametrize("loss", [SmoothAPLoss(), RecallAtKSurrogate()])
def test_sigmoid_rank_losses_keep_o_n2_memory_not_o_n3(loss):
    """Regression: the reference Smooth-AP materialises [n, n, n] differences for backward."""
    n = 96
    saved = saved_elements(loss, n)
    assert saved < 40 * n * n  # O(n^2); [n, n/2, n] differences alone would be n^3 / 2 = 48 n^2


def test_recall_at_k_surrogate_never_counts_the_query_as_its_own_positive():
    """Regression: with pairwise_scores the query is not in its row, so a singleton class adds nothing."""
    embeddings = torch.randn(6, 4)
    labels = torch.tensor([0, 0, 1, 1, 2, 3])  # classes 2 and 3 are singletons
    loss = RecallAtKSurrogate()
    scores, relevant = pairwise_scores(embeddings, labels)
    rows = [bf.recall_at_k_surrogate_row(s, r) for s, r in zip(scores.tolist(), relevant.tolist()) if any(r)]
    assert len(rows) == 4
    assert loss(scores, relevant).item() == pytest.approx(sum(rows) / 4, rel=1e-5)


def test_simix_mixes_similarities_and_excludes_shared_sources():
    torch.manual_seed(0)
    embeddings = torch.randn(6, 5, dtype=torch.float64)
    labels = torch.tensor([0, 0, 0, 1, 1, 2])
    simix = SiMix(RecallAtKSurrogate(), mixes=4, generator=torch.Generator(torch.get_default_device()).manual_seed(1))
    scores, relevant, valid = simix.mixed_batch(embeddings, labels)
    assert scores.shape == (10, 10)
    # Recover each mix's sources and weight from the same generator draws.
    g = torch.Generator(torch.get_default_device()).manual_seed(1)
    pairs = (labels.unsqueeze(1) == labels.unsqueeze(0)).triu(1).nonzero()
    chosen = pairs[torch.randint(len(pairs), (4,), generator=g)]
    weights = torch.rand(4, 1, generator=g, dtype=torch.float64)
    s = torch.nn.functional.normalize(embeddings, dim=1) @ torch.nn.functional.normalize(embeddings, dim=1).T
    for m in range(4):
        a, b = chosen[m].tolist()
        w = weights[m].item()
        for c in range(6):
            assert scores[6 + m, c].item() == pytest.approx(w * s[a, c].item() + (1 - w) * s[b, c].item())
            assert valid[6 + m, c].item() == (c not in (a, b))
            assert relevant[6 + m, c].item() == bool(labels[c] == labels[a])
    assert not valid.diagonal().any()  # nothing ranks itself
    value = simix(embeddings.requires_grad_(True), labels)
    value.backward()
    assert embeddings.grad.abs().sum() > 0


def test_simix_in_eval_mode_adds_no_mixes():
    simix = SiMix(RecallAtKSurrogate()).eval()
    scores, _, valid = simix.mixed_batch(torch.randn(6, 3), torch.tensor([0, 0, 1, 1, 2, 2]))
    assert scores.shape == (6, 6) and not valid.diagonal().any()


# ---------------------------------------------------------------- Recall@k numerator clip (official code)

PAPER_KS = (1, 2, 4, 8, 16)  # with tau2 = k, the official --k_temperatures default


def top_heavy_rows(positives_per_row, negatives):
    """One row per entry of ``positives_per_row``: that many relevant items scoring above the
    negatives, every score 0.03 from the next (10 x tau1 = 0.01), in a random column order. The
    relaxed ranks of the positives are then about 1, 2, ..., |P|: when |P| > k the relaxed count
    of positives within the top k, sum_i sigmoid((k - r~(i)) / tau2), can exceed k."""
    n = max(positives_per_row) + negatives
    generator = torch.Generator().manual_seed(3)
    scores = torch.empty(len(positives_per_row), n, dtype=torch.float64)
    relevant = torch.zeros(len(positives_per_row), n, dtype=torch.bool)
    for row, positives in enumerate(positives_per_row):
        order = torch.randperm(n, generator=generator)
        scores[row, order] = 0.95 - 0.03 * torch.arange(n, dtype=torch.float64)
        relevant[row, order[:positives]] = True
    return scores.to(torch.get_default_device()), relevant.to(torch.get_default_device())


def clip_is_active(scores, relevant, ks, tau2):
    return any(
        numerator > k
        for s, r in zip(scores.tolist(), relevant.tolist())
        for numerator, k in zip(bf.recall_at_k_numerators(s, r, ks, tau2=tau2), ks)
    )


@pytest.mark.parametrize(
    "positives_per_row, active",
    [((40, 30, 25), True), ((3, 4, 2), False)],  # |P| > k, some top-k sums above k; a few positives
    ids=["clip active", "clip inactive"],
)
def test_recall_at_k_numerator_clip_matches_brute_force(positives_per_row, active):
    scores, relevant = top_heavy_rows(positives_per_row, negatives=20)
    assert clip_is_active(scores, relevant, PAPER_KS, PAPER_KS) == active
    values = {}
    for clip in (True, False):
        expected = bf.mean_over_rows(
            bf.recall_at_k_surrogate_row,
            scores.tolist(),
            relevant.tolist(),
            ks=PAPER_KS,
            tau2=PAPER_KS,
            clip_numerator=clip,
        )
        values[clip] = RecallAtKSurrogate(PAPER_KS, 0.01, PAPER_KS, clip_numerator=clip)(scores, relevant).item()
        assert values[clip] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    if active:
        assert values[True] > values[False] + 1e-3  # the clip lowers the relaxed recall: a higher loss
    else:
        assert values[True] == values[False]


def test_a_clipped_recall_term_passes_no_gradient():
    scores, relevant = top_heavy_rows((40,), negatives=20)
    assert clip_is_active(scores, relevant, (16,), (16,))  # sum of top-16 sigmoids about 17.4 > 16
    assert not clip_is_active(scores, relevant, (1,), (1,))

    def gradient(loss):
        leaf = scores.clone().requires_grad_(True)
        loss(leaf, relevant).backward()
        return leaf.grad

    assert torch.equal(gradient(RecallAtKSurrogate((16,), tau2=16)), torch.zeros_like(scores))
    assert gradient(RecallAtKSurrogate((16,), tau2=16, clip_numerator=False)).abs().sum() > 0
    # With an unclipped k beside it, only that k's term moves the scores (the mean over 2 ks: half).
    both = gradient(RecallAtKSurrogate((1, 16), tau2=(1, 16)))
    assert both.abs().sum() > 0
    assert torch.allclose(both, 0.5 * gradient(RecallAtKSurrogate((1,), tau2=1)), rtol=1e-12, atol=1e-15)


# ---------------------------------------------------------------- SiMix: every same-class pair once (official)


def brute_force_simix_pairs(labels):
    """Loops over the classes and over each class's pairs of members, each pair once."""
    pairs = []
    for label in sorted(set(labels)):
        members = [i for i, other in enumerate(labels) if other == label]
        for x in range(len(members)):
            for y in range(x + 1, len(members)):
                pairs.append((members[x], members[y]))
    return pairs


def brute_force_simix_batch(embeddings, labels, pairs, weights):
    """The extended batch as lists: unit originals then ``w e_a + (1 - w) e_b`` per pair (not
    re-normalised), each with its class and its set of source items."""
    unit = [[v / sum(u * u for u in row) ** 0.5 for v in row] for row in embeddings]
    items = [(unit[i], labels[i], {i}) for i in range(len(unit))]
    for (a, b), w in zip(pairs, weights):
        items.append(([w * u + (1 - w) * v for u, v in zip(unit[a], unit[b])], labels[a], {a, b}))
    return items


def brute_force_simix_loss(items, **kwargs):
    rows = []
    for vector, label, sources in items:  # every item is a query: originals and mixes
        scores = [sum(u * v for u, v in zip(vector, other)) for other, _, _ in items]
        valid = [not (sources & other_sources) for _, _, other_sources in items]
        relevant = [other_label == label for _, other_label, _ in items]
        if any(r and v for r, v in zip(relevant, valid)):
            rows.append(bf.recall_at_k_surrogate_row(scores, relevant, valid=valid, **kwargs))
    return sum(rows) / len(rows)


def test_simix_default_mixes_every_same_class_pair_once():
    labels = [0, 1, 0, 2, 1, 0, 1, 3, 0, 1, 2]  # classes of 4, 4, 2 and 1, interleaved
    b = len(labels)
    embeddings = torch.randn(b, 5, dtype=torch.float64)
    seed = 7
    simix = SiMix(RecallAtKSurrogate(), generator=torch.Generator(torch.get_default_device()).manual_seed(seed))
    assert simix.mixes is None
    scores, relevant, valid = simix.mixed_batch(embeddings, torch.tensor(labels))

    pairs = brute_force_simix_pairs(labels)
    assert len(pairs) == 6 + 6 + 1 + 0  # C(4, 2) per class of 4, C(2, 2), none for a singleton
    assert scores.shape == (b + len(pairs), b + len(pairs))
    # Each mixed item's sources are the originals it may not rank: the set of mixed pairs, each once.
    mixed_sources = [tuple(c for c in range(b) if not valid[b + m, c]) for m in range(len(pairs))]
    assert sorted(mixed_sources) == sorted(pairs) and len(set(mixed_sources)) == len(pairs)
    # One weight per pair in [0, 1), the generator's draws, pairs in (a, b) order.
    weights = torch.rand(
        len(pairs), generator=torch.Generator(torch.get_default_device()).manual_seed(seed), dtype=torch.float64
    ).tolist()
    assert all(0 <= w < 1 for w in weights) and len(set(weights)) == len(weights)
    items = brute_force_simix_batch(embeddings.tolist(), labels, sorted(pairs), weights)
    assert mixed_sources == sorted(pairs)
    expected_scores = [[sum(u * v for u, v in zip(x, y)) for y, _, _ in items] for x, _, _ in items]
    assert torch.allclose(scores.cpu(), torch.tensor(expected_scores, dtype=torch.float64), rtol=0, atol=1e-12)
    assert relevant.tolist() == [[x == y for _, y, _ in items] for _, x, _ in items]
    assert valid.tolist() == [[not (x & y) for _, _, y in items] for _, _, x in items]

    simix = SiMix(RecallAtKSurrogate(), generator=torch.Generator(torch.get_default_device()).manual_seed(seed))
    leaf = embeddings.clone().requires_grad_(True)
    value = simix(leaf, torch.tensor(labels))
    assert value.item() == pytest.approx(brute_force_simix_loss(items), rel=1e-9)
    value.backward()
    assert leaf.grad.abs().sum() > 0


def test_simix_with_a_count_draws_that_many_random_pairs_and_zero_none():
    labels = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    scores, _, valid = SiMix(RecallAtKSurrogate(), mixes=20).mixed_batch(torch.randn(8, 3), labels)
    assert scores.shape == (28, 28)
    assert all((~valid[8 + m, :8]).sum() == 2 for m in range(20))  # each a pair of two originals
    scores, _, _ = SiMix(RecallAtKSurrogate(), mixes=0).mixed_batch(torch.randn(8, 3), labels)
    assert scores.shape == (8, 8)


def test_simix_every_pair_at_batch_4000():
    """The paper's batch: 1000 classes of 4 -> 6000 mixed items of dim 512, built without loops over pairs."""
    labels = torch.arange(1000).repeat_interleave(4)
    embeddings = torch.randn(4000, 512)
    scores, relevant, valid = SiMix(RecallAtKSurrogate()).mixed_batch(embeddings, labels)
    assert scores.shape == relevant.shape == valid.shape == (10_000, 10_000)
    assert int(relevant[:4000, 4000:].sum()) == 4000 * 6  # each original: its class's 6 mixes
    assert int((~valid[4000:, :4000]).sum()) == 6000 * 2  # each mix: its 2 sources


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: RecallAtKSurrogate(ks=(0, 1)), "ks"),
        (lambda: RecallAtKSurrogate(tau1=0), "temperature"),
        (lambda: RecallAtKSurrogate(ks=(1, 2), tau2=(1, 2, 4)), "one temperature per k"),
        (lambda: RecallAtKSurrogate(ks=(1, 2), tau2=(1, 0)), "temperature"),
        (lambda: RecallAtKSurrogate(clip_numerator=1), "clip_numerator"),
        (lambda: SmoothAPLoss(tau=-1), "tau"),
        (lambda: FastAPLoss(bins=0), "bins"),
        (lambda: FastAPLoss(score_range=(1, -1)), "score_range"),
    ],
)
def test_bad_hyper_parameters_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_bad_valid_mask_is_named():
    with pytest.raises(ValueError, match="valid"):
        SmoothAPLoss()(torch.rand(2, 3), torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 3))


def test_default_blocks_of_one_long_row_stay_above_the_heap_threshold(monkeypatch):
    """With the default chunk a blocked row's [p, N] blocks hold >= 2**23 elements (32 MiB float32):
    glibc mmaps them and returns them when freed (see DEFAULT_CHUNK_ELEMENTS), and <= the cap."""
    from rambo.core import sigmoid_rank

    blocks, original = [], sigmoid_rank._chunk_ranks

    def spy(scores, relevant_index, *rest):
        blocks.append(scores.shape[0] * relevant_index.shape[1] * scores.shape[1])
        return original(scores, relevant_index, *rest)

    monkeypatch.setattr(sigmoid_rank, "_chunk_ranks", spy)
    n = 300_000
    scores = torch.rand(1, n, device="cpu").to(torch.get_default_device())
    relevant = torch.zeros(1, n, dtype=torch.bool)
    relevant[0, ::1000] = True  # 300 relevant: 9e7 differences, more than one block
    with torch.no_grad():
        sigmoid_ranks_of_relevant(scores, relevant, 0.01)
    assert len(blocks) > 1 and max(blocks) <= sigmoid_rank.DEFAULT_CHUNK_ELEMENTS
    assert min(blocks[:-1]) >= 2**23  # all but the last slice of items
