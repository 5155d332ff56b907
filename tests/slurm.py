"""A throwaway Slurm cluster on this machine for tests: munged, slurmctld and one slurmd with
the machine's CPUs, each with its own socket, ports, state and logs in a temp dir, stopped at
the end. Needs Debian's slurm-wlm and munge (installed by scripts/setup.sh --dev) and root (the
daemons run as root here). No accounting daemon: jobs are watched through scontrol, and
MinJobAge keeps finished jobs visible for an hour."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _which(name: str) -> str:
    for folder in ("/usr/sbin", "/usr/bin"):
        if Path(folder, name).exists():
            return str(Path(folder, name))
    raise FileNotFoundError(f"Slurm's {name} is not installed: run `bash scripts/setup.sh --dev` "
                            "(it installs Debian's slurm-wlm and munge)")


REQUEUE_WAIT_S = 20


def daemon_settings(d: Path, name: str, controller: str, ports: tuple[int, int], node: str = "") -> list[str]:
    """The slurm.conf lines every test cluster shares: its controller at `controller` (host(addr)),
    munge, root daemons, state, logs and pid files in `d` (`node` a per-node suffix such as -%n),
    cons_tres without cgroups, no accounting, finished jobs kept an hour, and a requeued job held
    REQUEUE_WAIT_S before it starts again (Slurm's default is the credentials' 120 s lifetime)."""
    return [
        f"ClusterName={name}", f"SlurmctldHost={controller}", f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}", "AuthType=auth/munge", f"AuthInfo=socket={d}/munge/munge.socket,cred_expire={REQUEUE_WAIT_S}",
        "CredType=cred/munge", "SlurmUser=root", "SlurmdUser=root", f"StateSaveLocation={d}/state",
        f"SlurmdSpoolDir={d}/spool{node}", f"SlurmctldPidFile={d}/slurmctld.pid", f"SlurmdPidFile={d}/slurmd{node}.pid",
        f"SlurmctldLogFile={d}/log/slurmctld.log", f"SlurmdLogFile={d}/log/slurmd{node}.log",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "MpiDefault=none", "ReturnToService=2",
        "MinJobAge=3600", "SchedulerType=sched/backfill", "SlurmctldTimeout=30", "SlurmdTimeout=30"]


def _conf(d: Path, host: str, cpus: int, ports: tuple[int, int]) -> str:
    return "\n".join([
        *daemon_settings(d, "tianfengtests", f"{host}(127.0.0.1)", ports),
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
        # a node of another machine that never answers: what a SQLite search must not be sent to
        "NodeName=far1 NodeAddr=127.0.0.2 CPUs=1 State=DOWN", "PartitionName=far Nodes=far1 State=UP", ""])


@contextmanager
def slurm_cluster() -> Iterator[dict[str, str]]:
    """Yields the environment (SLURM_CONF set) in which sbatch, squeue and scontrol reach it."""
    if os.geteuid() != 0:
        raise PermissionError("the test Slurm cluster runs its daemons as root")
    d = Path(tempfile.mkdtemp(prefix="tianfeng-slurm-"))
    d.chmod(0o755)
    for sub in ("state", "spool", "log", "munge"):
        (d / sub).mkdir()
    shutil.chown(d / "munge", "munge", "munge")
    host = socket.gethostname().split(".")[0]
    conf = d / "slurm.conf"
    conf.write_text(_conf(d, host, os.cpu_count() or 1, (_free_port(), _free_port())))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)  # noqa: E731
    run("runuser", "-u", "munge", "--", _which("munged"), f"--socket={d}/munge/munge.socket",
        f"--pid-file={d}/munge/munged.pid", f"--log-file={d}/munge/munged.log", f"--seed-file={d}/munge/seed")
    try:
        run(_which("slurmctld"), "-f", str(conf), "-i")
        run(_which("slurmd"), "-f", str(conf))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "--noheader", "--format=%t"], capture_output=True, text=True, env=env)
            if state.stdout.strip() == "idle":
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"the test Slurm node never came up: {(d / 'log' / 'slurmctld.log').read_text()[-2000:]}")
        yield env
    finally:
        # a test that failed mid-job leaves it running: end every job before the daemons
        subprocess.run(["scancel", "--user=root", "--full"], capture_output=True, env=env)
        time.sleep(1)
        subprocess.run(["scontrol", "shutdown"], capture_output=True, env=env)
        for pid_file in (d / "slurmd.pid", d / "slurmctld.pid", d / "munge" / "munged.pid"):
            with suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), 15)
        time.sleep(0.5)
        shutil.rmtree(d, ignore_errors=True)
