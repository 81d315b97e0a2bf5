import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rambo.core import metrics as core_metrics
from rambo.core.pairwise import off_diagonal
from rambo.retrieval.evaluate import map_at_r, mean_pairwise_cosine, r_precision, recall_at_k, retrieval_metrics

torch.set_num_threads(1)
KS = (1, 2, 4, 8, 16)


def _random_set(n=120, dim=8, classes=20, seed=0, duplicates=10):
    g = torch.Generator().manual_seed(seed)
    embeddings = torch.randn(n, dim, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    # exact duplicates of earlier items with the same label: the query's twin must count as a hit
    for i in range(duplicates):
        embeddings[n - 1 - i] = embeddings[i]
        labels[n - 1 - i] = labels[i]
    return embeddings, labels


def _brute_force_same_set(embeddings, labels):
    unit = F.normalize(embeddings.double(), dim=1)
    scores = off_diagonal(unit @ unit.T)  # the query itself is removed from its row
    relevant = off_diagonal(labels[:, None] == labels[None, :])
    return scores, relevant


def test_recall_at_k_matches_core_metrics_with_duplicates():
    embeddings, labels = _random_set()
    scores, relevant = _brute_force_same_set(embeddings, labels)
    expected = core_metrics.recall_at_k(scores, relevant, KS)
    got = recall_at_k(embeddings, labels, KS)
    assert got.keys() == expected.keys()
    for k in KS:
        assert got[k] == pytest.approx(expected[k])


def test_map_at_r_and_r_precision_match_core_metrics():
    embeddings, labels = _random_set(seed=1)
    scores, relevant = _brute_force_same_set(embeddings, labels)
    assert map_at_r(embeddings, labels) == pytest.approx(core_metrics.map_at_r(scores, relevant))
    assert r_precision(embeddings, labels) == pytest.approx(core_metrics.r_precision(scores, relevant))


def test_recall_against_a_plain_loop():
    embeddings, labels = _random_set(n=40, classes=6, seed=2, duplicates=4)
    unit = F.normalize(embeddings.double(), dim=1)
    found = {k: [] for k in KS}
    for q in range(len(labels)):
        others = [i for i in range(len(labels)) if i != q]
        if not any(labels[i] == labels[q] for i in others):
            continue
        ranked = sorted(others, key=lambda i: -float(unit[q] @ unit[i]))
        for k in KS:
            found[k].append(any(labels[i] == labels[q] for i in ranked[:k]))
    got = recall_at_k(embeddings, labels, KS)
    for k in KS:
        assert got[k] == pytest.approx(np.mean(found[k]))


def test_query_is_masked_not_first_column_dropped():
    # item 0 and item 1 are identical but of different classes; items 2, 3 share class 0 with 0.
    embeddings = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0]])
    labels = torch.tensor([0, 1, 0, 0, 1])
    got = recall_at_k(embeddings, labels, (1,))
    # nearest other item: 0 -> 1 (miss), 1 -> 0 (miss), 2 -> 0 or 3 (hit), 3 -> 2 (hit), 4 -> 3 (miss)
    assert got[1] == pytest.approx(2 / 5)
    scores, relevant = _brute_force_same_set(embeddings, labels)
    assert got[1] == pytest.approx(core_metrics.recall_at_k(scores, relevant, (1,))[1])


def test_query_vs_gallery_matches_core_metrics():
    gallery, gallery_labels = _random_set(n=80, classes=15, seed=3)
    g = torch.Generator().manual_seed(4)
    queries = torch.randn(30, 8, generator=g)
    query_labels = torch.randint(0, 15, (30,), generator=g)
    queries[:5] = gallery[:5]  # a query equal to a gallery item is a legitimate neighbour
    scores = F.normalize(queries.double(), dim=1) @ F.normalize(gallery.double(), dim=1).T
    relevant = query_labels[:, None] == gallery_labels[None, :]
    got = retrieval_metrics(gallery, gallery_labels, KS, queries, query_labels)
    expected = core_metrics.recall_at_k(scores, relevant, KS)
    for k in KS:
        assert got[f"R@{k}"] == pytest.approx(expected[k])
    assert got["MAP@R"] == pytest.approx(core_metrics.map_at_r(scores, relevant))
    assert got["R-precision"] == pytest.approx(core_metrics.r_precision(scores, relevant))


