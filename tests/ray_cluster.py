"""A throwaway Ray cluster on this machine for tests: `ray start --head` with the dashboard (the
Jobs API), its own temp dir and ports, stopped at the end. Its processes are children of one
blocking `ray start`, in their own session, so stopping it leaves any other Ray here alone."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def ray_cluster(cpus: int = 4) -> Iterator[dict[str, str]]:
    """Yields an environment whose RAY_ADDRESS is the cluster's Jobs API, and whose PATH starts
    with this interpreter's folder (a job's entrypoint finds `tianfeng` as a user's venv gives it)."""
    from ray.job_submission import JobSubmissionClient

    temp = Path(tempfile.mkdtemp(prefix="tianfeng-ray-", dir="/tmp"))  # Ray's socket paths must stay short
    dashboard = _free_port()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "RAY_USAGE_STATS_ENABLED": "0",
           # no token authentication: Ray would turn it on, and want the token from every client,
           # because an earlier local ray.init() left one in ~/.ray
           "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    log = (temp / "head.log").open("w")
    head = subprocess.Popen(
        [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", f"--port={_free_port()}",
         "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
         f"--num-cpus={cpus}", "--num-gpus=0", f"--temp-dir={temp}", "--disable-usage-stats"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if head.poll() is not None:
                raise RuntimeError(f"ray start --head exited {head.returncode}: "
                                   f"{(temp / 'head.log').read_text()[-2000:]}")
            with suppress(Exception):
                JobSubmissionClient(address).list_jobs()
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Ray head's Jobs API never answered at {address}")
            time.sleep(1)
        yield env | {"RAY_ADDRESS": address}
    finally:
        with suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGTERM)  # `ray start --block` stops what it started
        with suppress(subprocess.TimeoutExpired):
            head.wait(timeout=60)
        with suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        head.wait()
        log.close()
