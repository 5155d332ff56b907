"""Global BatchNorm on CPU (gloo): the same outputs, gradients and running statistics as one
BatchNorm2d over the whole global batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.distributed.test_hooks import torchrun

WORKER = Path(__file__).with_name("sync_bn_worker.py")


@pytest.mark.parametrize("world", [2, 4])
def test_global_batchnorm_equals_batchnorm_on_the_whole_batch(tmp_path: Path, world: int) -> None:
    out = tmp_path / "diff.json"
    run = torchrun(world, str(WORKER), str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    diff = json.loads(out.read_text())
    assert diff.pop("type") == "GlobalBatchNorm2d"
    for key, value in diff.items():
        assert value < 1e-4, (key, value)


def test_node_scoped_batchnorm_equals_batchnorm_on_the_nodes_share(tmp_path: Path) -> None:
    """sync_bn_scope: node at 2 nodes x 2 ranks: node 0's ranks normalise exactly as one
    BatchNorm2d over node 0's half of the batch (and so not over the whole batch)."""
    out = tmp_path / "diff.json"
    run = torchrun(4, str(WORKER), str(out), "2")
    assert run.returncode == 0, run.stderr[-3000:]
    diff = json.loads(out.read_text())
    assert diff.pop("type") == "GlobalBatchNorm2d"
    for key, value in diff.items():
        assert value < 1e-4, (key, value)


def test_a_batchnorm_group_of_consecutive_ranks_normalises_over_its_ranks_share(tmp_path: Path) -> None:
    """sync_bn_group: 2 at 4 ranks (MLPerf's BN_GROUP): ranks 0 and 1 normalise exactly as one
    BatchNorm2d over their half of the batch. Bug caught: a subgroup of the wrong ranks, or of
    all of them."""
    out = tmp_path / "diff.json"
    run = torchrun(4, str(WORKER), str(out), "2", "consecutive")
    assert run.returncode == 0, run.stderr[-3000:]
    diff = json.loads(out.read_text())
    assert diff.pop("type") == "GlobalBatchNorm2d"
    for key, value in diff.items():
        assert value < 1e-4, (key, value)
