"""torch.compile and mixed precision: the ranking is one custom operator (``rambo::blackbox_rank``,
its Alg. 1 backward registered with it), so a compiled graph has no break around it, and compiled
losses agree with eager ones in value and gradient, in float32, bfloat16 (autocast) and float16."""

import os

import pytest
import torch

from rambo.core import APCLoss, APLoss, EmbeddingMemory, MAPLoss, RecallLoss, pairwise_scores, rank

pytestmark = pytest.mark.filterwarnings("ignore")
# inductor's CPU code generation does not build under torch's portable kernels (torch 2.14 with
# ATEN_CPU_CAPABILITY=default: "at::vec has not been declared" in the generated C++); eager and
# aot_eager run there.
needs_inductor = pytest.mark.skipif(
    os.environ.get("ATEN_CPU_CAPABILITY") == "default",
    reason="inductor's C++ does not build with ATEN_CPU_CAPABILITY=default",
)
INDUCTOR = pytest.param("inductor", marks=needs_inductor)


def fresh_compile(fn, **kwargs):
    torch._dynamo.reset()
    return torch.compile(fn, **kwargs)


def value_and_grad(fn, *inputs):
    leaves = [x.detach().clone().requires_grad_(True) if x.is_floating_point() else x for x in inputs]
    value = fn(*leaves)
    value.backward()
    return value.detach(), leaves[0].grad


@needs_inductor
def test_rank_compiles_into_one_graph_with_its_backward():
    scores = torch.randn(4, 50, device="cpu").to(torch.get_default_device())
    weights = torch.randn(4, 50, device="cpu").to(scores.device)

    def weighted_ranks(s, w):
        return (rank(s, 0.5) * w).sum()

    explained = torch._dynamo.explain(weighted_ranks)(scores, weights)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = fresh_compile(weighted_ranks, fullgraph=True)
    got, expected = value_and_grad(compiled, scores, weights), value_and_grad(weighted_ranks, scores, weights)
    assert torch.allclose(got[0], expected[0]) and torch.equal(got[1], expected[1])
    assert torch.equal(fresh_compile(lambda s: rank(s, 0.5), fullgraph=True)(scores), rank(scores, 0.5))


def test_a_bad_score_is_refused_inside_the_compiled_graph():
    compiled = fresh_compile(lambda s: rank(s, 0.5), fullgraph=True)
    scores = torch.randn(2, 5)
    compiled(scores)
    scores[0, 1] = float("nan")
    with pytest.raises(Exception, match="NaN"):
        compiled(scores)


@needs_inductor
@pytest.mark.parametrize("make", [lambda: RecallLoss(0.05, 0.5), lambda: APLoss(0.05, 0.5)])
def test_compiled_and_eager_losses_agree(make):
    loss = make()
    embeddings = torch.nn.functional.normalize(torch.randn(32, 16), dim=1)
    labels = torch.arange(32) // 4

    def objective(e, l):
        return loss(*pairwise_scores(e, l))

    got = value_and_grad(fresh_compile(objective), embeddings, labels)
    expected = value_and_grad(objective, embeddings, labels)
    assert torch.allclose(got[0], expected[0], atol=1e-6)
    assert torch.allclose(got[1], expected[1], atol=1e-6) and expected[1].abs().sum() > 0


@needs_inductor
def test_autocast_bfloat16_scores_compiled_and_eager_agree():
    """Under autocast the scores come out of a matmul in bfloat16; the ranks of those scores are
    exact, the gradient returns in bfloat16, and compiling changes neither."""
    layer = torch.nn.Linear(16, 8)
    inputs = torch.randn(24, 16)
    labels = torch.arange(24) // 4
    loss = RecallLoss(0.05, 0.5)

    def objective(x, l):
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            scores, relevant = pairwise_scores(layer(x), l)
            assert scores.dtype == torch.bfloat16
            return loss(scores, relevant)

    expected = value_and_grad(objective, inputs, labels)
    got = value_and_grad(fresh_compile(objective), inputs, labels)
    assert torch.allclose(got[0].float(), expected[0].float(), atol=1e-2)
    assert got[1].dtype == expected[1].dtype == torch.float32  # the input's gradient
    assert torch.allclose(got[1], expected[1], atol=1e-2) and expected[1].abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_scores_rank_exactly_and_get_a_gradient_of_their_dtype(dtype):
    scores = torch.randn(3, 40).to(dtype)
    upstream = torch.randn(3, 40)
    half = value_and_grad(lambda s: (rank(s, 0.5) * upstream).sum(), scores)
    full = value_and_grad(lambda s: (rank(s, 0.5) * upstream).sum(), scores.float())
    assert torch.equal(rank(scores, 0.5), rank(scores.float(), 0.5))  # float32 ranks of the same values
    assert half[1].dtype == dtype and torch.equal(half[1], full[1].to(dtype))


