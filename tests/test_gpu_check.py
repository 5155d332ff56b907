"""The GPU check script rehearsed on this CPU: its figure checks run at tiny sizes and keep their
results as files, and the checks that need CUDA are refused on a CPU in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"


@pytest.mark.slow
def test_the_figure_checks_rehearse_on_a_cpu_and_keep_their_results(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(tmp_path),
                          "per_gpu_bn", "dali", "step_curve"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert [r["check"] for r in results["results"]] == ["per_gpu_bn", "dali", "step_curve"]
    assert all(r["ok"] for r in results["results"]), results
    versions = json.loads((tmp_path / "versions.json").read_text())
    assert versions["torch"] and versions["date"]
    by = {r["check"]: r["figures"] for r in results["results"]}
    # per-GPU BatchNorm equals torch's BatchNorm applied GPU by GPU
    assert by["per_gpu_bn"]["outputs_max_diff"] < 1e-4 and by["per_gpu_bn"]["input_grad_max_diff"] < 1e-4
    # DALI's decode matched every file to its own label
    assert by["dali"]["matched"] == by["dali"]["files"] > 0
    # the step curve's fit goes through its points: fixed + b x per image, both parts positive
    fits, points = by["step_curve"]["fits"], by["step_curve"]["points"]
    fit = next(iter(fits.values()))
    assert fit["image_s"] > 0 and len(points) == 3
    for p in points:
        assert p["images_per_s"] == pytest.approx(p["batch"] / (p["step_ms"] / 1e3))
    assert "PASS per_gpu_bn" in out.stdout and "PASS dali" in out.stdout


def test_cuda_checks_are_refused_on_a_cpu(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "nccl"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "--device cpu: nccl need a CUDA GPU" in out.stderr
    out = subprocess.run([sys.executable, str(SCRIPT), "nosuch"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "unknown check 'nosuch'; allowed: nccl" in out.stderr
