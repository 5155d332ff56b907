"""A trial's micro-batches sized to the device that trains it: a search worker trains every
emulated target GPU's share itself, so a device smaller than that share splits each micro-batch
into parts of whole GPUs, and one that cannot hold a single GPU's micro-batch fails the trial in
one line that says what it must hold."""

from __future__ import annotations

from pathlib import Path

import optuna

import tianfeng
from tests.search.conftest import write_space
from tianfeng.cost.memory import GIB, RESERVED_GIB, USABLE_SHARE, per_gpu_fit
from tianfeng.cost.step_time import step_cost
from tianfeng.hpo.space.materialize import build_config
from tianfeng.hpo.space.read import load_space
from tianfeng.hpo.trial_attrs import TrialKey, TrialStatus


def _gib_holding(images: int, cfg) -> float:
    p = cfg.phases[0]
    fit = per_gpu_fit(cfg.model, p.resolution, mixed=cfg.precision.mode != "fp32", optimizer=cfg.optimizer.name,
                      memory_gib=1.0, params=step_cost(cfg.model, p.resolution, 3, 1000).params)
    return ((fit.state_bytes + (images + 0.5) * fit.image_bytes) / GIB + RESERVED_GIB) / USABLE_SHARE


def test_a_search_splits_each_trials_micro_batch_for_its_device_and_refuses_what_cannot_fit(
        tmp_path: Path, tiny_space: dict) -> None:
    """Bug: a worker trains the target cluster's micro-batch whole whatever its own memory (or
    sizes it from the target GPU's). The tiny space's trials emulate 8 GPUs; a device holding 64
    images trains batch 128 in 2 parts and batch 64 whole; one holding 7 cannot take a GPU's 8."""
    tiny_space["parameters"]["batch_size"] = {"type": "categorical", "choices": [64, 128]}
    path = write_space(tmp_path, tiny_space)
    space = load_space(path)
    assert space.cluster.gpus == 8
    proxy = build_config(space, {"optimizer": "sgd", "base_lr": 0.4, "batch_size": 64, "warmup_epochs": 0.5,
                                 "momentum": 0.9}, "proxy")
    storage = f"sqlite:///{tmp_path / 'm.db'}"
    study = tianfeng.search(path, study="fits", storage=storage, trials=4, sampler="random", pruner="none",
                            workers=1, runs_dir=tmp_path / "runs", trial_memory_gib=_gib_holding(64, proxy))
    trials = study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 4
    splits = {t.params["batch_size"]: t.user_attrs[TrialKey.CONFIG]["memory_split"] for t in trials}
    assert splits.get(128, 2) == 2 and splits.get(64, 1) == 1 and len(splits) == 2, splits

    small = tianfeng.search(path, study="small", storage=storage, trials=3, sampler="random", pruner="none",
                            workers=1, runs_dir=tmp_path / "runs", trial_memory_gib=_gib_holding(7, proxy))
    failed = small.get_trials()
    assert failed and all(t.user_attrs.get(TrialKey.STATUS) == TrialStatus.FAILED for t in failed)
    for t in failed:  # batch 64 or 128 over 8 GPUs
        error = t.user_attrs[TrialKey.ERROR]
        assert f"one emulated GPU's micro-batch ({t.params['batch_size'] // 8} images at 8 px) does not fit" in error
        assert "it holds 7" in error and "\n" not in error
