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
