"""The README, the sub-projects' READMEs and the documentation site (docs/) say only what runs.

* Every fenced Python block runs, each in a fresh namespace in a scratch folder.
* Every shell block (bash, sh, shell, console) runs, command by command, or names in its title the
  reason it cannot run here: ```` ```bash title="Not run by the tests: <reason>" ```` (a cluster, a
  GPU, a download, an hour). The title is shown above the block on the site.
* The README's claims table agrees with the claims file the pipeline writes, and the files the site
  includes (``--8<--``) exist; so does every repository path a page names.
* No page names an issue number, which a reader cannot see.
* ``tests/check_site_links.py`` (run by ``make docs`` on the built site) finds a broken link and a
  broken anchor.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SUBPROJECT_READMES = [
    REPO / f / "README.md" for f in ("core", "harness", "retrieval", "detection", "ablations", "figures", "results")
]
PAGES = [REPO / "README.md", *SUBPROJECT_READMES, *sorted((REPO / "docs").rglob("*.md"))]
SHELLS = ("bash", "sh", "shell", "console")
SKIP_TITLE = "Not run by the tests: "
# Commands that only read the checkout run in its root; every other command runs in a scratch folder.
IN_REPO = {"make help", "python -m rambo.ablations.paper_settings"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)
SNIPPET = re.compile(r'^[ \t]*--8<-- "([^"]+)"', re.M)


def blocks(language_filter) -> list[tuple[str, str, str, str]]:
    """(page:line, language, title, code) of every fenced block whose language passes the filter."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            info = match["info"].strip()
            language = info.split()[0] if info else ""
            if not language_filter(language):
                continue
            title = re.search(r'title="([^"]*)"', info)
            indent = match["indent"]
            code = "".join(
                line[len(indent) :] if line.startswith(indent) else line for line in match["body"].splitlines(True)
            )
            where = f"{page.relative_to(REPO)}:{text[: match.start()].count(chr(10)) + 1}"
            found.append((where, language, title[1] if title else "", code))
    return found


PYTHON_BLOCKS = blocks(lambda language: language == "python")
SHELL_BLOCKS = blocks(lambda language: language in SHELLS)


def commands(code: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    lines = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            lines.append(" ".join(shlex.quote(word) for word in words))
    return lines


def skip_reason(title: str) -> str | None:
    if not title.startswith(SKIP_TITLE):
        return None
    reason = title[len(SKIP_TITLE) :].strip()
    assert reason, f"a block titled {title!r} must say why it cannot run"
    return reason


def test_the_pages_have_blocks_to_run():
    assert len(PYTHON_BLOCKS) >= 5 and len(SHELL_BLOCKS) >= 10
    assert any(skip_reason(title) is None for _, _, title, _ in SHELL_BLOCKS)


@pytest.mark.parametrize("where, language, title, code", PYTHON_BLOCKS, ids=[b[0] for b in PYTHON_BLOCKS])
def test_python_block_runs(where, language, title, code, tmp_path, monkeypatch):
    reason = skip_reason(title)
    if reason:
        pytest.skip(reason)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, where, "exec"), {"__name__": "__docs__"})


# What a command writes, as its page says: checked after it runs (Getting started's first run; a
# standalone tiny run does not log to W&B, so WANDB_MODE is not set for the commands).
WRITES = {
    "python -m rambo.retrieval.train profile=tiny": (
        "outputs/synthetic_rambo_log/seed0/train.log",
        "outputs/synthetic_rambo_log/seed0/metrics.json",
        "outputs/synthetic_rambo_log/seed0/curve.json",
        "outputs/synthetic_rambo_log/seed0/checkpoint.pt",
        "data/synthetic_tiny",
    ),
}


