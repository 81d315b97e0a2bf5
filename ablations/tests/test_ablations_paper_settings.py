"""The paper-settings ledger: every paper experiment's settings against their sources."""

import copy
import functools
from pathlib import Path

import pytest

from rambo.ablations import paper_settings
from rambo.ablations.paper_settings import check, entries_for, load_ledger, same


@functools.cache
def composed(app, experiment):
    return paper_settings.compose_experiment(app, experiment)


def cached_compose(app, experiment):
    return copy.deepcopy(composed(app, experiment))


def test_every_paper_experiment_matches_the_ledger():
    findings = check(load_ledger(), compose=cached_compose)
    drift = [f.line() for f in findings if f.kind in ("drift", "missing")]
    assert not drift, "the paper profile drifted from ablations/paper_settings.yaml:\n" + "\n".join(drift)


def test_a_profile_that_overrides_an_experiments_batch_size_fails_the_check(tmp_path, monkeypatch):
    """The bug this guards against: profile/paper.yaml set ``batch_size: 128``, and the profile is composed
    after the experiment, so the Recall@k rows' 4000 became 128. Put the line back (in a copy of
    the configs) and the ledger names every row it breaks."""
    import shutil

    configs = tmp_path / "configs"
    shutil.copytree(paper_settings.config_dir("retrieval"), configs)
    paper = configs / "profile" / "paper.yaml"
    paper.write_text(paper.read_text() + "batch_size: 128\n")
    real = paper_settings.config_dir
    monkeypatch.setattr(paper_settings, "config_dir", lambda app: configs if app == "retrieval" else real(app))
    findings = check(
        load_ledger(),
        compose=lambda app, experiment: (
            composed(app, experiment) if app == "detection" else paper_settings.compose_experiment(app, experiment)
        ),
    )
    lines = [f.line() for f in findings if f.kind == "drift"]
    for row, batch in (
        ("sop_recallk", 4000),
        ("sop_recallk_simix", 4000),
        ("cub_recallk", 400),
        ("inshop_recallk_simix", 4000),
    ):
        assert any(line.startswith(f"retrieval/{row}: batch_size resolves to 128, ledger {batch}") for line in lines), (
            lines
        )
    assert not any(line.startswith("retrieval/sop_log:") for line in lines)  # 128 is the RaMBO rows' own (App. A)


def test_an_open_entry_whose_config_changed_is_drift_too():
    """An open entry's ``current`` must be what the config holds: a fix (or another change) shows."""
    ledger = load_ledger()
    [entry] = [e for e in ledger["retrieval"]["common"] if e["key"] == "validation_fraction"]
    entry.update(status="open", current=0.2, value=0.0)  # as it stood before the fix
    lines = [f.line() for f in check(ledger, compose=cached_compose) if f.kind == "drift"]
    assert "retrieval/sop_log: validation_fraction resolves to 0.0, ledger 0.2" in "\n".join(lines)


def test_every_kept_deviation_has_its_row_in_the_readme_table():
    ledger = load_ledger()
    readme = paper_settings.DEVIATIONS_PAGE.read_text()
    assert paper_settings.missing_deviation_rows(ledger, readme) == []
    kept = [entry for _, entry in paper_settings.all_entries(ledger) if "deviation" in entry]
    assert len(kept) >= 5
    # A row taken out of the table is named.
    without = readme.replace("| Detection CE rows' recipe |", "| (removed) |")
    assert paper_settings.missing_deviation_rows(ledger, without) == [
        'detection: schedule.batch_size keeps a deviation; the deviations table of docs/faithfulness.md has no row "Detection CE rows\' recipe"',
        'detection: schedule.lr keeps a deviation; the deviations table of docs/faithfulness.md has no row "Detection CE rows\' recipe"',
    ]
    # A deviation that names no row is named too.
    kept[0].pop("readme_row")
    assert any("names no readme_row" in line for line in paper_settings.missing_deviation_rows(ledger, readme))


def test_every_entry_names_a_source_and_open_entries_their_current_value():
    ledger = load_ledger()
    for app in paper_settings.APPS:
        section = ledger[app]
        groups = [section.get("common", [])] + [g["entries"] for g in section.get("groups", [])]
        groups += list((section.get("experiments") or {}).values())
        for entries in groups:
            for entry in entries:
                assert str(entry.get("source", "")).strip(), entry["key"]
                assert "value" in entry, entry["key"]
                if entry.get("status") == "open":
                    assert "current" in entry, entry["key"]
                assert entry.get("status") in (None, "open"), entry["key"]


