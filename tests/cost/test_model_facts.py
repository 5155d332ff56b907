"""A model's cost facts measured once per machine: a space read again builds no model and imports
no torch, and a changed model, resolution or installed stack is measured afresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tianfeng.core.run_config import ModelConfig
from tianfeng.cost import model_facts

REPO = Path(__file__).resolve().parents[2]
READ = ("import sys, json; from tianfeng.hpo.space.read import load_space; "
        "s = load_space('tianfeng/spaces/large_batch.yaml'); "
        "print(json.dumps({'torch': 'torch' in sys.modules, 'max_per_gpu': s.constants.get('max_per_gpu')}))")


def _read_space(cache: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", READ], capture_output=True, text=True, cwd=REPO, timeout=300,
                         env={**os.environ, "TIANFENG_CACHE": str(cache), "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_space_read_again_builds_no_model(tmp_path: Path) -> None:
    """Bug: every process that reads a space (each search worker, status, report) builds its
    models again to count parameters and activations."""
    first, again = _read_space(tmp_path), _read_space(tmp_path)
    assert first["torch"] and not again["torch"]
    assert again["max_per_gpu"] == first["max_per_gpu"] > 0


def test_another_model_or_stack_is_measured_again(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TIANFENG_CACHE", str(tmp_path))
    calls = []

    def measure(value: float):
        return lambda: calls.append(value) or {"bytes": value}

    small = ModelConfig(name="resnet_small", width=4)
    assert model_facts.known("a", small, 8, 3, 10, measure(1.0)) == {"bytes": 1.0}
    assert model_facts.known("a", small, 8, 3, 10, measure(2.0)) == {"bytes": 1.0}  # kept
    assert model_facts.known("a", ModelConfig(name="resnet_small", width=8), 8, 3, 10, measure(3.0))["bytes"] == 3.0
    assert model_facts.known("a", small, 16, 3, 10, measure(4.0))["bytes"] == 4.0
    monkeypatch.setattr(model_facts, "_versions", lambda: "torch=another")
    assert model_facts.known("a", small, 8, 3, 10, measure(5.0))["bytes"] == 5.0
    user = ModelConfig(name="tests.trainers.test_accumulation:no_norm_net")
    model_facts.known("a", user, 8, 3, 10, measure(6.0))
    model_facts.known("a", user, 8, 3, 10, measure(7.0))  # the user's code may change: never kept
    assert calls == [1.0, 3.0, 4.0, 5.0, 6.0, 7.0]
