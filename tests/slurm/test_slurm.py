"""The cluster path against a real SLURM (``make test-slurm``): jobs submitted through the
apps' documented launcher config (``hydra/launcher=slurm``, resources overridden for a CPU node),
the tables made from them, the pipeline with SLURM as its launcher, preemption, a time limit, one
run on two SLURM tasks, and two jobs given one folder. Every job is a real ``sbatch`` of the real
app, scheduled by the real ``slurmctld`` and run by the real ``slurmd`` of :mod:`cluster`.

Each test prints what it measured (``-s`` shows it; ``make test-slurm`` passes it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rambo.ablations import paper_smoke

slurm_cluster = sys.modules["slurm_cluster"]  # loaded by this folder's conftest.py
BIN, CPU_NODE, DETECTION_TINY, REPO = (
    slurm_cluster.BIN,
    slurm_cluster.CPU_NODE,
    slurm_cluster.DETECTION_TINY,
    slurm_cluster.REPO,
)
environment, run = slurm_cluster.environment, slurm_cluster.run

pytestmark = pytest.mark.slurm

RETRIEVAL = [
    "experiment=synthetic_log",
    "profile=tiny",
    "threads=1",
    "progress=false",
    "data_dir=data/retrieval",
    "resume=auto",
    "hydra.sweep.subdir=seed${seed}",
]
QUICK = [*RETRIEVAL, "epochs=300", "eval_every=100000"]  # a few seconds of training
# About two and a half minutes of training in 160 epochs: long enough to be preempted, or signalled
# at a time limit, mid-run (after five epochs; the tests send the signal themselves, since SLURM's
# timer sends it "up to 60 seconds earlier than specified"). Two DataLoader workers: forked
# processes that must leave SLURM's signals to the training process (rambo.harness.workers,
# rambo.harness.scheduler_signals).
LONG = [*RETRIEVAL, "epochs=160", "eval_every=100000", "model.width=32", "image_size=64", "num_workers=2"]


def train(app: str) -> list[str]:
    return [sys.executable, "-m", f"rambo.{app}.train"]


def sweep(cluster, cwd, app, overrides, check=True, timeout=900):
    """A Hydra multirun of ``app`` through the SLURM launcher; waits for its jobs."""
    return run(cluster, [*train(app), "-m", *CPU_NODE, *overrides], cwd, timeout=timeout, check=check)


def results(path: Path) -> dict:
    """A run's metrics without the provenance (the machine of the invocation that finished it)."""
    metrics = json.loads(Path(path).read_text())
    metrics.pop("provenance", None)
    return metrics


def job_logs(sweep_dir: Path) -> dict[str, str]:
    """submitit's log files of a sweep: ``{name: text}`` (one out and one err file per job and task)."""
    return {path.name: path.read_text(errors="replace") for path in sorted((sweep_dir / ".submitit").rglob("*_log.*"))}


def job_ids(sweep_dir: Path) -> list[str]:
    """The SLURM job ids of a sweep (``123`` for one job, ``123_0`` for a task of an array)."""
    return sorted(path.name for path in (sweep_dir / ".submitit").iterdir() if re.fullmatch(r"\d+(_\d+)?", path.name))


def job_field(cluster, job: str, name: str) -> str:
    """One field of ``scontrol show job`` (e.g. ``JobState``, ``Restarts``)."""
    shown = subprocess.run(["scontrol", "show", "job", job], env=cluster.env, capture_output=True, text=True).stdout
    found = re.search(rf"\b{name}=(\S+)", shown)
    assert found, shown
    return found.group(1)


def restarts(cluster, job: str) -> int:
    return int(job_field(cluster, job, "Restarts"))


@pytest.fixture(scope="module")
def quick_runs(cluster, shared):
    """Seeds 0 and 1 of a retrieval row swept through SLURM into the tables' layout (sub-test a)."""
    started = time.time()
    sweep(
        cluster,
        shared,
        "retrieval",
        [*QUICK, "seed=0,1", "hydra.sweep.dir=results/tiny/runs/retrieval/${experiment_name}"],
    )
    seconds = time.time() - started
    runs = {
        seed: results(shared / "results/tiny/runs/retrieval/synthetic_log" / f"seed{seed}" / "metrics.json")
        for seed in (0, 1)
    }
    return runs, seconds


