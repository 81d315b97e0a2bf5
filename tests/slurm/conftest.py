"""Fixtures of ``make test-slurm``: one real SLURM cluster for the session (tests/slurm/cluster.py),
the tiny datasets prepared once on "shared storage" (as the README's cluster walk-through does
first), and the launcher overrides that fit the documented SLURM launcher config to a CPU node."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def load(name: str):
    """A module of this folder, by its path (pytest's importlib mode puts no test folder on sys.path)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


cluster_module = load("slurm_cluster")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    why = cluster_module.install_if_missing()
    if why:
        pytest.skip(why)
    cluster = cluster_module.Cluster(tmp_path_factory.mktemp("slurm")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def shared(tmp_path_factory, cluster):
    """A working folder with the tiny datasets of both apps in ``data/``."""
    root = tmp_path_factory.mktemp("shared")
    run = cluster_module.run
    run(
        cluster,
        [
            sys.executable,
            "-m",
            "rambo.retrieval.prepare",
            "--data-dir",
            "data/retrieval",
            "--data",
            "synthetic",
            "--",
            "profile=tiny",
        ],
        root,
    )
    run(
        cluster,
        [
            sys.executable,
            "-m",
            "rambo.detection.prepare",
            "--data-dir",
            "data/detection",
            "--data",
            "tiny",
            "--",
            *cluster_module.DETECTION_TINY,
        ],
        root,
    )
    return root
