"""A real single-node SLURM cluster on this host, for ``make test-slurm``: Debian's ``munged``,
``slurmctld`` and ``slurmd``, configured in a folder of their own (``SLURM_CONF``), started as
processes this module owns and stopped by their process ids.

    python tests/slurm/slurm_cluster.py FOLDER      # start one by hand; Ctrl-C stops it

Nothing outside FOLDER is touched: the munge key, sockets, state, spool, logs and pid files live
there, the daemons run in the foreground as children of this process, and ``SLURM_CONF`` (and
munge's socket, named in ``AuthInfo``) is passed only to the commands of the tests. The node
declares more CPUs than this machine has (``SlurmdParameters=config_overrides``), so that several
jobs of one CPU each run at once on a 2-core machine, as GPU jobs on a cluster node would.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# The apps' configs/hydra/launcher/slurm.yaml, with the resources of a CPU node of this test cluster.
CPU_NODE = [
    "hydra/launcher=slurm",
    "hydra.launcher.gpus_per_node=null",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
    "hydra.launcher.timeout_min=10",
]
DETECTION_TINY = ["data=tiny", "model=tiny", "profile=tiny"]
INSTALL = "apt-get install slurm-wlm munge"


def missing() -> list[str]:
    """The daemons and commands not installed on this machine."""
    return [name for name in (*DAEMONS, "sbatch", "srun", "scontrol", "squeue") if shutil.which(name) is None]


def install_if_missing() -> str | None:
    """Install Debian's slurm-wlm and munge when missing and this process may (root, apt-get);
    returns ``None`` when everything is there, else why not (what to install)."""
    if not missing():
        return None
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (
            ["apt-get", "update", "-q"],
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "slurm-wlm", "munge"],
        ):
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode:
                return f"`{' '.join(command)}` failed: {done.stderr[-500:]}"
        return None if not missing() else f"still missing after installing: {missing()}"
    return f"SLURM is not installed ({', '.join(missing())} missing): install it with `sudo {INSTALL}`"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_conf(folder: Path, host: str, cpus: int, memory_mb: int) -> str:
    return (
        "\n".join(
            [
                "ClusterName=rambo-test",
                f"SlurmctldHost={host}",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"SlurmctldPort={free_port()}",
                f"SlurmdPort={free_port()}",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={folder / 'munge.socket'},cred_expire=10",
                f"StateSaveLocation={folder / 'state'}",
                f"SlurmdSpoolDir={folder / 'spool'}",
                f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
                f"SlurmdPidFile={folder / 'slurmd.pid'}",
                f"SlurmctldLogFile={folder / 'slurmctld.log'}",
                f"SlurmdLogFile={folder / 'slurmd.log'}",
                "SlurmctldDebug=info",
                "SlurmdDebug=info",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "MpiDefault=none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "SchedulerType=sched/backfill",
                "AccountingStorageType=accounting_storage/none",
                "JobAcctGatherType=jobacct_gather/none",
                "JobCompType=jobcomp/none",
                "ReturnToService=2",
                "SlurmdParameters=config_overrides",
                "KillWait=5",
                "MinJobAge=600",
                "InactiveLimit=0",
                "Waittime=0",
                "SlurmdTimeout=60",
                "JobRequeue=1",
                "MaxJobCount=1000",
                f"NodeName={host} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO",
            ]
        )
        + "\n"
    )


class Cluster:
    """``start()`` the three daemons in ``folder``; ``env`` is what a client command needs;
    ``stop()`` ends them by their process ids (SIGTERM, then SIGKILL)."""

    def __init__(self, folder: str | Path, cpus: int = 8, memory_mb: int = 16000):
        self.folder = Path(folder).absolute()
        self.host = socket.gethostname().split(".")[0]
        self.cpus, self.memory_mb = cpus, memory_mb
        self.processes: dict[str, subprocess.Popen] = {}
        self.env = {**os.environ, "SLURM_CONF": str(self.folder / "slurm.conf")}

    def start(self, timeout: float = 60) -> Cluster:
        for part in ("state", "spool", "munge"):
            (self.folder / part).mkdir(parents=True, exist_ok=True)
        key = self.folder / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        os.chmod(self.folder / "munge", 0o700)
        os.chmod(key, 0o400)
        (self.folder / "slurm.conf").write_text(slurm_conf(self.folder, self.host, self.cpus, self.memory_mb))
        try:
            self._spawn(
                "munged",
                [
                    "munged",
                    "--foreground",
                    "--force",
                    f"--key-file={key}",
                    f"--socket={self.folder / 'munge.socket'}",
                    f"--pid-file={self.folder / 'munge' / 'munged.pid'}",
                    f"--log-file={self.folder / 'munged.log'}",
                    f"--seed-file={self.folder / 'munge' / 'munged.seed'}",
                ],
            )
            self._wait(lambda: (self.folder / "munge.socket").exists(), timeout, "munged's socket")
            self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.folder / "slurm.conf")])
            self._wait(lambda: self._ok(["scontrol", "ping"], "UP"), timeout, "slurmctld to answer")
            self._spawn("slurmd", ["slurmd", "-D", "-N", self.host, "-f", str(self.folder / "slurm.conf")])
            self._wait(lambda: self._ok(["sinfo", "-h", "-o", "%T"], "idle"), timeout, "the node to be idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, command: list[str]) -> None:
        log = open(self.folder / f"{name}.out", "ab")
        self.processes[name] = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )

    def _ok(self, command: list[str], expected: str) -> bool:
        done = subprocess.run(command, env=self.env, capture_output=True, text=True)
        return done.returncode == 0 and expected in done.stdout

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.time() + timeout
        while not ready():
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with {process.returncode}: {self.log(name)}")
            if time.time() > deadline:
                raise TimeoutError(f"waited {timeout} s for {what}: {self.log('slurmctld')} {self.log('slurmd')}")
            time.sleep(0.2)

    def log(self, name: str, tail: int = 2000) -> str:
        text = ""
        for suffix in (".out", ".log"):
            path = self.folder / f"{name}{suffix}"
            if path.exists():
                text += path.read_text(errors="replace")[-tail:]
        return text

    def stop(self) -> None:
        """End every daemon this object started, by its process id, slurmd first."""
        for name in reversed(list(self.processes)):
            process = self.processes[name]
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=15)
        self.processes.clear()


def environment(cluster: Cluster) -> dict:
    """What a command of the tests runs with: the cluster's ``SLURM_CONF``, the venv first on PATH."""
    return {
        **cluster.env,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "WANDB_MODE": "disabled",
        "PYTHONUNBUFFERED": "1",
    }


def run(cluster: Cluster, args, cwd, timeout=900, check=True) -> subprocess.CompletedProcess:
    """Run a command against the cluster; with ``check``, fail with its output unless it exits 0."""
    done = subprocess.run(args, cwd=cwd, env=environment(cluster), capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"{' '.join(map(str, args))} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


if __name__ == "__main__":
    why = install_if_missing()
    if why:
        sys.exit(why)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the daemons on SIGTERM too
    cluster = Cluster(sys.argv[1]).start()
    print(
        f"export SLURM_CONF={cluster.env['SLURM_CONF']}   # up: {cluster.host}, {cluster.cpus} CPUs; Ctrl-C stops it",
        flush=True,
    )
    try:
        signal.pause()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        cluster.stop()
