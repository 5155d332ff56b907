"""A tiny real search space (digits, 8px, width 4, two epochs) that runs a trial in ~1 s."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

TINY_SPACE = {
    "name": "tiny",
    "base": {
        "model": {"name": "resnet_small", "width": 8, "depth": 1, "stages": 2},
        "data": {"source": "digits"},
        "optimizer": {"name": "sgd", "lr": 0.5},
        "schedule": {"warmup_epochs": 0.5},
        "precision": {"mode": "fp32"},
        "phases": [{"epochs": 3, "resolution": 8, "batch_size": 128}],
    },
    "parameters": {
        "optimizer": {"type": "categorical", "choices": ["sgd", "lars"]},
        "base_lr": {"type": "float", "low": 0.05, "high": 5.0, "log": True},
        "trust_coefficient": {"type": "float", "low": 0.001, "high": 0.05, "log": True,
                              "when": "optimizer == 'lars'"},
        "warmup_epochs": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.5},
        "batch_size": {"type": "categorical", "choices": [64, 128]},
        "momentum": {"type": "fixed", "value": 0.9},
    },
    "set": {
        "optimizer.name": "optimizer",
        "optimizer.lr": "base_lr",
        "optimizer.momentum": "momentum",
        "optimizer.lars.trust_coefficient": "trust_coefficient",
        "schedule.warmup_epochs": "warmup_epochs",
        "phases.0.batch_size": None,  # removed below: phases come from the template
    },
    "phases": {"stages": 1, "start_resolution": 8, "end_resolution": 8, "batch_size": "batch_size"},
    "fidelities": {"proxy": {"epochs": 2, "width_scale": 0.5}, "target": {}},
    "objective": {"metric": "val_top1", "direction": "maximize"},
    "min_steps": 0,  # two-epoch proxies by design (the guard has its own tests)
    "priors": [{"name": "goyal", "params": {"optimizer": "sgd", "base_lr": 0.4, "batch_size": 128},
                "partial": True}],  # a warm start: tests add parameters it does not set,
}
del TINY_SPACE["set"]["phases.0.batch_size"]


def write_space(directory: Path, space: dict, name: str = "space.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


@pytest.fixture
def tiny_space() -> dict:
    return copy.deepcopy(TINY_SPACE)


@pytest.fixture
def tiny_space_file(tmp_path: Path, tiny_space: dict) -> Path:
    return write_space(tmp_path, tiny_space)
