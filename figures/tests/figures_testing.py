"""Checks shared by the figure tests."""

from pathlib import Path


def assert_figure_written(out: Path, name: str) -> None:
    for ext in ("png", "pdf"):
        path = out / f"{name}.{ext}"
        assert path.is_file() and path.stat().st_size > 1000, path
