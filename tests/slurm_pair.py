"""A throwaway two-node Slurm for tests: each slurmd in a network namespace of its own (its own
address on a bridge, its own host name), so that a job's two nodes talk over a network, as a
cluster's do, not over one loopback. munged and slurmctld run in this machine's namespace and
reach the nodes over the bridge; each node's /etc/hosts (/etc/netns/NAME/hosts, bind-mounted in a
mount namespace of its own) names both nodes, so torchrun's rendezvous and gloo find each other by name. Needs root, `ip`
and Debian's slurm-wlm and munge; everything it adds is removed at the end."""

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

from tests.slurm import _free_port, _which, daemon_settings

SUBNET = "10.77.31"  # the bridge's /24: .1 this machine, .11 and .12 the nodes


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _conf(d: Path, host: str, nodes: list[str], ports: tuple[int, int]) -> str:
    return "\n".join([
        *daemon_settings(d, "tianfengpair", f"{host}({SUBNET}.1)", ports, node="-%n"),
        *(f"NodeName={n} NodeAddr={SUBNET}.{11 + i} NodeHostname={n} CPUs=1 State=UNKNOWN"
          for i, n in enumerate(nodes)),
        f"PartitionName=pair Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP", ""])


@contextmanager
def slurm_pair() -> Iterator[dict[str, str]]:
    """Yields the environment (SLURM_CONF set) in which sbatch and scontrol reach the two nodes."""
    if os.geteuid() != 0:
        raise PermissionError("the two-node test Slurm configures network namespaces as root")
    tag = f"{os.getpid() % 10000:04d}"
    nodes, bridge = [f"tfa{tag}", f"tfb{tag}"], f"tfbr{tag}"
    d = Path(tempfile.mkdtemp(prefix="tianfeng-slurm-pair-"))
    d.chmod(0o755)
    for sub in ("state", "log", "munge", *(f"spool-{n}" for n in nodes)):
        (d / sub).mkdir()
    shutil.chown(d / "munge", "munge", "munge")
    conf = d / "slurm.conf"
    host = socket.gethostname().split(".")[0]
    conf.write_text(_conf(d, host, nodes, (_free_port(), _free_port())))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    hosts = "".join(f"{SUBNET}.{11 + i} {n}\n" for i, n in enumerate(nodes)) + f"{SUBNET}.1 {host}\n127.0.0.1 localhost\n"
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{SUBNET}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i, node in enumerate(nodes):
            etc = Path("/etc/netns") / node
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts)
            _ip("netns", "add", node)
            _ip("link", "add", f"tfv{i}{tag}", "type", "veth", "peer", "name", f"tfp{i}{tag}")
            _ip("link", "set", f"tfp{i}{tag}", "netns", node)
            _ip("link", "set", f"tfv{i}{tag}", "master", bridge, "up")
            for args in (("link", "set", "lo", "up"), ("link", "set", f"tfp{i}{tag}", "name", "eth0"),
                         ("addr", "add", f"{SUBNET}.{11 + i}/24", "dev", "eth0"), ("link", "set", "eth0", "up")):
                _ip("netns", "exec", node, "ip", *args)
        def run(*cmd: str) -> None:
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if out.returncode:
                raise RuntimeError(f"{' '.join(cmd)}: exit {out.returncode}: {out.stderr.strip()[-2000:]}")

        run("runuser", "-u", "munge", "--", _which("munged"), f"--socket={d}/munge/munge.socket",
            f"--pid-file={d}/munge/munged.pid", f"--log-file={d}/munge/munged.log", f"--seed-file={d}/munge/seed")
        run(_which("slurmctld"), "-f", str(conf), "-i")
        for node in nodes:  # its own host name too (a UTS namespace), as a cluster node has
            try:
                # nsenter, not `ip netns exec`: that remounts /sys, without the cgroups slurmd needs
                run("nsenter", f"--net=/run/netns/{node}", "unshare", "--uts", "--mount", "sh", "-c",
                    f"mount --bind /etc/netns/{node}/hosts /etc/hosts && hostname {node} && "
                    f"exec {_which('slurmd')} -f {conf} -N {node}")
            except RuntimeError as exc:
                log = d / "log" / f"slurmd-{node}.log"
                raise RuntimeError(f"{exc}; its log: {log.read_text()[-1500:] if log.exists() else 'none'}") from None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%t"], capture_output=True, text=True,
                                   env=env)
            if state.stdout.split() == ["idle", "idle"]:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("the two test Slurm nodes never came up: "
                               f"{(d / 'log' / 'slurmctld.log').read_text()[-2000:]}")
        yield {**env, "TIANFENG_TEST_NODES": ",".join(nodes)}
    finally:
        subprocess.run(["scancel", "--user=root", "--full"], capture_output=True, env=env)
        time.sleep(1)
        subprocess.run(["scontrol", "shutdown"], capture_output=True, env=env)
        for pid_file in (*(d / f"slurmd-{n}.pid" for n in nodes), d / "slurmctld.pid", d / "munge" / "munged.pid"):
            with suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), 15)
        time.sleep(0.5)
        for node in nodes:
            subprocess.run(["ip", "netns", "del", node], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / node, ignore_errors=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)
