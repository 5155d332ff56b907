"""Communication hooks with real gloo processes under torchrun (4 ranks as 2 nodes x 2)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("hook_worker.py")
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nproc: int, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
                           f"--master-port={free_port()}", *args], capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.slow
def test_hierarchical_equals_flat_and_sends_a_local_size_share_across_nodes(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    run = torchrun(4, str(WORKER), str(out), "2")
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["nodes"] == 2
    assert result["max_diff"] < 1e-5  # same gradients and weights after 3 steps
    flat, hier = result["flat"], result["hier"]
    assert hier["inter_payload"] * 2 == pytest.approx(flat["inter_payload"], rel=0.02)  # 1/local_size
    assert hier["inter_ring"] < flat["inter_ring"]
    assert flat["intra_payload"] == 0 and hier["intra_payload"] > 0