def test_the_fallback_for_torch_without_custom_op_computes_the_same():
    """torch < 2.4 (the mmdetection environment) ranks through an autograd.Function instead."""
    from rambo.core import ranking

    scores = torch.randint(-5, 5, (3, 30), device="cpu").float().to(torch.get_default_device())
    upstream = torch.randn(3, 30, device="cpu").to(scores.device)
    leaf_op, leaf_fn = scores.clone().requires_grad_(True), scores.clone().requires_grad_(True)
    op_ranks, op_integers = ranking.rank_with_integers(leaf_op, 0.5)
    fn_ranks, fn_integers = ranking._BlackboxRank.apply(leaf_fn, 0.5 * 30, True)
    (op_ranks * upstream).sum().backward()
    (fn_ranks * upstream).sum().backward()
    assert torch.equal(op_ranks, fn_ranks) and torch.equal(op_integers, fn_integers)
    assert torch.equal(leaf_op.grad, leaf_fn.grad) and leaf_op.grad.abs().sum() > 0


def _tied_scores_with_both_zeros():
    scores = torch.randint(-3, 4, (8, 60), device="cpu").float() / 2
    scores[scores == 0] = -0.0
    scores[:, ::3] = scores[:, ::3].abs()  # +0.0 beside -0.0: the two zeros must tie
    relevant = torch.rand(8, 60, device="cpu") < 0.2
    relevant[2] = False  # a row without a relevant item
    return scores.to(torch.get_default_device()), relevant.to(torch.get_default_device())


ONE_GRAPH_LOSSES = {
    "recall": (lambda: RecallLoss(0.02, 4.0), False),
    "ap": (lambda: APLoss(0.05, 0.5), False),
    "map": (lambda: MAPLoss(0.15, 0.5), True),
    "apc": (lambda: APCLoss(0.15, 0.5), True),
}


@pytest.mark.parametrize("backend", ["eager", "aot_eager", INDUCTOR])
@pytest.mark.parametrize("name", sorted(ONE_GRAPH_LOSSES))
def test_each_loss_is_one_graph_and_its_compiled_gradient_is_eagers_bit_for_bit(name, backend):
    """Fullgraph compiles of forward and backward (the dense path) give the eager (sparse)
    path's gradient bits, ties and -0.0 included, under every backend."""
    make, items_by_classes = ONE_GRAPH_LOSSES[name]
    scores, relevant = _tied_scores_with_both_zeros()
    if items_by_classes:  # [N, C]: a class without a positive, background items
        scores, relevant = scores.T.contiguous(), relevant.T.contiguous()
    loss = make()
    explained = torch._dynamo.explain(loss)(scores.clone().requires_grad_(True), relevant)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    expected = value_and_grad(loss, scores, relevant)
    got = value_and_grad(fresh_compile(loss, backend=backend, fullgraph=True), scores, relevant)
    assert torch.equal(got[1], expected[1]) and torch.equal(got[1].signbit(), expected[1].signbit())
    assert expected[1].abs().sum() > 0
    torch.testing.assert_close(got[0], expected[0], rtol=1e-6, atol=1e-7)  # the order of a sum


@pytest.mark.parametrize("backend", ["aot_eager", INDUCTOR])
def test_the_embedding_memory_compiles_as_one_graph_per_memory_size(backend):
    """The memory (rebuilt at every batch while compiling) is traced as a side effect; the loss on
    its scores is exact, the cosine scores are inductor's normalise and matmul (the last bit may
    differ from eager's)."""
    steps = [(torch.randn(16, 8, device="cpu"), torch.randint(0, 4, (16,), device="cpu")) for _ in range(5)]
    explained = torch._dynamo.explain(EmbeddingMemory(RecallLoss(0.02, 4.0), 3))(
        steps[0][0].requires_grad_(True), steps[0][1]
    )
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    eager, compiled = EmbeddingMemory(RecallLoss(0.02, 4.0), 3), EmbeddingMemory(RecallLoss(0.02, 4.0), 3)
    run = fresh_compile(compiled, backend=backend, fullgraph=True)
    for embeddings, labels in steps:
        expected = value_and_grad(eager, embeddings, labels)[1]
        got = value_and_grad(run, embeddings, labels)[1]
        if backend == "aot_eager":
            assert torch.equal(got, expected)
        else:
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-7)
    assert len(compiled.remembered()) == 3
