"""One run per folder (rambo.harness.claim): real processes racing for one folder, a killed holder,
a requeued SLURM job, and the error a refused run gets."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rambo.harness.claim import (
    CLAIM_NAME,
    FolderClaim,
    FolderClaimedError,
    claim_folders,
    holder_is_gone,
    holder_record,
)

WORKER = Path(__file__).with_name("claim_worker.py")


def start_workers(folder, count, start_at, hold, tmp_path):
    return [
        (
            subprocess.Popen(
                [sys.executable, str(WORKER), str(folder), f"run{i}", str(start_at), str(hold), str(tmp_path / f"r{i}")]
            ),
            tmp_path / f"r{i}",
        )
        for i in range(count)
    ]


def test_of_processes_started_together_exactly_one_claims_the_folder(tmp_path):
    """Four processes wake at the same instant and claim one folder, eight rounds: every round exactly
    one holds it and the others are refused with the holder's name; the folder is free afterwards."""
    for round_ in range(8):
        folder = tmp_path / f"run{round_}"
        workers = start_workers(folder, 4, time.time() + 1.5, 1.0, tmp_path)
        codes = [process.wait(timeout=60) for process, _ in workers]
        results = [path.read_text() for _, path in workers]
        assert sorted(codes) == [0, 3, 3, 3], (round_, codes, results)
        winner = results[codes.index(0)]
        assert winner == "claimed"
        holder = f"run{codes.index(0)}"
        for code, text in zip(codes, results):
            if code == 3:
                assert str(folder) in text and repr(holder) in text, text
        assert not (folder / CLAIM_NAME).exists()
        assert sorted(p.name for p in folder.iterdir()) == []  # no temporary file left behind


def test_a_claim_of_a_killed_process_is_recovered(tmp_path):
    folder = tmp_path / "run"
    ((process, result),) = start_workers(folder, 1, 0.0, -1, tmp_path)
    assert process.wait(timeout=60) == 0 and result.read_text() == "claimed"
    assert json.loads((folder / CLAIM_NAME).read_text())["pid"] == process.pid  # left behind, as by a kill
    claim = FolderClaim(folder, "next").acquire()
    assert json.loads((folder / CLAIM_NAME).read_text())["run"] == "next"
    claim.release()
    assert not (folder / CLAIM_NAME).exists()


def test_a_live_holder_refuses_and_keeps_its_claim(tmp_path):
    folder = tmp_path / "run"
    first = FolderClaim(folder, "experiment_a seed 0").acquire()
    recorded = (folder / CLAIM_NAME).read_text()
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "from rambo.harness.claim import FolderClaim; import sys\n"
                f"FolderClaim({str(folder)!r}, 'experiment_a seed 1').acquire()"
            ),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode != 0
    assert "FolderClaimedError" in child.stderr and str(folder) in child.stderr
    assert "'experiment_a seed 0'" in child.stderr and f"process {os.getpid()}" in child.stderr
    assert (folder / CLAIM_NAME).read_text() == recorded  # untouched
    first.release()


def test_a_requeued_slurm_job_takes_over_its_own_claim_and_another_job_does_not():
    holder = {**holder_record("r"), "host": "node-a", "pid": 4242, "slurm_job_id": "77", "slurm_restart_count": 0}
    requeued = {**holder_record("r"), "host": "node-b", "slurm_job_id": "77", "slurm_restart_count": 1}
    assert "requeued" in holder_is_gone(holder, requeued)
    other_job = {**requeued, "slurm_job_id": "78"}
    assert holder_is_gone(holder, other_job) is None
    same_job_same_attempt = {**requeued, "slurm_restart_count": 0}  # two runs inside one job: both alive
    assert holder_is_gone(holder, same_job_same_attempt) is None


def test_a_process_id_reused_by_another_process_does_not_hold_the_claim():
    me = holder_record("r")
    holder = {**me, "pid": os.getppid(), "pid_start": "1"}  # a live pid, but not the process that claimed
    assert "another process" in holder_is_gone(holder, me)
    assert holder_is_gone(live_foreign_holder("r"), me) is None
    assert (
        holder_is_gone({**live_foreign_holder("r"), "pid_start": None}, me) is None
    )  # no start time: a live pid holds it


def test_this_process_takes_over_its_own_claim_of_an_earlier_run(tmp_path):
    """One process runs one run at a time (Hydra's basic launcher runs a sweep's jobs one after
    another in one process; joblib's workers one task each): an earlier run of this process that
    raised before giving its claim back does not block the next."""
    FolderClaim(tmp_path, "earlier").acquire()
    claim = FolderClaim(tmp_path, "next").acquire()
    assert json.loads((tmp_path / CLAIM_NAME).read_text())["run"] == "next"
    claim.release()


