"""The API reference (mkdocs.yml, docs/api/*.md; built by `make docs` in CI with --strict).

Each package's page (docs/api/<package>.md) shows what the package exports (its `__all__`) and what
the guides tell users to call; the machinery is on docs/api/internals.md. Together they cover every
module of the four packages, so a new module cannot be left out: a module is covered when a `:::`
directive names it, or names an object its package exports from it (`from .recall_loss import
RecallLoss` in `rambo/core/__init__.py`, `::: rambo.core.RecallLoss` on the page)."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "harness", "retrieval", "detection")
API = REPO / "docs" / "api"
# What docs/api/core.md must not show: machinery, on the internals page (tests/check_site_links.py
# checks the built pages' markup).
CORE_INTERNALS = ("benchmark", "benchmark_peers", "benchmark_surrogate", "counted_ranking", "host_syncs", "loss_path")


def modules_of(package: str) -> set[str]:
    src = REPO / package / "src"
    names = set()
    for path in (src / "rambo" / package).rglob("*.py"):
        parts = path.relative_to(src).with_suffix("").parts
        if any(part in ("configs", "mmdet_configs") for part in parts):
            continue  # config files (mmdetection's config is Python), not API
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def directives(page: Path) -> list[str]:
    return [line[4:].strip() for line in page.read_text().splitlines() if line.startswith("::: ")]


def exports(package: str) -> tuple[list[str], dict[str, str]]:
    """`rambo.<package>`'s `__all__`, and each name its `__init__` imports -> the module it comes from."""
    tree = ast.parse((REPO / package / "src" / "rambo" / package / "__init__.py").read_text())
    every, origin = [], {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            for alias in node.names:
                name = alias.asname or alias.name
                module = f"rambo.{package}.{node.module}" if node.module else f"rambo.{package}.{alias.name}"
                origin[f"rambo.{package}.{name}"] = module
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            every = [element.value for element in node.value.elts]
    return every, origin


def test_every_module_has_its_entry_in_the_api_reference():
    pages = [API / f"{package}.md" for package in PACKAGES] + [API / "internals.md"]
    named = [identifier for page in pages for identifier in directives(page)]
    for package in PACKAGES:
        _, origin = exports(package)
        covered = {origin.get(identifier, identifier) for identifier in named}
        missing = sorted(modules_of(package) - covered)
        assert missing == [], f"add to docs/api/{package}.md (or internals.md, if not for users): {missing}"


def test_each_page_shows_its_packages_exports():
    for package in PACKAGES:
        every, _ = exports(package)
        shown = set(directives(API / f"{package}.md"))
        missing = [name for name in every if f"rambo.{package}.{name}" not in shown]
        assert missing == [], f"docs/api/{package}.md: add ::: rambo.{package}.<name> for {missing}"


def test_internals_are_on_their_own_page_only():
    internal = set(directives(API / "internals.md"))
    for package in PACKAGES:
        both = internal & set(directives(API / f"{package}.md"))
        assert both == set(), f"on docs/api/{package}.md and docs/api/internals.md: {sorted(both)}"
    core = set(directives(API / "core.md"))
    shown = [name for name in CORE_INTERNALS if f"rambo.core.{name}" in core]
    assert shown == [], f"docs/api/core.md shows machinery: {shown}"
    assert {f"rambo.core.{name}" for name in CORE_INTERNALS} <= internal


def test_the_site_config_names_every_page_and_source_folder():
    config = (REPO / "mkdocs.yml").read_text()
    for package in PACKAGES:
        assert f"api/{package}.md" in config and f"{package}/src" in config
    assert "api/internals.md" in config