@pytest.mark.parametrize("where, language, title, code", SHELL_BLOCKS, ids=[b[0] for b in SHELL_BLOCKS])
def test_shell_block_runs_or_says_why_not(where, language, title, code, tmp_path):
    reason = skip_reason(title)
    if reason:
        pytest.skip(reason)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("WANDB_MODE", None)
    for command in commands(code):
        cwd = REPO if command in IN_REPO else tmp_path
        done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (
            f"{where}: `{command}` exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
        for path in WRITES.get(command, ()):
            assert (cwd / path).exists(), f"{where}: `{command}` did not write {path}"
        if command in WRITES:
            assert not list(cwd.rglob("wandb")), f"{where}: `{command}` logged to W&B"


def test_readme_claims_table_is_the_pipelines():
    claims = json.loads((REPO / "results" / "mini" / "tables" / "claims.json").read_text())["claims"]
    readme = (REPO / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| ") and "|---" not in line][1:]

    def signed(x: float) -> str:
        return f"{x:+.1f}"

    expected = []
    for claim in claims:
        low, high = claim["interval"]
        paper = "-" if claim["paper_difference"] is None else signed(claim["paper_difference"])
        expected.append(
            f"| {claim['claim']} | {paper} | {signed(claim['difference'])} [{signed(low)}, {signed(high)}] "
            f"| {claim['verdict']} | {claim['second_draw']['verdict']} |"
        )
    assert rows[: len(expected)] == expected


def test_every_included_file_exists():
    for page in PAGES:
        for path in SNIPPET.findall(page.read_text()):
            assert (REPO / path).is_file(), f"{page.relative_to(REPO)} includes {path}, which does not exist"


def test_the_included_gpu_budget_is_the_scripts_output(tmp_path):
    out = tmp_path / "gpu_budget.md"
    subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_budget.py"), "--markdown", str(out)],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    assert out.read_text() == (REPO / "benchmarks" / "gpu_budget.md").read_text(), "run make gpu-budget"


# Paths a page names in backticks, under the repository's own folders (placeholders such as <profile> aside).
TOP = "core|harness|retrieval|detection|ablations|figures|results|benchmarks|examples|environments|tests|docs|\\.ci"
NAMED_PATH = re.compile(rf"`((?:{TOP})/[^`\s<>*{{}}$]*)`")


# What a command writes when it is run, named by a page but not committed.
OUTPUTS = {"benchmarks/two_pass_memory_cpu.json", "benchmarks/recall_at_k_sop_scale.json"}


def test_every_repository_path_a_page_names_exists():
    missing = []
    for page in PAGES:
        for path in NAMED_PATH.findall(page.read_text()):
            if path not in OUTPUTS and not (REPO / path).exists():
                missing.append(f"{page.relative_to(REPO)}: {path}")
    assert missing == []


ISSUE_REF = re.compile(r"\b[Ii]ssues? \d+|(?<![\w&/])#\d+\b")


def test_no_page_names_an_issue_number():
    found = []
    for page in [*PAGES, REPO / "CHANGELOG.md"]:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            found += [f"{page.relative_to(REPO)}:{number}: {m}" for m in ISSUE_REF.findall(line)]
    assert found == []


def test_the_link_check_finds_a_broken_link_and_anchor(tmp_path):
    site = tmp_path / "site"
    (site / "a").mkdir(parents=True)
    (site / "index.html").write_text('<h2 id="top">x</h2><a href="a/">a</a><a href="#top">t</a><img src="x.png">')
    (site / "x.png").write_bytes(b"")
    (site / "a" / "index.html").write_text(
        '<a href="../index.html#top">ok</a><a href="../b/">b</a><a href="../#gone">g</a>'
    )
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "check_site_links.py"), str(site)], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "a/index.html: ../b/ names no file of the site",
        "a/index.html: ../#gone names no anchor of index.html",
    ]
    (site / "a" / "index.html").write_text('<a href="../index.html#top">ok</a>')
    assert subprocess.run([sys.executable, str(REPO / "tests" / "check_site_links.py"), str(site)]).returncode == 0
