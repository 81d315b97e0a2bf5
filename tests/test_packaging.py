"""What a user gets from `pip install ./<sub-project>`: licence, version, extras, every config file.

Each sub-project (a folder with a pyproject.toml) is built into a wheel from a copy of its folder
(so no build/ or *.egg-info lands in the work tree) and the wheel is installed, non-editable, into
a temporary target. Config files are found generically (every *.yaml under src/), so a renamed
or added config folder is covered without editing this test. About 2 s per sub-project.
"""

from __future__ import annotations

import ast
import glob
import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
SUBPROJECTS = sorted(path.parent.name for path in ROOT.glob("*/pyproject.toml"))
FAISS = {"faiss-cpu": "cpu", "faiss-gpu": "gpu"}  # retrieval's alternative extras


def _pyproject(sub: str) -> dict:
    return tomllib.loads((ROOT / sub / "pyproject.toml").read_text())


def _package_dir(sub: str) -> tuple[str, Path]:
    """The import name (rambo-core -> rambo.core) and its folder under src/."""
    package = _pyproject(sub)["project"]["name"].replace("-", ".")
    return package, ROOT / sub / "src" / Path(*package.split("."))


def _files_under_src(sub: str, suffixes=(".py", ".yaml")) -> set[str]:
    src = ROOT / sub / "src"
    return {
        path.relative_to(src).as_posix()
        for path in src.rglob("*")
        if path.is_file()
        and path.suffix in suffixes
        and "__pycache__" not in path.parts
        and not any(part.endswith(".egg-info") for part in path.parts)
    }


def _requirement_name(requirement: str) -> str:
    name = requirement.split(";")[0]
    for stop in "<>=!~[ (":
        name = name.split(stop)[0]
    return name.strip().lower().replace("_", "-")


def test_every_distribution_is_covered():
    assert {"core", "harness", "retrieval", "detection"} <= set(SUBPROJECTS)


def test_root_license_is_mit():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 The RaMBO reproduction authors" in text


@pytest.mark.parametrize("sub", SUBPROJECTS)
def test_license_copy_and_declaration(sub):
    # Wheels are built from the sub-project folder, so each one ships its own copy of the root file.
    assert (ROOT / sub / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()
    project = _pyproject(sub)["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]


@pytest.mark.parametrize("sub", SUBPROJECTS)
def test_readme_exists(sub):
    # A missing readme is only a setuptools warning, and the wheel gets an empty description.
    readme = _pyproject(sub)["project"]["readme"]
    assert (ROOT / sub / readme).is_file(), f"{sub}/pyproject.toml names readme {readme!r}, which is missing"


@pytest.mark.parametrize("sub", SUBPROJECTS)
def test_version_agrees(sub):
    project = _pyproject(sub)["project"]
    package, folder = _package_dir(sub)
    tree = ast.parse((folder / "__init__.py").read_text())
    versions = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets)
    ]
    assert versions == [project["version"]], f"{package}.__version__ must equal {sub}/pyproject.toml's version"
    assert importlib.metadata.version(project["name"]) == project["version"], (
        f"installed {project['name']} metadata is stale: reinstall it (make install)"
    )


@pytest.mark.parametrize("sub", SUBPROJECTS)
def test_package_data_globs_cover_every_config_file(sub):
    """Fast check, without building: setuptools' package-data globs match every *.yaml under src/."""
    package_data = _pyproject(sub).get("tool", {}).get("setuptools", {}).get("package-data", {})
    src = ROOT / sub / "src"
    matched = set()
    for package, patterns in package_data.items():
        folder = src / Path(*package.split("."))
        for pattern in patterns:
            matched |= {Path(p).relative_to(src).as_posix() for p in glob.glob(str(folder / pattern), recursive=True)}
    missing = _files_under_src(sub, suffixes=(".yaml",)) - matched
    assert not missing, f"{sub}/pyproject.toml package-data misses {sorted(missing)}"


def _build_wheel(sub: str, tmp_path: Path) -> Path:
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("tests", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache")
    shutil.copytree(ROOT / sub, source, ignore=ignore)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source)]
    requires = _pyproject(sub)["build-system"]["requires"]
    try:  # the environment's setuptools when it is new enough (no download), else an isolated build
        installed = int(importlib.metadata.version("setuptools").split(".")[0])
        needed = int(next(r for r in requires if r.startswith("setuptools")).split(">=")[1].split(".")[0])
        if installed >= needed:
            command.insert(4, "--no-build-isolation")
    except (importlib.metadata.PackageNotFoundError, StopIteration, IndexError, ValueError):
        pass
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, f"pip wheel ./{sub} failed:\n{result.stdout}\n{result.stderr}"
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    return wheel