def test_bad_input_raises_value_error():
    embeddings, labels = _random_set(n=10, duplicates=0)
    with pytest.raises(ValueError, match="labels"):
        recall_at_k(embeddings, labels[:5], (1,))
    with pytest.raises(ValueError, match="K must be"):
        recall_at_k(embeddings, labels, (0,))
    with pytest.raises(ValueError, match="query_labels"):
        recall_at_k(embeddings, labels, (1,), query_embeddings=embeddings)
    bad = embeddings.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        recall_at_k(bad, labels, (1,))


@pytest.mark.parametrize("level, shown", [("INFO", False), ("DEBUG", True)])
def test_faiss_loader_lines_are_debug_not_info(level, shown):
    """faiss logs every CPU-specific library it cannot load at INFO ("Could not load library with
    AVX512 support ..."): six lines in every train.log that read like an error."""
    import subprocess
    import sys

    code = (
        f"import logging; logging.basicConfig(level=logging.{level}); "
        "from rambo.retrieval.evaluate import import_faiss; import_faiss()"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert ("faiss.loader" in result.stderr) is shown, result.stderr


def test_mean_pairwise_cosine_against_every_pair():
    """The spread of the embeddings (the collapse warning): the mean of u_i . u_j over i != j."""
    rng = np.random.default_rng(3)
    for embeddings in (rng.normal(size=(7, 5)), rng.normal(size=(40, 3)) + 4.0, rng.normal(size=(2, 9))):
        unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
        n = len(unit)
        brute = sum(float(unit[i] @ unit[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
        assert mean_pairwise_cosine(embeddings.astype(np.float32)) == pytest.approx(brute, abs=1e-6)
    assert mean_pairwise_cosine(np.ones((5, 3))) == pytest.approx(1.0)
    assert mean_pairwise_cosine(np.array([[1.0, 0.0], [-1.0, 0.0]])) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="at least 2 embeddings"):
        mean_pairwise_cosine(np.ones((1, 3)))


def test_mean_pairwise_cosine_is_the_same_float_in_any_row_order_and_memory_layout():
    """Its sums are correctly rounded, so the value depends on the embeddings alone: the same bits for
    the rows in another order, in column-major memory or at another offset (what a vectorised sum or
    a BLAS dot does not promise, and a rerun's metrics.json must be byte-identical)."""
    rng = np.random.default_rng(5)
    embeddings = (rng.normal(size=(3001, 67)) + 0.3).astype(np.float32)
    value = mean_pairwise_cosine(embeddings)
    for order in (rng.permutation(len(embeddings)) for _ in range(3)):
        assert mean_pairwise_cosine(embeddings[order]) == value
    assert mean_pairwise_cosine(np.asfortranarray(embeddings)) == value
    shifted = np.empty(embeddings.size + 1, dtype=np.float32)[1:].reshape(embeddings.shape)
    shifted[...] = embeddings
    assert mean_pairwise_cosine(shifted) == value
    assert mean_pairwise_cosine(torch.from_numpy(embeddings)) == value
    with pytest.raises(ValueError, match=r"embeddings \[n, D\]"):
        mean_pairwise_cosine(np.ones(4))


def test_the_torch_search_finds_faiss_neighbours_and_metrics():
    """The exact top-k in torch (chosen for a GPU that faiss does not see) against faiss."""
    from rambo.retrieval.evaluate import neighbour_relevance, search_backend

    rng = np.random.default_rng(5)
    embeddings = rng.normal(size=(600, 16)).astype(np.float32)
    labels = rng.integers(0, 40, size=600)
    queries, query_labels = rng.normal(size=(90, 16)).astype(np.float32), rng.integers(0, 40, size=90)
    for extra in ({}, {"query_embeddings": queries, "query_labels": query_labels}):
        faiss_hits = neighbour_relevance(embeddings, labels, 25, backend="faiss", **extra)
        torch_hits = neighbour_relevance(embeddings, labels, 25, backend="torch", device="cpu", **extra)
        np.testing.assert_array_equal(torch_hits[0], faiss_hits[0])
        np.testing.assert_array_equal(torch_hits[1], faiss_hits[1])
        assert retrieval_metrics(embeddings, labels, (1, 4), backend="torch", **extra) == retrieval_metrics(
            embeddings, labels, (1, 4), backend="faiss", **extra
        )
    assert search_backend() == search_backend("cpu") == "faiss"  # the CPU: faiss's index
    assert search_backend("cuda", "torch") == "torch"
    with pytest.raises(ValueError, match="search backend must be one of"):
        search_backend("cpu", "annoy")