def live_foreign_holder(run):
    """The record of a claim held by another live process of this host (the test's parent)."""
    parent = os.getppid()
    start = Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()[19]
    return {**holder_record(run), "pid": parent, "pid_start": start}


def test_claim_folders_is_all_or_none(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / CLAIM_NAME).write_text(json.dumps(live_foreign_holder("other")))
    with pytest.raises(FolderClaimedError, match="other"):
        claim_folders([tmp_path / "a", tmp_path / "b"], "mine")
    assert not (tmp_path / "a" / CLAIM_NAME).exists()  # the one taken was given back
    (tmp_path / "b" / CLAIM_NAME).unlink()
    claims = claim_folders([tmp_path / "a", tmp_path / "b", tmp_path / "a"], "mine")
    assert len(claims) == 2
    for claim in claims:
        claim.release()


def test_release_leaves_a_claim_that_is_not_ours(tmp_path):
    claim = FolderClaim(tmp_path, "mine").acquire()
    (tmp_path / CLAIM_NAME).write_text(json.dumps({**holder_record("theirs")}))
    claim.release()
    assert json.loads((tmp_path / CLAIM_NAME).read_text())["run"] == "theirs"


def gated_worker(folder, run, hold, tmp_path, gates=None):
    """A claim_worker.py process for ``run`` that claims ``folder`` at once; with ``gates`` it
    stops at each point of a takeover until the test lets it go on (see claim_worker.py)."""
    env = dict(os.environ, CLAIM_WORKER_GATES=str(gates)) if gates else dict(os.environ)
    result = tmp_path / f"{run}.result"
    command = [sys.executable, str(WORKER), str(folder), run, "0", str(hold), str(result)]
    return subprocess.Popen(command, env=env), result


def wait_until(condition, what, processes):
    """Wait for ``condition()``; fail (not hang) if it never holds or a worker died with an error."""
    deadline = time.monotonic() + 120
    while not condition():
        crashed = [process.args for process in processes if process.poll() not in (None, 0, 3)]
        assert not crashed and time.monotonic() < deadline, f"waiting for {what}: {crashed or 'timeout'}"
        time.sleep(0.01)


def claim_of_a_killed_run(folder, tmp_path):
    process, result = gated_worker(folder, "killed", -1, tmp_path)
    assert process.wait(timeout=60) == 0 and result.read_text() == "claimed"
    return json.loads((folder / CLAIM_NAME).read_text())


def test_a_takeover_descheduled_at_each_step_leaves_exactly_one_owner(tmp_path):
    """The race of a stale claim's takeover, replayed in order with real processes: A finds the claim
    of a killed run stale and is descheduled; B takes that claim over; A goes on (and, when a takeover
    moved the claim aside and put back what it had not meant to take, A moved B's claim aside and was
    descheduled again; C claimed the empty name; A's put-back failed and deleted B's claim: B and C
    both held the folder). Exactly one run holds it, the claim file names that run, and every other
    run is refused with its name."""
    folder, gates, release = tmp_path / "run", tmp_path / "gates", tmp_path / "release"
    gates.mkdir()
    claim_of_a_killed_run(folder, tmp_path)
    a, a_result = gated_worker(folder, "A", release, tmp_path, gates)
    wait_until((gates / "A.stale").exists, "A to find the claim stale", [a])
    b, b_result = gated_worker(folder, "B", release, tmp_path)
    wait_until(b_result.exists, "B to claim", [a, b])
    for point in ("stale", "lock"):
        (gates / f"A.{point}.go").touch()
    wait_until(lambda: (gates / "A.verified").exists() or a_result.exists(), "A to go on", [a, b])
    c, c_result = gated_worker(folder, "C", release, tmp_path)  # arrives while A is where the gap was
    wait_until(c_result.exists, "C to claim", [a, b, c])
    (gates / "A.verified.go").touch()
    wait_until(a_result.exists, "A to end", [a, b, c])

    results = {name: path.read_text() for name, path in (("A", a_result), ("B", b_result), ("C", c_result))}
    assert [name for name, text in results.items() if text == "claimed"] == ["B"], results
    assert json.loads((folder / CLAIM_NAME).read_text())["run"] == "B"
    for name in ("A", "C"):
        assert results[name].startswith(f"refused: {folder} is claimed by run 'B' "), results[name]
    release.touch()
    assert [process.wait(timeout=60) for process in (a, b, c)] == [3, 0, 3]
    assert sorted(path.name for path in folder.iterdir()) == []  # no claim, lock or temporary file left


