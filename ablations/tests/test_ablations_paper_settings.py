"""The paper-settings ledger (issue 21): every paper experiment's settings against their sources."""

import copy
import functools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import paper_settings  # noqa: E402
from paper_settings import check, entries_for, load_ledger, same  # noqa: E402


@functools.lru_cache(maxsize=None)
def composed(app, experiment):
    return paper_settings.compose_experiment(app, experiment)


def cached_compose(app, experiment):
    return copy.deepcopy(composed(app, experiment))


def test_every_paper_experiment_matches_the_ledger():
    findings = check(load_ledger(), compose=cached_compose)
    drift = [f.line() for f in findings if f.kind in ("drift", "missing")]
    assert not drift, "the paper profile drifted from ablations/paper_settings.yaml:\n" + "\n".join(drift)


def test_the_recall_at_k_batch_size_bug_fails_the_check_once_its_entry_is_not_marked_open():
    """profile/paper.yaml's batch_size 128 overrides the Recall@k rows' 4000 (issue 21): the
    ledger catches it (today the entry is marked open, a known defect)."""
    ledger = load_ledger()
    for group in ledger["retrieval"]["groups"]:
        if group["name"] == "recallk_sop":
            [entry] = [e for e in group["entries"] if e["key"] == "batch_size"]
            entry.pop("status", None)
    findings = check(ledger, compose=cached_compose)
    lines = [f.line() for f in findings if f.kind == "drift"]
    assert any(line.startswith("retrieval/sop_recallk: batch_size resolves to 128, ledger 4000") for line in lines), lines


def test_a_fixed_open_entry_is_drift_too_until_the_ledger_says_so():
    """An open entry's ``current`` must be what the config holds: a fix (or another change) shows."""
    ledger = load_ledger()
    [entry] = [e for e in ledger["retrieval"]["common"] if e["key"] == "validation_fraction"]
    assert entry.get("status") == "open" and entry["current"] == 0.2
    entry["current"] = 0.1
    lines = [f.line() for f in check(ledger, compose=cached_compose) if f.kind == "drift"]
    assert "retrieval/sop_log: validation_fraction resolves to 0.2, ledger 0.1" in "\n".join(lines)


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
    section = {"common": [{"key": "a", "value": 1}],
               "groups": [{"name": "g", "applies_to": ["sop_*"], "entries": [{"key": "a", "value": 2}]}],
               "experiments": {"sop_log": [{"key": "a", "value": 3}]}}  # fmt: skip
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
