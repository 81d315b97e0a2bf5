"""The API reference (mkdocs.yml, docs/api/*.md; built by `make docs` in CI with --strict) lists
every module of the four packages, so a new module cannot be left out of it."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "harness", "retrieval", "detection")


def modules_of(package: str) -> set[str]:
    src = REPO / package / "src"
    names = set()
    for path in (src / "rambo" / package).rglob("*.py"):
        parts = path.relative_to(src).with_suffix("").parts
        if any(part in ("configs", "mmdet_configs") for part in parts):
            continue  # config files (mmdetection's config is Python), not API
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_module_has_its_entry_in_the_api_reference():
    for package in PACKAGES:
        page = (REPO / "docs" / "api" / f"{package}.md").read_text()
        listed = {line[4:].strip() for line in page.splitlines() if line.startswith("::: ")}
        assert listed == modules_of(package), (
            f"docs/api/{package}.md: add {sorted(modules_of(package) - listed)}, remove {sorted(listed - modules_of(package))}"
        )


def test_the_site_config_names_every_page_and_source_folder():
    config = (REPO / "mkdocs.yml").read_text()
    for package in PACKAGES:
        assert f"api/{package}.md" in config and f"{package}/src" in config
