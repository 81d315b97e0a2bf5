"""The embedding-level entry point, ``EmbeddingLoss(loss)(embeddings, labels)``, against the
score-level losses it wraps, and over several processes against one process."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from rambo.core import (
    APCLoss,
    APLoss,
    EmbeddingLoss,
    EmbeddingMemory,
    FastAPLoss,
    MAPLoss,
    RecallAtKSurrogate,
    RecallLoss,
    SmoothAPLoss,
    pairwise_scores,
)

WORKER = Path(__file__).with_name("embedding_loss_worker.py")
SCORE_LOSSES = [
    RecallLoss(margin=0.05, lam=4.0),
    RecallLoss(margin=0.05, lam=4.0, weighting="loglog"),
    APLoss(margin=0.05, lam=0.5),
    RecallAtKSurrogate(),
    FastAPLoss(),
    SmoothAPLoss(),
]


def batch(b=12, d=5, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, d, generator=g, dtype=torch.float64), torch.arange(b) % classes


def brute_force_scores(embeddings, labels, ref_embeddings=None, ref_labels=None, memory=()):
    """Row q: the cosine score of query q with every other batch element (in batch order, q left out,
    paper Sec. 5.1), then with each remembered element (oldest batch first); or with every reference."""
    unit = [e / e.norm() for e in embeddings]
    rows, relevant = [], []
    for q in range(len(unit)):
        if ref_embeddings is not None:
            items = [(r / r.norm(), ref_labels[j]) for j, r in enumerate(ref_embeddings)]
        else:
            items = [(unit[j], labels[j]) for j in range(len(unit)) if j != q]
            items += [(m / m.norm(), ml) for m, ml in memory]
        rows.append(torch.stack([unit[q] @ item for item, _ in items]))
        relevant.append(torch.tensor([bool(labels[q] == label) for _, label in items]))
    return torch.stack(rows), torch.stack(relevant)


@pytest.mark.parametrize("loss", SCORE_LOSSES, ids=lambda loss: type(loss).__name__)
def test_the_batch_against_itself_is_the_score_level_loss_on_every_other_element(loss):
    embeddings, labels = batch()
    expected = loss(*brute_force_scores(embeddings, labels))
    assert EmbeddingLoss(loss)(embeddings, labels) == pytest.approx(float(expected), rel=1e-12)


@pytest.mark.parametrize("loss", SCORE_LOSSES, ids=lambda loss: type(loss).__name__)
def test_a_reference_set_is_ranked_whole_by_every_query(loss):
    embeddings, labels = batch()
    ref_embeddings, ref_labels = batch(b=9, seed=1)
    expected = loss(*brute_force_scores(embeddings, labels, ref_embeddings, ref_labels))
    got = EmbeddingLoss(loss)(embeddings, labels, ref_embeddings, ref_labels)
    assert got == pytest.approx(float(expected), rel=1e-12)


def test_the_memory_extends_each_querys_ranking_by_the_remembered_batches():
    loss = EmbeddingLoss(RecallLoss(margin=0.05, lam=4.0), tau=2)
    batches = [batch(seed=s) for s in range(4)]
    for step, (embeddings, labels) in enumerate(batches):
        remembered = [(e, lab) for past in batches[max(0, step - 2) : step] for e, lab in zip(*past)]
        expected = RecallLoss(margin=0.05, lam=4.0)(*brute_force_scores(embeddings, labels, memory=remembered))
        assert loss(embeddings, labels) == pytest.approx(float(expected), rel=1e-12)
    assert len(loss) == 2


def test_gradients_reach_the_current_batch_and_both_sets_never_the_memory():
    loss = EmbeddingLoss(APLoss(margin=0.05, lam=0.5), tau=1)
    first, labels = batch()
    loss(first, labels)
    embeddings = first.clone().requires_grad_(True)
    loss(embeddings, labels).backward()
    assert embeddings.grad.abs().sum() > 0 and not loss.held()[0].requires_grad

    queries, refs = batch()[0].requires_grad_(True), batch(b=9, seed=1)[0].requires_grad_(True)
    EmbeddingLoss(APLoss(margin=0.05, lam=0.5))(queries, labels, refs, torch.arange(9) % 4).backward()
    assert queries.grad.abs().sum() > 0 and refs.grad.abs().sum() > 0


def test_embedding_memory_is_the_embedding_loss_with_a_memory():
    old, new = EmbeddingMemory(RecallLoss(), tau=3), EmbeddingLoss(RecallLoss(), tau=3)
    for seed in range(5):
        embeddings, labels = batch(seed=seed)
        assert old(embeddings, labels) == new(embeddings, labels)
    assert torch.equal(old.held()[0], new.held()[0])


@pytest.mark.parametrize("loss", [*SCORE_LOSSES, MAPLoss(), APCLoss()], ids=lambda loss: type(loss).__name__)
def test_embeddings_given_to_a_score_level_loss_name_the_entry_point(loss):
    embeddings, labels = batch(b=20, d=8)
    wrapped = "APLoss" if isinstance(loss, (MAPLoss, APCLoss)) else type(loss).__name__
    with pytest.raises(ValueError) as error:
        loss(embeddings.float(), labels)
    message = str(error.value)
    assert "\n" not in message
    assert message.endswith(f"call rambo.core.EmbeddingLoss({wrapped}(...))(embeddings, labels)")
    assert message.startswith(f"{type(loss).__name__} takes scores [")


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: EmbeddingLoss(MAPLoss()), "MAPLoss ranks the items of each class of an [N, C] score matrix"),
        (lambda: EmbeddingLoss(EmbeddingLoss(RecallLoss())), "EmbeddingLoss wraps a loss called on scores"),
        (lambda: EmbeddingLoss(RecallLoss(), tau=-1), "tau must be an integer >= 0"),
        (lambda: EmbeddingLoss(RecallLoss(), global_batch="yes"), "global_batch must be True or False"),
        (lambda: EmbeddingLoss(RecallLoss(), tau=1)(*batch(), *batch(b=9)), "a reference set and a score memory"),
        (
            lambda: EmbeddingLoss(RecallLoss())(*batch(), ref_embeddings=batch()[0]),
            "pass ref_embeddings and ref_labels",
        ),
        (lambda: EmbeddingLoss(RecallLoss())(batch()[0], batch()[1].double()), "labels must be a 1-D integer tensor"),
        (
            lambda: EmbeddingLoss(RecallLoss())(*batch(), batch(d=3)[0], batch()[1]),
            "embeddings have size 5, ref_embeddings 3: both sets need the same embedding size",
        ),
    ],
)
def test_a_wrong_embedding_level_call_is_one_named_error(call, message):
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace("(", r"\(")) as error:
        call()
    assert "\n" not in str(error.value)


def _worker_module():
    spec = importlib.util.spec_from_file_location("embedding_loss_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_processes_with_uneven_shares_compute_the_one_process_loss_gradients_and_memory(tmp_path):
    """torchrun, 2 gloo processes holding 7 and 5 of each global batch of 12, float64, three steps with
    a score memory of 2 batches: every process's loss is the one-process loss, DDP's parameter gradients
    are the one-process gradients, the gradient reaching each share is the one-process gradient of its
    rows times the world size (which DDP's average divides out), and every process's memory holds the
    one-process memory. With global_batch=False each process computes the loss of its own share."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    done = subprocess.run([*command, str(WORKER), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    worker = _worker_module()
    results = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    starts = [0, worker.SHARES[0]]
    for name, loss in worker.make_losses().items():
        expected = worker.run(worker.make_model(), loss)
        for rank, result in enumerate(results):
            got = result["global"][name]
            rows = slice(starts[rank], starts[rank] + worker.SHARES[rank])
            for step, (g, e) in enumerate(zip(got["steps"], expected["steps"])):
                where = f"{name}, rank {rank}, step {step}"
                torch.testing.assert_close(g["loss"], e["loss"], rtol=1e-12, atol=0, msg=where)
                torch.testing.assert_close(g["embedding_grad"], 2 * e["embedding_grad"][rows], rtol=1e-10, atol=1e-14)
                for param, grad in e["parameter_grads"].items():
                    torch.testing.assert_close(g["parameter_grads"][param], grad, rtol=1e-10, atol=1e-14, msg=where)
            if expected["memory"] is None:
                assert got["memory"] is None
            else:
                torch.testing.assert_close(got["memory"][0], expected["memory"][0], rtol=1e-12, atol=0)
                assert torch.equal(got["memory"][1], expected["memory"][1])
    for name in worker.make_losses(global_batch=False):
        for rank, result in enumerate(results):
            rows = slice(starts[rank], starts[rank] + worker.SHARES[rank])
            expected = worker.run(worker.make_model(), worker.make_losses(global_batch=False)[name], rows)
            for g, e in zip(result["per_process"][name]["steps"], expected["steps"]):
                torch.testing.assert_close(g["loss"], e["loss"], rtol=1e-12, atol=0)
            # and that is another loss than the global batch's: the comparison above can tell them apart
            per_process = torch.stack([step["loss"] for step in result["per_process"][name]["steps"]])
            assert not torch.allclose(
                per_process, torch.stack([step["loss"] for step in result["global"][name]["steps"]])
            )


def test_without_a_process_group_the_global_batch_is_the_batch_itself():
    from rambo.core.distributed import global_batch, world_size

    embeddings, labels = batch()
    assert world_size() == 1
    assert global_batch(embeddings, labels) == (embeddings, labels)


def test_unit_embeddings_make_cosine_scores():
    embeddings, labels = batch()
    scores, _ = EmbeddingLoss(RecallLoss()).scores_and_relevance(embeddings * 7.0, labels)
    expected, _ = pairwise_scores(F.normalize(embeddings, dim=1), labels)
    torch.testing.assert_close(scores, expected)
