"""Gradient accumulation on real DDP ranks (gloo): each rank's micro-batches with no_sync, one
exchange, BatchNorm per micro-batch; one process emulating the ranks' per-GPU BatchNorm over the
same micro-batches gets the same loss, gradients and rank 0's running statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.distributed.test_hooks import torchrun

WORKER = Path(__file__).with_name("accumulation_worker.py")


@pytest.mark.parametrize("per_rank,chunks", [(8, 2), (12, 3)])
def test_accumulating_ranks_match_one_process_emulating_them(tmp_path: Path, per_rank: int, chunks: int) -> None:
    out = tmp_path / "diff.json"
    run = torchrun(2, str(WORKER), str(out), str(per_rank), str(chunks))
    assert run.returncode == 0, run.stderr[-3000:]
    r = json.loads(out.read_text())
    assert abs(r["loss_ddp"] - r["loss_emulated"]) < 1e-5, r
    assert r["grad_diff"] < 1e-5 * max(1.0, r["grad_scale"]), r
    assert r["running_mean_diff"] < 1e-6, r
    assert r["batches_tracked"] == chunks  # each micro-batch went through BatchNorm on its own