@pytest.mark.parametrize("sub", SUBPROJECTS)
def test_wheel_and_non_editable_install(sub, tmp_path):
    project = _pyproject(sub)["project"]
    wheel = _build_wheel(sub, tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        dist_info = {name for name in names if ".dist-info/" in name}
        metadata = HeaderParser().parsestr(archive.read(next(n for n in dist_info if n.endswith("/METADATA"))).decode())
        licenses = [name for name in dist_info if name.endswith("/LICENSE")]
        assert licenses, f"no LICENSE in {wheel.name}'s dist-info: {sorted(dist_info)}"
        assert archive.read(licenses[0]) == (ROOT / "LICENSE").read_bytes()

    missing = _files_under_src(sub) - names
    assert not missing, f"{wheel.name} lacks {sorted(missing)}"
    assert metadata["Name"] == project["name"]
    assert metadata["Version"] == project["version"]
    assert metadata["Requires-Python"] == project["requires-python"]
    assert metadata["License-Expression"] == "MIT"

    # faiss only through the alternative extras cpu / gpu, never unconditionally, never both in one.
    requires = metadata.get_all("Requires-Dist") or []
    faiss = {}
    for requirement in requires:
        name = _requirement_name(requirement)
        if "faiss" in name:
            assert "extra ==" in requirement, f"{project['name']} hard-depends on {requirement!r}"
            faiss.setdefault(requirement.split("extra ==")[1].strip().strip("'\""), set()).add(name)
    if project["name"] == "rambo-retrieval":
        assert faiss == {extra: {name} for name, extra in FAISS.items()}
    else:
        assert not faiss

    # A plain (non-editable) install carries the config files too.
    target = tmp_path / "site"
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-index",
        "-q",
        "--target",
        str(target),
        str(wheel),
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, f"pip install {wheel.name} failed:\n{result.stdout}\n{result.stderr}"
    installed = {p.relative_to(target).as_posix() for p in target.rglob("*.yaml")}
    assert _files_under_src(sub, suffixes=(".yaml",)) <= installed


def _fresh_venv_seeing_only_third_party(tmp_path: Path) -> Path:
    """A new virtual environment whose sys.path also holds a folder of links to this environment's
    installed packages, every ``rambo`` one left out (its editable installs too: a ``.pth`` file's
    paths are added, but the ``.pth`` files inside them are not run). pip there sees torch,
    pytorch-metric-learning and their dependencies as installed, and nothing of this project."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    visible = tmp_path / "third_party"
    visible.mkdir()
    for source in {Path(p) for p in sys.path if p.endswith("-packages") and Path(p).is_dir()}:
        for entry in source.iterdir():
            name = entry.name.lower()
            if (
                name.startswith(("rambo", "__editable__", "_rambo"))
                or name.endswith(".pth")
                or (visible / entry.name).exists()
            ):
                continue
            (visible / entry.name).symlink_to(entry)
    (site / "_third_party.pth").write_text(f"{visible}\n")
    return python


def test_the_core_wheel_with_its_pml_extra_in_a_fresh_environment(tmp_path):
    """What `pip install "./core[pml]"` gives a user: the wheel and its extra resolve with nothing
    more (pip runs with --no-index), rambo.core and rambo.core.pml import from that install, a loss
    is called on embeddings, and the core example trains there. About 20 s."""
    wheel = _build_wheel("core", tmp_path)
    python = _fresh_venv_seeing_only_third_party(tmp_path)
    before = subprocess.run([python, "-c", "import rambo.core"], capture_output=True, text=True)
    assert "No module named 'rambo'" in before.stderr, before.stderr  # nothing of the project is visible yet

    install = [python, "-m", "pip", "install", "--no-index", "--find-links", str(wheel.parent), "rambo-core[pml]"]
    result = subprocess.run(install, capture_output=True, text=True)
    assert result.returncode == 0, f"pip install rambo-core[pml] failed:\n{result.stdout}\n{result.stderr}"
    assert "Requirement already satisfied: pytorch-metric-learning" in result.stdout, result.stdout  # the extra
    assert "does not provide the extra" not in result.stdout + result.stderr
    assert "Successfully installed rambo-core-" in result.stdout, result.stdout

    check = """
import pathlib, sys, torch
import rambo.core, rambo.core.pml
from rambo.core import EmbeddingLoss, RecallLoss
for module in (rambo.core, rambo.core.pml):
    assert pathlib.Path(module.__file__).is_relative_to(sys.prefix), module.__file__
torch.manual_seed(0)
embeddings, labels = torch.randn(8, 4, requires_grad=True), torch.arange(4).repeat(2)
EmbeddingLoss(RecallLoss(), tau=0)(embeddings, labels).backward()
rambo.core.pml.RaMBORecallLoss()(embeddings, labels).backward()
print("imported from", pathlib.Path(rambo.core.__file__).parent, "gradient", bool(embeddings.grad.abs().sum() > 0))
"""
    result = subprocess.run([python, "-c", check], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"imported from {tmp_path / 'venv'}" in result.stdout and "gradient True" in result.stdout, result.stdout

    example = ROOT / "examples" / "train_digits.py"
    result = subprocess.run(
        [python, str(example), "--epochs", "1", "--limit", "20"], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "Recall@1 before training:" in result.stdout and "Recall@1 after training:" in result.stdout
