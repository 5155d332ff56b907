"""SyncBatchNorm as a recipe choice a space searches: its proxy normalises over the whole batch
(what world-scope SyncBN computes on the cluster, exactly), and its predicted time pays the
per-layer collectives that per-GPU BatchNorm does not."""

from __future__ import annotations

import copy
import logging

import pytest

from tests.search.conftest import write_space
from tianfeng.cost.walltime import predict_wall_time
from tianfeng.hpo.space.materialize import build_config
from tianfeng.hpo.space.read import load_space
from tianfeng.trainers.engine import train


def test_sync_bn_is_searched_priced_and_trained_as_the_cluster_would(tmp_path, tiny_space, caplog) -> None:
    space = copy.deepcopy(tiny_space)
    space["cluster"] = {"gpus": 8, "gpus_per_node": 4}
    space["parameters"]["sync_bn"] = {"type": "categorical", "choices": [False, True]}
    space["set"]["distributed.sync_bn"] = "sync_bn"
    loaded = load_space(write_space(tmp_path, space))
    values = {"optimizer": "sgd", "base_lr": 0.4, "warmup_epochs": 0.0, "batch_size": 128, "momentum": 0.9}

    times = {}
    for choice in (False, True):
        target = build_config(loaded, {**values, "sync_bn": choice}, "target")
        assert target.distributed.sync_bn is choice and target.distributed.emulate_gpus == 8
        assert target.distributed.emulate_gpus_per_node == 4
        times[choice] = predict_wall_time(target, loaded.cluster, train_images=1000, val_images=200, classes=10)
    assert times[False].parts["sync_bn"] == 0 < times[True].parts["sync_bn"]
    assert times[True].seconds - times[False].seconds == pytest.approx(times[True].parts["sync_bn"], rel=1e-6)

    # the proxy of the SyncBN recipe keeps BatchNorm over the whole batch; the per-GPU recipe's
    # normalises groups of 128 / 8 images
    for choice, grouped in ((True, False), (False, True)):
        caplog.clear()
        proxy = build_config(loaded, {**values, "sync_bn": choice}, "proxy", run_dir=str(tmp_path / f"run{choice}"))
        with caplog.at_level(logging.INFO, logger="tianfeng.engine"):
            result = train(proxy, max_steps=3)
        assert result.status in ("completed", "stopped")
        assert ("BatchNorm per GPU of 8: groups of 16 images" in caplog.text) is grouped, caplog.text