def start_reference(cluster, shared, overrides, name):
    """An uninterrupted local run of ``overrides`` (seed 0) in the background; returns (process, its
    metrics getter)."""
    out = shared / name
    log = open(shared / f"{name}.log", "w")
    process = subprocess.Popen(
        [*train("retrieval"), *overrides, "seed=0", f"output_dir={out}", f"hydra.run.dir={out}"],
        cwd=shared,
        env=environment(cluster),
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def metrics() -> dict:
        process.wait(timeout=1200)
        assert process.returncode == 0, (shared / f"{name}.log").read_text()[-3000:]
        return results(out / "metrics.json")

    return process, metrics


@pytest.fixture(scope="module")
def long_reference(cluster, shared):
    """The LONG run of seed 0, uninterrupted, in its own process (started once, in the background)."""
    process, metrics = start_reference(cluster, shared, LONG, "reference_long")
    yield metrics
    if process.poll() is None:
        process.kill()


def test_a_sweep_of_each_app_fills_the_tables_layout_and_make_tables_reads_it(cluster, shared, quick_runs):
    runs, retrieval_seconds = quick_runs
    assert [runs[seed]["seed"] for seed in (0, 1)] == [0, 1]
    logs = job_logs(shared / "results/tiny/runs/retrieval/synthetic_log")
    assert len([name for name in logs if name.endswith("_log.out")]) == 2  # two SLURM jobs, one per seed
    started = time.time()
    sweep(
        cluster,
        shared,
        "detection",
        [
            "experiment=mini_ce",
            "init_checkpoint=null",
            *DETECTION_TINY,
            "threads=1",
            "progress=false",
            "data_dir=data/detection",
            "resume=auto",
            "seed=0,1",
            "hydra.sweep.dir=results/tiny/runs/detection/${experiment_name}",
            "hydra.sweep.subdir=seed${seed}",
        ],
    )
    detection_seconds = time.time() - started
    for seed in (0, 1):
        assert results(shared / "results/tiny/runs/detection/mini_ce" / f"seed{seed}" / "metrics.json")["seed"] == seed

    params = yaml.safe_load((REPO / "ablations/profiles/tiny.yaml").read_text())  # the tiny profile, these two rows
    params["seeds"] = "0,1"
    params["tables"]["runs"] = {"retrieval/sop/rambo_recall_log": "synthetic_log", "detection/r50_07/ce": "mini_ce"}
    params["retrieval"].update(experiments=["synthetic_log"], ablations=[])  # the rows trained: each fills a cell
    params["detection"].update(experiments=["mini_ce"], ablations=[])
    (shared / "params.yaml").write_text(yaml.safe_dump(params))
    run(
        cluster,
        [
            sys.executable,
            "-m",
            "rambo.ablations.tables",
            "--runs",
            "results/tiny/runs",
            "--params",
            "params.yaml",
            "--out",
            "results/tiny/tables",
            "--wandb-mode",
            "disabled",
        ],
        shared,
    )
    text = (shared / "results/tiny/tables/tables.md").read_text()
    table_2 = next(line for line in text.splitlines() if line.startswith("| RaMBO log"))
    table_5 = next(line for line in text.splitlines() if line.startswith("| ") and "CE" in line and "±" in line)
    assert "±" in table_2 and "not run" not in table_2.split("|")[2], table_2
    print(
        f"\n(a) sweeps through SLURM: retrieval 2 seeds {retrieval_seconds:.0f} s, detection 2 seeds "
        f"{detection_seconds:.0f} s; make tables: {table_2[:80]} / {table_5[:80]}"
    )


def test_the_pipeline_with_slurm_as_its_launcher_makes_the_tables_of_the_local_launcher(cluster, tmp_path):
    """DVC drives, SLURM runs (params.yaml's ``launcher``): the tiny profile's pipeline, once with the
    local launcher and once with SLURM's; every table and every run's metrics are equal bit for bit
    apart from the runs' provenance. (The tables name the machines and thread counts of their runs:
    equal too, since a run under SLURM takes its task's CPUs as its threads, as the local launcher's
    workers run one thread each.)"""
    repos, seconds = {}, {}
    for name, launcher in (("local", None), ("slurm", " ".join(CPU_NODE))):
        repo = paper_smoke.copy_repository(tmp_path / name, "tiny")
        if launcher:
            params = (repo / "params.yaml").read_text()
            params, count = re.subn(r"(?m)^launcher: .*$", f"launcher: {launcher}", params)
            assert count == 1
            (repo / "params.yaml").write_text(params)
        started = time.time()
        run(cluster, [str(BIN / "dvc"), "repro"], repo, timeout=1800)
        seconds[name], repos[name] = time.time() - started, repo
    slurm_jobs = list((repos["slurm"] / "results/tiny/runs").rglob(".submitit"))
    assert slurm_jobs and not list((repos["local"] / "results/tiny/runs").rglob(".submitit"))  # SLURM ran the runs
    tables = sorted(
        path.relative_to(repos["local"]) for path in (repos["local"] / "results/tiny/tables").glob("*.json")
    )
    assert tables
    for table in tables:
        assert (repos["slurm"] / table).read_bytes() == (repos["local"] / table).read_bytes(), table
    runs = sorted(
        path.relative_to(repos["local"]) for path in (repos["local"] / "results/tiny/runs").rglob("metrics.json")
    )
    for metrics in runs:
        assert results(repos["slurm"] / metrics) == results(repos["local"] / metrics), metrics
    print(
        f"\n(b) tiny pipeline: local launcher {seconds['local']:.0f} s, SLURM launcher {seconds['slurm']:.0f} s; "
        f"{len(tables)} tables and {len(runs)} runs' metrics equal"
    )


def test_a_run_requeued_while_it_trains_resumes_to_the_metrics_of_an_uninterrupted_run(cluster, shared, long_reference):
    sweep_dir = shared / "preempted"
    started = time.time()
    launcher_log = open(shared / "preempted.log", "w")  # a file, not a pipe nobody reads while it runs
    process = subprocess.Popen(
        [*train("retrieval"), "-m", *CPU_NODE, *LONG, "seed=0", f"hydra.sweep.dir={sweep_dir}"],
        cwd=shared,
        env=environment(cluster),
        stdout=launcher_log,
        stderr=subprocess.STDOUT,
    )
    curve = sweep_dir / "seed0" / "curve.json"
    while not (curve.exists() and len(json.loads(curve.read_text() or "[]")) >= 5):  # mid-run: 5 of 160 epochs done
        assert process.poll() is None, (shared / "preempted.log").read_text()[-3000:]
        assert time.time() - started < 600
        time.sleep(0.5)
    (job,) = job_ids(sweep_dir)
    subprocess.run(["scontrol", "requeue", job], env=cluster.env, check=True, capture_output=True)
    requeued_at = time.time() - started
    process.wait(timeout=900)
    launcher_said = (shared / "preempted.log").read_text()
    assert process.returncode == 0, launcher_said[-3000:]  # no failure reached the launcher, whatever the workers did
    assert restarts(cluster, job) == 1
    log = "".join(job_logs(sweep_dir).values())
    resumed = re.findall(r"resuming \S+ from epoch (\d+)", log)
    assert resumed and int(resumed[-1]) >= 5, log[-3000:]
    assert results(sweep_dir / "seed0" / "metrics.json") == long_reference()
    print(
        f"\n(c) preemption: scontrol requeue at {requeued_at:.0f} s; resumed from epoch {resumed[-1]} of 160; finished at "
        f"{time.time() - started:.0f} s with the metrics of the uninterrupted run"
    )


def test_a_job_signalled_at_its_time_limit_is_requeued_and_finishes_with_the_same_metrics(
    cluster, shared, long_reference
):
    """SLURM's time-limit signal, sent the way SLURM sends it (``USR2`` to the job's steps, as the
    job's ``#SBATCH --signal=USR2@...`` asks) once the run has checkpointed five epochs: submitit's
    timeout path (checkpoint, ``scontrol requeue``, exit) requeues the job, which resumes from its
    last epoch checkpoint. Sent by the test, not by SLURM's timer, so the outcome does not depend
    on the timer's phase."""
    sweep_dir = shared / "timed_out"
    started = time.time()
    launcher_log = open(shared / "timed_out.log", "w")
    process = subprocess.Popen(
        [*train("retrieval"), "-m", *CPU_NODE, *LONG, "seed=0", f"hydra.sweep.dir={sweep_dir}"],
        cwd=shared,
        env=environment(cluster),
        stdout=launcher_log,
        stderr=subprocess.STDOUT,
    )
    curve = sweep_dir / "seed0" / "curve.json"
    while not (curve.exists() and len(json.loads(curve.read_text() or "[]")) >= 5):
        assert process.poll() is None, (shared / "timed_out.log").read_text()[-3000:]
        assert time.time() - started < 600
        time.sleep(0.5)
    (job,) = job_ids(sweep_dir)
    (script,) = (sweep_dir / ".submitit").rglob("*_submission.sh")
    assert re.search(r"(?m)^#SBATCH --signal=USR2@\d+$", script.read_text()), script.read_text()
    subprocess.run(["scancel", "--signal=USR2", job], env=cluster.env, check=True, capture_output=True)
    signalled_at = time.time() - started
    process.wait(timeout=900)
    assert process.returncode == 0, (shared / "timed_out.log").read_text()[-3000:]
    log = "".join(job_logs(sweep_dir).values())
    assert re.search(r"Caught signal SIGUSR2 on \S+: this job is timed-out", log), log[-3000:]
    assert restarts(cluster, job) == 1
    resumed = re.findall(r"resuming \S+ from epoch (\d+)", log)
    assert len(resumed) == 1 and int(resumed[0]) >= 5, log[-3000:]
    # The training process alone handled the signal (DataLoader workers ignore it: rambo.harness.workers)
    caught = set(re.findall(r"(?m)^submitit WARNING .* Caught signal SIGUSR2", log))  # in the out and err logs
    assert len(caught) == 1 and "Traceback" not in log, log[-3000:]
    assert results(sweep_dir / "seed0" / "metrics.json") == long_reference()
    print(
        f"\n(d) time limit: USR2 at {signalled_at:.0f} s; requeued once, resumed from epoch {resumed[0]} of 160; "
        f"finished at {time.time() - started:.0f} s with the metrics of the uninterrupted run"
    )


def job_processes(marker: str) -> list[int]:
    """The processes of this host running submitit's job entry with ``marker`` in their command line."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if (
            b"submitit.core._submit" in command
            and Path(command[0].decode()).name != "srun"  # srun's command line names it too
            and any(marker.encode() in part for part in command)
        ):
            found.append(int(entry.name))
    return found


def caught_signals(pid: int) -> set[int]:
    """The signals process ``pid`` has a handler for (``SigCgt`` of /proc/PID/status)."""
    status = (Path("/proc") / str(pid) / "status").read_text()
    mask = int(re.search(r"(?m)^SigCgt:\s*([0-9a-f]+)$", status).group(1), 16)
    return {number for number in range(1, 65) if mask & (1 << (number - 1))}


def test_a_time_limit_signal_while_the_job_starts_requeues_it(cluster, shared):
    """The startup window: a ``USR2`` that reaches the job after its process started and before
    submitit installed its handlers (seen with short limits: exit 140, the job lost) waits for
    them (rambo.harness.scheduler_signals) and requeues the job. The test stops the job's process
    where its signals are held and submitit's handlers do not exist yet (``SIGCONT`` not caught),
    signals it, and lets it go on."""
    sweep_dir = shared / "signalled_at_start"
    reference, reference_metrics = start_reference(cluster, shared, QUICK, "reference_quick")
    launcher_log = open(shared / "signalled_at_start.log", "w")
    process = subprocess.Popen(
        [*train("retrieval"), "-m", *CPU_NODE, *QUICK, "seed=0", f"hydra.sweep.dir={sweep_dir}"],
        cwd=shared,
        env=environment(cluster),
        stdout=launcher_log,
        stderr=subprocess.STDOUT,
    )
    held = {signal.SIGTERM, signal.SIGUSR2}
    while True:  # the job's process, once its signals are held (the first rambo.harness import)
        assert process.poll() is None, (shared / "signalled_at_start.log").read_text()[-3000:]
        pids = job_processes(str(sweep_dir))
        try:
            if pids and held <= caught_signals(pids[0]):
                break
        except (OSError, AttributeError):
            pass
        time.sleep(0.02)
    (pid,) = pids
    os.kill(pid, signal.SIGSTOP)
    try:
        state = caught_signals(pid)
        assert held <= state and signal.SIGCONT not in state, "submitit's handlers exist already"
        os.kill(pid, signal.SIGUSR2)
    finally:
        os.kill(pid, signal.SIGCONT)
    process.wait(timeout=900)
    assert process.returncode == 0, (shared / "signalled_at_start.log").read_text()[-3000:]
    (job,) = job_ids(sweep_dir)
    log = "".join(job_logs(sweep_dir).values())
    assert "SIGUSR2 came while the job was starting, before its handlers existed: handled now" in log, log[-3000:]
    assert re.search(r"Caught signal SIGUSR2 on \S+: this job is timed-out", log), log[-3000:]
    assert restarts(cluster, job) == 1
    assert results(sweep_dir / "seed0" / "metrics.json") == reference_metrics()
    print("\n(d) a USR2 while the job starts: held until submitit's handler exists, then requeued; metrics equal")


def test_one_run_on_two_slurm_tasks_equals_the_two_process_torchrun_run(cluster, shared):
    base = [
        "experiment=synthetic_log",
        "profile=tiny",
        "threads=1",
        "progress=false",
        "data_dir=data/retrieval",
        "seed=0",
    ]
    sweep_dir = shared / "two_tasks"
    started = time.time()
    sweep(
        cluster,
        shared,
        "retrieval",
        [*base, f"hydra.sweep.dir={sweep_dir}", "hydra.sweep.subdir=seed0", "hydra.launcher.tasks_per_node=2"],
    )
    seconds = time.time() - started
    log = "".join(job_logs(sweep_dir).values())
    assert "process 0 of 2 (rank from slurm" in log and "process 1 of 2 (rank from slurm" in log, log[-3000:]
    out = shared / "torchrun"
    run(
        cluster,
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "rambo.retrieval.train",
            *base,
            f"output_dir={out}",
            f"hydra.run.dir={out}",
        ],
        shared,
    )
    assert results(sweep_dir / "seed0" / "metrics.json") == results(out / "metrics.json")
    # What launched each, in its provenance: the metrics agree, and differ from one process's.
    by_slurm = json.loads((sweep_dir / "seed0" / "metrics.json").read_text())["provenance"]["launch"]
    assert by_slurm["launcher"] == "slurm" and by_slurm["processes"] == 2 and by_slurm["slurm"]["job_id"], by_slurm
    assert json.loads((out / "metrics.json").read_text())["provenance"]["launch"] == {
        "launcher": "torchrun",
        "processes": 2,
    }
    print(
        f"\n(e) one run on two SLURM tasks (srun, gloo) in {seconds:.0f} s: ranks from SLURM_PROCID/SLURM_NTASKS; "
        "metrics equal the two-process torchrun run's"
    )


def test_two_jobs_given_one_output_folder_one_trains_and_the_other_stops_at_once(cluster, shared, quick_runs):
    runs, _ = quick_runs
    folder = shared / "one_folder"
    sweep_dir = shared / "collide"
    started = time.time()
    done = sweep(
        cluster,
        shared,
        "retrieval",
        [*QUICK, "seed=0,1", f"output_dir={folder}", f"hydra.sweep.dir={sweep_dir}"],
        check=False,
    )
    seconds = time.time() - started
    assert done.returncode != 0 and "is claimed by run" in done.stderr  # the multirun reports the refused job
    found = job_logs(sweep_dir)
    logs = {  # each job's stdout and stderr: the refusal is one `error:` line on stderr (exit code 2)
        name: text + found.get(name.removesuffix(".out") + ".err", "")
        for name, text in found.items()
        if name.endswith("_log.out")
    }
    errors = [text for text in logs.values() if "error: " in text and "is claimed by run" in text]
    assert len(logs) == 2 and len(errors) == 1, list(found)
    (refused,) = errors
    assert "epoch 1/" not in refused  # it stopped before training
    assert str(folder) in refused and re.search(r"claimed by run 'synthetic_log seed [01]'", refused), refused[-2000:]
    winner = results(folder / "metrics.json")
    loser_seed = 1 - winner["seed"]
    assert (
        f"synthetic_log seed {winner['seed']}'" in refused
        and f"this run ('synthetic_log seed {loser_seed}')" in refused
    )
    assert winner == runs[winner["seed"]]  # nothing of the first touched: the metrics of its own uninterrupted run
    assert not list(folder.glob("*.stale")) and not list(folder.glob(".rambo-run.claim*"))
    print(
        f"\n(f) two jobs, one folder: seed {winner['seed']} trained, seed {loser_seed} refused with the folder and "
        f"the holder named; {seconds:.0f} s"
    )
