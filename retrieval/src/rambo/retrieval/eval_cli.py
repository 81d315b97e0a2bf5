"""`rambo-eval`: Recall@K, MAP@R and R-precision of embeddings you computed yourself.

Reads embeddings (`[n, dim]`, any real dtype) and integer class labels (`[n]`) from `.npy`
files (`numpy.save`) or `.pt` files (`torch.save` of one tensor or array) and scores them with
[`rambo.retrieval.evaluate.retrieval_metrics`][rambo.retrieval.evaluate.retrieval_metrics] (exact cosine k-NN
with faiss):

```bash
rambo-eval --embeddings emb.npy --labels labels.npy                 # same set: query i leaves itself out
rambo-eval --query-embeddings q.pt --query-labels ql.pt \\
           --gallery-embeddings g.pt --gallery-labels gl.pt --ks 1 10 20 --out metrics.json
```

`--ks` defaults to 1 10 100 1000; a K larger than the gallery a query searches (`n - 1` for
the same set, the gallery size otherwise) is dropped with a note on stderr, since its Recall@K
would repeat the largest K that fits. Metrics print one per line; `--out` writes them as JSON
(the same keys as `python -m rambo.retrieval.evaluate`). Bad input exits with status 2 and a
message naming the file and the problem; [`load_array`][rambo.retrieval.eval_cli.load_array],
[`load_embeddings`][rambo.retrieval.eval_cli.load_embeddings] and [`load_labels`][rambo.retrieval.eval_cli.load_labels]
raise [`EvalInputError`][rambo.retrieval.eval_cli.EvalInputError] (a `ValueError`) for use from Python.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from .evaluate import retrieval_metrics

DEFAULT_KS = (1, 10, 100, 1000)
EXTENSIONS = (".npy", ".pt", ".pth")


class EvalInputError(ValueError):
    """An input file that cannot be evaluated; the message names the file and the problem."""


def _numpy_array_globals() -> list:
    """What unpickling a plain numpy array needs, allowed on top of `weights_only`'s tensors."""
    import importlib

    allowed = [np.ndarray, np.dtype]
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):  # numpy 2 and 1 pickles
        try:
            allowed.append(importlib.import_module(module)._reconstruct)
        except (ImportError, AttributeError):
            pass
    dtypes = getattr(np, "dtypes", None)  # numpy >= 1.25: one class per dtype
    if dtypes is not None:
        allowed += [getattr(dtypes, name) for name in getattr(dtypes, "__all__", [])]
    return allowed


def load_array(path: str | Path) -> np.ndarray:
    """The array stored in a `.npy` file or the tensor/array stored in a `.pt`/`.pth` file."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in EXTENSIONS:
        raise EvalInputError(f"{path}: unknown extension {path.suffix!r}; use .npy (numpy.save) or .pt (torch.save)")
    if not path.is_file():
        raise EvalInputError(f"{path}: no such file")
    if suffix == ".npy":
        try:
            return np.load(path, allow_pickle=False)
        except ValueError as error:  # object arrays need pickle, which is refused
            raise EvalInputError(f"{path}: not a numeric .npy array ({error})") from error
    try:
        with torch.serialization.safe_globals(_numpy_array_globals()):
            value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 (weights_only refuses arbitrary pickled objects)
        raise EvalInputError(
            f"{path}: could not be read as a tensor with torch.load(weights_only=True) ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}); save one tensor: torch.save(tensor, path)"
        ) from error
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy() if value.dtype != torch.bfloat16 else value.float().numpy()
    if isinstance(value, np.ndarray):
        return value
    raise EvalInputError(
        f"{path}: holds a {type(value).__name__}, not a tensor or array; save one tensor: torch.save(tensor, path)"
    )


def load_embeddings(path: str | Path) -> np.ndarray:
    """`[n, dim]` float32 embeddings from `path`; NaN/inf and non-numeric values are refused."""
    array = load_array(path)
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise EvalInputError(f"{path}: embeddings must be a non-empty [n, dim] array, got shape {array.shape}")
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise EvalInputError(f"{path}: embeddings must be real numbers, got dtype {array.dtype}")
    array = array.astype(np.float32)
    bad = ~np.isfinite(array)
    if bad.any():
        rows = np.flatnonzero(bad.any(axis=1))
        raise EvalInputError(
            f"{path}: embeddings contain NaN or inf in {rows.size} of {array.shape[0]} rows "
            f"(first rows: {rows[:5].tolist()})"
        )
    return array


def load_labels(path: str | Path) -> np.ndarray:
    """`[n]` int64 class labels from `path`; a float or bool array is refused, not rounded."""
    array = load_array(path)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1:
        raise EvalInputError(f"{path}: labels must be a 1-D array [n], got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise EvalInputError(
            f"{path}: labels must be integer class ids, got dtype {array.dtype} "
            f"(cast them first, e.g. labels.astype(np.int64) or labels.long(), if they are whole numbers)"
        )
    return array.astype(np.int64)


def _load_pair(embeddings_path, labels_path) -> tuple[np.ndarray, np.ndarray]:
    embeddings, labels = load_embeddings(embeddings_path), load_labels(labels_path)
    if embeddings.shape[0] != labels.shape[0]:
        raise EvalInputError(
            f"shape mismatch: {embeddings_path} has {embeddings.shape[0]} embeddings but {labels_path} "
            f"has {labels.shape[0]} labels"
        )
    return embeddings, labels


def fitting_ks(ks, gallery_size: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`(kept, dropped)`: the Ks that fit a gallery of `gallery_size` items (at least one kept)."""
    ks = tuple(sorted({int(k) for k in ks}))
    if any(k < 1 for k in ks):
        raise EvalInputError(f"--ks must be positive integers, got {list(ks)}")
    kept = tuple(k for k in ks if k <= gallery_size)
    dropped = tuple(k for k in ks if k > gallery_size)
    if not kept:  # every K too large: report Recall over the whole gallery instead
        kept = (gallery_size,)
    return kept, dropped


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rambo-eval",
        description="Recall@K, MAP@R and R-precision of saved embeddings (.npy or .pt), by exact cosine k-NN (faiss).",
        epilog="Give either --embeddings/--labels (every item queries all others) or the four "
        "--query-*/--gallery-* files (In-shop style).",
    )
    same = parser.add_argument_group("same set (each item is a query against all the others)")
    same.add_argument("--embeddings", metavar="FILE", help="[n, dim] embeddings, .npy or .pt")
    same.add_argument("--labels", metavar="FILE", help="[n] integer labels, .npy or .pt")
    split = parser.add_argument_group("separate query and gallery sets")
    split.add_argument("--query-embeddings", metavar="FILE")
    split.add_argument("--query-labels", metavar="FILE")
    split.add_argument("--gallery-embeddings", metavar="FILE")
    split.add_argument("--gallery-labels", metavar="FILE")
    parser.add_argument(
        "--ks",
        type=int,
        nargs="+",
        default=list(DEFAULT_KS),
        help="Recall@K values (default: 1 10 100 1000; Ks larger than the gallery are dropped)",
    )
    parser.add_argument("--out", metavar="FILE", help="write the metrics as JSON here")
    return parser