def test_later_entries_replace_earlier_ones_and_numbers_compare_up_to_rounding():
    section = {
        "common": [{"key": "a", "value": 1}],
        "groups": [{"name": "g", "applies_to": ["sop_*"], "entries": [{"key": "a", "value": 2}]}],
        "experiments": {"sop_log": [{"key": "a", "value": 3}]},
    }
    assert entries_for(section, "cub_log")["a"]["value"] == 1
    assert entries_for(section, "sop_loglog")["a"]["value"] == 2
    assert entries_for(section, "sop_log")["a"]["value"] == 3
    assert same(3.0e-06, 3e-6) and same([35], [35.0]) and not same(0.2, 0.0) and not same(True, 1)
    assert not same("128", 128)


def test_the_check_runs_as_a_script_and_paper_smoke_calls_it():
    assert paper_settings.main([]) == 0
    assert "paper_settings.main([])" in (Path(paper_settings.__file__).parent / "paper_smoke.py").read_text()


@pytest.mark.parametrize("app", sorted(paper_settings.APPS))
def test_the_ledger_covers_every_paper_experiment(app):
    assert set(load_ledger()[app]["experiments_covered"]) == set(paper_settings.experiments_of(app))


def test_every_entry_records_the_papers_value_and_differs_from_it_only_as_a_deviation():
    assert paper_settings.undeclared_deviations(load_ledger()) == []
    assert all("paper_value" in entry for _, entry in paper_settings.all_entries(load_ledger()))


def test_the_ce_rows_recipe_differs_from_the_papers_stated_value_so_it_must_be_a_deviation():
    """The loophole this guards against: the CE rows run mmdetection's 16 images at lr 0.01 where Sec. 5.2
    states batch 8 and lr 0.1, and the check passed because the entries were 'decisions'. Take the
    deviation away and the check names both entries."""
    ledger = load_ledger()
    [ce] = [g for g in ledger["detection"]["groups"] if g["name"] == "ce"]
    for entry in ce["entries"]:
        if entry["key"] in ("schedule.batch_size", "schedule.lr"):
            entry.pop("deviation"), entry.pop("readme_row")
    assert paper_settings.undeclared_deviations(ledger) == [
        "detection: schedule.batch_size is 16, not the paper's 8, and is not marked a deviation",
        "detection: schedule.lr is 0.01, not the paper's 0.1, and is not marked a deviation",
    ]
    assert paper_settings.main([]) == 0  # the ledger as committed holds


def test_an_entry_without_the_papers_value_and_a_deviation_from_nothing_fail():
    ledger = load_ledger()
    [entry] = [e for e in ledger["retrieval"]["common"] if e["key"] == "image_size"]
    entry.pop("paper_value")
    lines = paper_settings.undeclared_deviations(ledger)
    assert lines == ["retrieval: image_size records no paper_value (the paper's stated value, or 'not stated')"]
    entry.update(
        paper_value=224, code_value=224, deviation="a row with nothing to deviate from", readme_row="Retrieval ties"
    )
    assert paper_settings.undeclared_deviations(ledger) == [
        "retrieval: image_size is marked a deviation, but its value 224 is the paper's (the code's)"
    ]
    entry.update(code_value=256)  # differs from the code: a deviation may stand
    assert paper_settings.undeclared_deviations(ledger) == []
    entry.pop("deviation")
    assert paper_settings.undeclared_deviations(ledger) == [
        "retrieval: image_size is 224, not the code's 256, and is not marked a deviation"
    ]


def test_the_ledger_names_files_relative_to_the_repository_not_one_machines_paths():
    import re

    text = paper_settings.LEDGER.read_text()
    assert not re.search(r"(?<![\w.])/(work|home|tmp|root|mnt)/", text), "an absolute machine path in the ledger"
    paper = load_ledger()["sources"]["paper"]["file"]
    assert (paper_settings.LEDGER.parents[1] / paper).name == "rambo-blackbox-rank-losses-cvpr2020.txt"