def test_of_runs_taking_over_one_stale_claim_at_once_exactly_one_does(tmp_path):
    """A has checked, under the takeover lock, that the claim is still the killed run's, and is
    descheduled there; B found the same claim stale and waits for the lock; C arrives and finds the
    stale claim still in place (never a missing one). A takes it over; B and C, getting the lock
    after A, find A's claim and are refused."""
    folder, gates, release = tmp_path / "run", tmp_path / "gates", tmp_path / "release"
    gates.mkdir()
    stale = claim_of_a_killed_run(folder, tmp_path)
    a, a_result = gated_worker(folder, "A", release, tmp_path, gates)
    b, b_result = gated_worker(folder, "B", release, tmp_path, gates)
    workers = [a, b]
    for run in ("A", "B"):
        wait_until((gates / f"{run}.stale").exists, f"{run} to find the claim stale", workers)
    (gates / "A.stale.go").touch(), (gates / "A.lock.go").touch()
    wait_until((gates / "A.verified").exists, "A to hold the lock", workers)
    (gates / "B.stale.go").touch(), (gates / "B.lock.go").touch()
    wait_until((gates / "B.lock").exists, "B to wait for the lock", workers)
    assert json.loads((folder / CLAIM_NAME).read_text()) == stale  # still there while A holds the lock
    c, c_result = gated_worker(folder, "C", release, tmp_path, gates)
    workers.append(c)
    for point in ("stale", "lock", "verified"):
        (gates / f"C.{point}.go").touch()
    wait_until((gates / "C.lock").exists, "C to find the claim stale and wait for the lock", workers)
    (gates / "A.verified.go").touch()
    (gates / "B.verified.go").touch()
    for result in (a_result, b_result, c_result):
        wait_until(result.exists, f"{result.stem} to end", workers)

    results = {path.stem: path.read_text() for path in (a_result, b_result, c_result)}
    assert [name for name, text in results.items() if text == "claimed"] == ["A"], results
    assert json.loads((folder / CLAIM_NAME).read_text())["run"] == "A"
    assert not (gates / "B.verified").exists() and not (gates / "C.verified").exists()
    release.touch()
    assert [process.wait(timeout=60) for process in workers] == [0, 3, 3]
    assert sorted(path.name for path in folder.iterdir()) == []


def test_a_job_folder_claimed_before_hydra_writes_is_kept_by_the_run_that_trains_there(tmp_path, caplog):
    """claim_job_folder (Hydra's logging setup of the job) takes the claim; the run's own
    claim_folders keeps that very claim (no second claim, no takeover), and gives it back at the end."""
    from rambo.harness.claim import claim_job_folder, held

    claim_job_folder(str(tmp_path), "mine seed 0")
    recorded = (tmp_path / CLAIM_NAME).read_text()
    job = held(tmp_path)
    with caplog.at_level("WARNING", logger="rambo.harness.claim"):
        claims = claim_folders([tmp_path, tmp_path / "checkpoints"], "mine seed 0")
    assert caplog.messages == []
    assert job in claims and (tmp_path / CLAIM_NAME).read_text() == recorded
    for claim in claims:
        claim.release()
    assert held(tmp_path) is None and not (tmp_path / CLAIM_NAME).exists()


def test_a_job_folder_another_run_holds_stops_the_job_before_it_writes(tmp_path, capsys):
    from rambo.harness.claim import claim_job_folder
    from rambo.harness.testing import held_by_another_process, tree_digest

    (tmp_path / "train.log").write_text("the other run's log\n")
    with held_by_another_process(tmp_path, "other seed 0") as holder:
        before = tree_digest(tmp_path)
        with pytest.raises(SystemExit) as stopped:
            claim_job_folder(str(tmp_path), "mine seed 1")
        assert tree_digest(tmp_path) == before
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path} is claimed by run 'other seed 0' (host {holder['host']}, process {holder['pid']}, since "
        f"{holder['since']}); this run ('mine seed 1') would overwrite its checkpoint and metrics there, so it stops "
        "before writing anything. Give this run a folder of its own (hydra.run.dir=...), or wait for that run to end. "
        f"If that run is gone (killed on another host, no scheduler to requeue it), delete {tmp_path / CLAIM_NAME} "
        "and start again.\n"
    )


def test_the_other_processes_of_a_distributed_run_claim_no_job_folder(tmp_path, monkeypatch):
    """Under torchrun every process sets up Hydra's logging; only the main one claims (else the
    first to arrive would refuse its own main process)."""
    from rambo.harness.claim import claim_job_folder, held

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    claim_job_folder(str(tmp_path), "mine seed 0")
    assert held(tmp_path) is None and list(tmp_path.iterdir()) == []
