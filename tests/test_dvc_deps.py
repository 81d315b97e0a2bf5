"""Every DVC stage lists, under its ``deps``, every project file its command imports.

A stage whose code changes must be marked changed by ``dvc status``: otherwise an edit to, say,
the ranking code leaves Fig. 5 as it was, ``dvc repro`` runs nothing, and the published figure
silently stops matching the code. The imports are read statically (``ast``), transitively, from
the stage's entry point: ``python -m <module>`` (a module of a sub-project's ``src/``: the figures
and the tables are ``rambo.figures`` and ``rambo.ablations``, whose sibling modules import
relatively) or ``python <script>.py`` (a script whose folder is on its path: its sibling modules
import by bare name; no stage runs one now, and the next test keeps it so). Every ``import`` counts, also those inside functions (lazy imports run too), and ``from a
import b`` counts ``a/b.py`` when ``b`` is a module. A project file is covered when it or a folder
above it is a dep; deps with ``${...}`` (data paths chosen by the profile) cover no code.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = sorted(path.parent for path in REPO.glob("*/src/rambo"))  # core/src, harness/src, ...
ENTRY = re.compile(r"python\s+(?:-m\s+(?P<module>[\w.]+)|(?P<script>[\w./-]+\.py))")


def module_file(name: str, folders: list[Path]) -> Path | None:
    """The file of module ``name`` under one of ``folders`` (``a/b.py`` or ``a/b/__init__.py``)."""
    parts = name.split(".")
    for folder in folders:
        for candidate in (folder.joinpath(*parts).with_suffix(".py"), folder.joinpath(*parts, "__init__.py")):
            if candidate.is_file():
                return candidate
    return None


def package_of(path: Path) -> tuple[Path, str] | None:
    """``(source root, dotted package)`` of a file under a sub-project's ``src/``."""
    for root in SOURCE_ROOTS:
        if root in path.parents:
            parts = path.relative_to(root).with_suffix("").parts
            return root, ".".join(parts[:-1] if parts[-1] != "__init__" else parts[:-1])
    return None


def imported_files(path: Path) -> set[Path]:
    """The project files ``path`` imports directly (packages' ``__init__.py`` on the way included)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    located = package_of(path)
    search = SOURCE_ROOTS if located else [path.parent, *SOURCE_ROOTS]  # a script's folder is on its path
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the file's package
                assert located, f"{path}: a relative import outside a package"
                package = located[1].split(".")
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            names.append(base)
            names += [f"{base}.{alias.name}" for alias in node.names]  # `from a import b`: b may be a module
    found = set()
    for name in names:
        parts = name.split(".")
        for end in range(1, len(parts) + 1):  # a.b.c imports a, a.b and a.b.c
            file = module_file(".".join(parts[:end]), search)
            if file is not None:
                found.add(file)
    return found


def closure(entry: Path) -> set[Path]:
    seen, todo = set(), [entry]
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += imported_files(path)
    return seen


def stages() -> dict[str, dict]:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def entry_points(cmd) -> list[Path]:
    text = cmd if isinstance(cmd, str) else " && ".join(cmd)
    entries = []
    for match in ENTRY.finditer(text):
        if match["module"]:
            file = module_file(match["module"], SOURCE_ROOTS)
            assert file is not None, f"python -m {match['module']}: no such module in {SOURCE_ROOTS}"
        else:
            file = REPO / match["script"]
            assert file.is_file(), f"python {match['script']}: no such script"
        entries.append(file)
    return entries


def uncovered(stage: dict) -> list[str]:
    deps = [dep if isinstance(dep, str) else next(iter(dep)) for dep in stage.get("deps", [])]
    deps = [REPO / dep for dep in deps if "${" not in dep]
    files = set().union(*(closure(entry) for entry in entry_points(stage["cmd"])))
    return sorted(
        str(file.relative_to(REPO)) for file in files if not any(file == dep or dep in file.parents for dep in deps)
    )


def test_the_import_reader_follows_relative_lazy_and_submodule_imports(tmp_path, monkeypatch):
    """The reader itself, on a scratch project: a missed import would let a stage pass unchecked."""
    package = tmp_path / "x" / "src" / "rambo" / "x"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n\ndef f():\n    from .c import g\n")
    (package / "b.py").write_text("")
    (package / "c.py").write_text("import rambo.x.d\n")
    (package / "d.py").write_text("")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "run.py").write_text("import sibling\nfrom rambo.x import a\n")
    (tmp_path / "scripts" / "sibling.py").write_text("")
    monkeypatch.setitem(globals(), "SOURCE_ROOTS", [tmp_path / "x" / "src"])
    found = {str(path.relative_to(tmp_path)) for path in closure(tmp_path / "scripts" / "run.py")}
    assert found == {
        "scripts/run.py",
        "scripts/sibling.py",
        "x/src/rambo/x/__init__.py",
        *(f"x/src/rambo/x/{name}.py" for name in "abcd"),
    }


def test_every_stage_runs_a_module_of_a_sub_project():
    """``python -m rambo.<package>.<module>``, never a script: a script imports its siblings only
    with its folder on ``sys.path``, which no figure or table edits any more."""
    for name, stage in stages().items():
        cmd = stage["cmd"] if isinstance(stage["cmd"], str) else " && ".join(stage["cmd"])
        found = list(ENTRY.finditer(cmd))
        assert found and all(match["module"] for match in found), f"stage {name!r}: {cmd}"
        assert all(package_of(file) for file in entry_points(cmd)), f"stage {name!r}: {cmd}"


@pytest.mark.parametrize("name", sorted(stages()))
def test_a_stage_depends_on_every_project_file_it_imports(name):
    missing = uncovered(stages()[name])
    assert not missing, (
        f"dvc.yaml stage {name!r} imports project files none of its deps covers, so `dvc status` would not "
        f"see them change: {missing}. Add them (or a folder above them) to its deps."
    )
