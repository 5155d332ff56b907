"""BatchNorm per GPU emulated in one process against real DDP ranks on gloo: the same first-step
loss and gradients as 4 ranks each normalising its own share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.distributed.test_hooks import torchrun

WORKER = Path(__file__).with_name("per_gpu_bn_worker.py")


@pytest.mark.parametrize("per_rank", [2, 6])
def test_one_process_with_per_gpu_batchnorm_trains_as_four_ranks_do(tmp_path: Path, per_rank: int) -> None:
    out = tmp_path / "diff.json"
    run = torchrun(4, str(WORKER), str(out), str(per_rank))
    assert run.returncode == 0, run.stderr[-3000:]
    r = json.loads(out.read_text())
    assert abs(r["loss_ddp"] - r["loss_emulated"]) < 1e-5, r
    assert r["grad_diff"] < 1e-5 * max(1.0, r["grad_scale"]), r
    assert r["running_mean_diff"] < 1e-6, r  # rank 0's statistics, which DDP broadcasts
    assert r["running_var_diff"] < 1e-6 < r["running_var_moved"], r  # the variance too (the unbiased one)
    # and normalising over the whole batch instead is measurably another model
    assert abs(r["loss_whole_batch_bn"] - r["loss_ddp"]) > 1e-3, r
