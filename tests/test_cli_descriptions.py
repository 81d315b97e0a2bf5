"""Each command's `--help` opens with a whole sentence: a module whose parser takes its
description from the docstring's first line must fit its summary on that line (modules whose
summary runs on take the first paragraph instead)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIRST_LINE = ("description=__doc__.splitlines()[0]", 'description=__doc__.split("\\n")[0]')
MODULES = sorted(p for p in ROOT.glob("*/src/rambo/**/*.py") if any(call in p.read_text() for call in FIRST_LINE))


def test_the_modules_are_found():
    assert len(MODULES) >= 10, MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_first_line_description_is_a_whole_sentence(path):
    first = ast.get_docstring(ast.parse(path.read_text()), clean=False).splitlines()[0].rstrip()
    assert first.endswith((".", ".)")), f"{path}: the --help description stops mid-sentence: {first!r}"


@pytest.mark.parametrize("module", ["pipeline_timing", "stage_times", "paper_settings"])
def test_a_summary_over_two_lines_is_given_whole(module):
    done = subprocess.run(
        [sys.executable, "-m", f"rambo.ablations.{module}", "--help"], capture_output=True, text=True, check=True
    )
    description = " ".join(done.stdout.split("\n\n")[1].split())
    assert description.endswith("."), description
