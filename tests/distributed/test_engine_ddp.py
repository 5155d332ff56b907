"""The engine under torchrun with real gloo processes: DDP against one process, hierarchical
against flat allreduce, and the world-size checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import make_config
from tests.distributed.test_hooks import REPO, torchrun
from trainers.config import ConfigError
from trainers.distributed import DistContext, validate_world
from trainers.engine import train


def run_cli(nproc: int, run_dir: Path, *sets: str, log: list[str] | None = None) -> list[dict]:
    args = ["-m", "tianfeng.cli", "train", "--set", f"run_dir={run_dir}", "--set", "device=cpu",
            "--set", "phases.0.epochs=2", "--set", "phases.0.resolution=8", "--set", "phases.0.batch_size=64",
            "--set", "data.augment=none"]
    for s in sets:
        args += ["--set", s]
    out = torchrun(nproc, *args) if nproc > 1 else None
    if out is not None:
        assert out.returncode == 0, out.stderr[-3000:]
        if log is not None:
            log.append(out.stderr)
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_hierarchical_hook_trains_like_flat_allreduce(tmp_path: Path) -> None:
    flat = run_cli(4, tmp_path / "flat")
    log: list[str] = []
    hier = run_cli(4, tmp_path / "hier", "distributed.hook=hierarchical", "distributed.local_size=2",
                   "distributed.bucket_mb=auto", log=log)
    # adaptive fusion timed every candidate and chose one; timing did not train the model
    assert "bucket_mb auto: 1 MB" in log[0] and "100 MB" in log[0] and "-> " in log[0]
    for a, b in zip(flat, hier, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
        assert a["val_top1"] == pytest.approx(b["val_top1"], abs=0.5)


@pytest.mark.slow
def test_ddp_world_2_follows_the_single_process_loss_curve(tmp_path: Path) -> None:
    # a moderate LR: at the recipe's 1.0 float summation order alone moves epoch 2's loss by ~1%
    per_rank_bn = run_cli(2, tmp_path / "ddp", "optimizer.lr=0.2")
    global_bn = run_cli(2, tmp_path / "ddp-sync", "optimizer.lr=0.2", "distributed.sync_bn=true")
    single = train(make_config(tmp_path / "single", phases=[{"epochs": 2, "resolution": 8, "batch_size": 64}],
                               model={"width": 16, "depth": 1, "stages": 3}, optimizer={"lr": 0.2},
                               data={"augment": "none"}, schedule={"warmup_epochs": 1.0}))
    assert len(per_rank_bn) == len(global_bn) == 2
    # same global batches and gradients; with BatchNorm over the global batch (distributed.sync_bn)
    # DDP computes what one process does, up to float summation order
    for g, s in zip(global_bn, single.epochs, strict=True):
        assert g["train_loss"] == pytest.approx(s.train_loss, rel=1e-4)  # measured: 2e-5 after epoch 2
        assert g["val_loss"] == pytest.approx(s.val_loss, rel=1e-3)
    # with each rank's own half-batch statistics (the default, as on the records' GPUs) the curves
    # agree only within a tolerance (measured: 1.389 vs 1.359 after epoch 2)
    for d, s in zip(per_rank_bn, single.epochs, strict=True):
        assert d["train_loss"] == pytest.approx(s.train_loss, rel=0.2)
    assert per_rank_bn[1]["train_loss"] < 0.8 * per_rank_bn[0]["train_loss"]
    assert single.epochs[1].train_loss < 0.8 * single.epochs[0].train_loss


def test_world_checks(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, phases=[{"epochs": 1, "resolution": 8, "batch_size": 66}])
    with pytest.raises(ConfigError, match=r"phases.0.batch_size: must be divisible by the world size \(4 ranks\), got 66"):
        validate_world(cfg, DistContext(rank=0, world=4, local_rank=0, local_world=4))
    cfg = make_config(tmp_path, distributed={"hook": "hierarchical"})
    with pytest.raises(ConfigError, match="distributed.hook: hierarchical needs at least 2 nodes"):
        validate_world(cfg, DistContext(rank=0, world=4, local_rank=0, local_world=4))
    cfg = make_config(tmp_path, distributed={"hook": "hierarchical", "local_size": 3})
    with pytest.raises(ConfigError, match="distributed.local_size: must divide the world size"):
        validate_world(cfg, DistContext(rank=0, world=4, local_rank=0, local_world=4))
    assert validate_world(make_config(tmp_path, distributed={"hook": "hierarchical", "local_size": 2}),
                          DistContext(rank=0, world=4, local_rank=0, local_world=4)) == 2


def test_single_process_with_a_node_hook_is_bad_input(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "tianfeng.cli", "train", "--set", f"run_dir={tmp_path}",
                          "--set", "distributed.hook=hierarchical"], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 2 and "distributed.hook: hierarchical needs at least 2 nodes" in out.stderr