def evaluate_files(args: argparse.Namespace) -> tuple[dict[str, float], dict]:
    """`(metrics, info)` for parsed arguments; raises [`EvalInputError`][rambo.retrieval.eval_cli.EvalInputError] on bad
    input."""
    same_set = [args.embeddings, args.labels]
    split = [args.query_embeddings, args.query_labels, args.gallery_embeddings, args.gallery_labels]
    if any(same_set) and any(split):
        raise EvalInputError("give either --embeddings/--labels or the --query-*/--gallery-* files, not both")
    if any(same_set):
        if not all(same_set):
            raise EvalInputError("--embeddings and --labels go together: give both")
        embeddings, labels = _load_pair(args.embeddings, args.labels)
        query_embeddings = query_labels = None
        gallery_size, num_queries = embeddings.shape[0] - 1, embeddings.shape[0]
        if gallery_size < 1:
            raise EvalInputError(f"{args.embeddings}: a same-set evaluation needs at least 2 embeddings")
    elif any(split):
        if not all(split):
            raise EvalInputError(
                "query/gallery evaluation needs all four of --query-embeddings --query-labels "
                "--gallery-embeddings --gallery-labels"
            )
        query_embeddings, query_labels = _load_pair(args.query_embeddings, args.query_labels)
        embeddings, labels = _load_pair(args.gallery_embeddings, args.gallery_labels)
        if query_embeddings.shape[1] != embeddings.shape[1]:
            raise EvalInputError(
                f"shape mismatch: query embeddings ({args.query_embeddings}) have dimension "
                f"{query_embeddings.shape[1]}, gallery embeddings ({args.gallery_embeddings}) {embeddings.shape[1]}"
            )
        gallery_size, num_queries = embeddings.shape[0], query_embeddings.shape[0]
    else:
        raise EvalInputError("nothing to evaluate: give --embeddings and --labels, or the --query-*/--gallery-* files")
    ks, dropped = fitting_ks(args.ks, gallery_size)
    metrics = retrieval_metrics(embeddings, labels, ks, query_embeddings, query_labels)
    info = {"num_queries": num_queries, "gallery_size": gallery_size, "ks": list(ks), "dropped_ks": list(dropped)}
    return metrics, info


def run(argv=None) -> dict[str, float]:
    """What `rambo-eval` does: parse `argv`, print the metrics (one per line); returns them.
    Bad input exits with status 2 and the problem named (argparse's `error`)."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        metrics, info = evaluate_files(args)
    except (EvalInputError, ImportError) as error:  # ImportError: faiss missing (evaluate says which extra)
        parser.error(str(error))
    if info["dropped_ks"]:
        print(
            f"note: K={info['dropped_ks']} exceed the {info['gallery_size']} items each query searches; dropped",
            file=sys.stderr,
        )
    print(f"{info['num_queries']} queries, {info['gallery_size']} gallery items per query")
    width = max(len(name) for name in metrics)
    for name, value in metrics.items():
        print(f"{name:<{width}}  {value:.4f}")
    if args.out:
        from rambo.harness.atomic import write_json

        path = write_json(args.out, metrics)
        print(f"wrote {path}")
    return metrics


def main(argv=None) -> int:
    """Console entry point `rambo-eval`: exit status 0 after an evaluation (the console script
    passes the return value to `sys.exit`, so it must be the status, not the metrics)."""
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
