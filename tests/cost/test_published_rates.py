"""The step curve fitted to published per-GPU rates, and the software stack as an input: each
against a hand calculation, failing for a plausible mistake in its term."""

from __future__ import annotations

import pytest

from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import config_from_dict
from tianfeng.cost.cluster import ClusterSpec, checked
from tianfeng.cost.published_rates import POINTS, RatePoint, StepCurve, fit_curve, fitted
from tianfeng.cost.step_time import DEVICES, STACKS
from tianfeng.cost.walltime import predict_wall_time


def test_the_fit_recovers_a_known_curve() -> None:
    """Rates drawn from step_s(b) = 5 ms + b * 0.3 ms give back both parts: an intercept and a
    slope swapped, or a line fitted to the rates themselves, would not."""
    truth = StepCurve(fixed_s=0.005, image_s=0.0003)
    points = [RatePoint("a100", "mxnet-mlperf", b, truth.images_per_s(b), "v1.1", "x") for b in (15, 35, 51, 408)]
    curve = fit_curve(points)
    assert curve.fixed_s == pytest.approx(0.005, rel=1e-9) and curve.image_s == pytest.approx(0.0003, rel=1e-9)
    assert curve.half_batch == pytest.approx(0.005 / 0.0003, rel=1e-9)
    assert truth.images_per_s(curve.half_batch) == pytest.approx(0.5 / 0.0003, rel=1e-9)  # half the peak
    with pytest.raises(ValueError, match="two or more per-GPU batches"):
        fit_curve(points[:1] * 3)


def test_the_device_table_takes_the_fitted_curve_and_it_describes_its_points() -> None:
    for device in ("a100", "h100"):
        curve = fitted(device)
        assert DEVICES[device].half_batch == curve.half_batch
        for p in (p for p in POINTS if p.device == device):  # every logged rate within 10% (worst: v2.1 preview)
            assert curve.images_per_s(p.per_gpu_batch) == pytest.approx(p.images_per_s, rel=0.10), p
    # the small-batch points decide it: half the peak at ~16 a GPU on A100, not the old 45
    assert 12 < DEVICES["a100"].half_batch < 20 and 20 < DEVICES["h100"].half_batch < 32
    # leaving a point out refits without it
    smallest = min((p for p in POINTS if p.device == "a100"), key=lambda p: p.per_gpu_batch)
    assert fitted("a100", (smallest,)) != fitted("a100")


def test_a_stack_scales_the_compute_by_its_one_factor() -> None:
    """Compute time on NVIDIA's MLPerf stack is the PyTorch prediction over the stack's factor,
    which is the A100 curve at 256 a GPU over the DLE figure (2,470 images/s)."""
    assert STACKS["mxnet-mlperf"].factor == pytest.approx(fitted("a100").images_per_s(256) / 2470.0, rel=1e-12)
    cfg = config_from_dict({"model": {"name": "resnet50"}, "precision": {"mode": "fp16"},
                            "phases": [{"epochs": 1, "resolution": 224, "batch_size": 2048}],
                            "noise_scale_every": 0, "checkpoint": {"every_epochs": 0}}, "t")
    parts = {}
    for stack in STACKS:
        spec = checked(ClusterSpec(gpus=8, device="a100", stack=stack), "t")
        parts[stack] = predict_wall_time(cfg, spec, train_images=1_281_167, val_images=50_000, classes=1000).parts
    assert parts["pytorch"]["compute"] / parts["mxnet-mlperf"]["compute"] == pytest.approx(
        STACKS["mxnet-mlperf"].factor, rel=1e-9)
    with pytest.raises(ConfigError, match=r"s\.yaml: cluster\.stack: must be one of pytorch, mxnet-mlperf; got 'tf'"):
        checked(ClusterSpec(stack="tf"), "s.yaml")
