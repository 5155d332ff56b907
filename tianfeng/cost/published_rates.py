"""Published per-GPU training rates of ResNet-50 on ImageNet at several per-GPU batches, and the
step curve fitted to them: what fixes how far below its peak a device runs at the small per-GPU
batches of a large cluster.

Each point is the median, over a result's successful logged runs, of the run's median epoch
rate (1,281,167 images over an epoch's epoch_start to epoch_stop, the first epoch left out) over
its GPUs, read from NVIDIA's logs in the public MLPerf Training results repositories
(github.com/mlcommons/training_results_vX.Y, NVIDIA/results/<system>/resnet/result_*.txt, and
NVIDIA/systems/<system>.json for the GPUs). A multi-node rate includes what the gradient
exchange did not hide; NVIDIA's large runs reduce in the network (SHARP), so that part is small.
Only rounds v1.0, v1.1, v2.1, v3.1 and v4.0 are used: v0.7, v2.0 and v3.0 are kept apart to
check the fit (benchmarks/cost/published_records.py).

The curve is the step model's: step_s(b) = fixed_s + b * image_s, so 1 / rate(b) = image_s +
fixed_s / b, a straight line in 1 / b fitted by least squares. Its `half_batch` = fixed_s /
image_s is the per-GPU batch at half the device's peak."""

from __future__ import annotations

from dataclasses import dataclass

MLPERF = "github.com/mlcommons/training_results_{round}, NVIDIA/results/{system}/resnet"


@dataclass(frozen=True)
class RatePoint:
    device: str  # a row of tianfeng.cost.step_time.DEVICES
    stack: str  # the software that trained it (a key of STACKS)
    per_gpu_batch: int
    images_per_s: float  # per GPU
    round: str
    system: str

    @property
    def source(self) -> str:
        return MLPERF.format(round=self.round, system=self.system)


def _points(device: str, rows: tuple[tuple[str, str, int, float], ...]) -> tuple[RatePoint, ...]:
    return tuple(RatePoint(device, "mxnet-mlperf", b, r, rnd, system) for rnd, system, b, r in rows)


# A100-SXM4-80GB, NVIDIA's MXNet with DALI (NGC 21.05, 21.09, 22.04). v2.1's n527 result is left
# out: its epoch timings give 10,129 images/s a GPU, three times the device's single-node rate,
# so its epochs are not timed one by one.
POINTS = _points("a100", (
    ("v1.0", "dgxa100_ngc21.05_mxnet", 408, 3334.4),
    ("v1.0", "dgxa100_n8_ngc21.05_mxnet", 204, 3104.6),
    ("v1.1", "dgxa100_ngc21.09_mxnet", 408, 3293.2),
    ("v1.1", "dgxa100_n8_ngc21.09_mxnet", 51, 2606.5),
    ("v1.1", "dgxa100_n128_ngc21.09_mxnet", 35, 2254.3),
    ("v1.1", "dgxa100_n540_ngc21.09_mxnet", 15, 1685.0),
    ("v2.1", "dgxa100_ngc22.04_mxnet", 408, 3398.4),
    ("v2.1", "dgxa100_n8_ngc22.04_mxnet", 51, 2619.8),
    ("v2.1", "dgxa100_n128_ngc22.04_mxnet", 35, 2308.4),
)) + _points("h100", (  # H100-SXM5-80GB, NVIDIA's MXNet with DALI (v2.1 preview; NGC 23.04, 23.09, 24.04)
    ("v2.1", "dgxh100_preview", 400, 6554.9),
    ("v2.1", "dgxh100_n4_preview", 100, 5281.2),
    ("v3.1", "eos_ngc23.09_mxnet", 400, 7054.7),
    ("v3.1", "eos_n8_ngc23.09_mxnet", 50, 4972.2),
    ("v3.1", "coreweave_hgxh100_n448_ngc23.04_mxnet", 16, 2814.7),
    ("v4.0", "eos_ngc24.04_mxnet", 400, 7161.4),
    ("v4.0", "eos_n8_ngc24.04_mxnet", 50, 4908.2),
    ("v4.0", "eos_n316_ngc24.04_mxnet", 16, 2724.7),
))


@dataclass(frozen=True)
class StepCurve:
    """A device's fitted per-GPU step curve, on the stack of its points."""
    fixed_s: float
    image_s: float

    @property
    def half_batch(self) -> float:
        return self.fixed_s / self.image_s

    def images_per_s(self, per_gpu_batch: float) -> float:
        return per_gpu_batch / (self.fixed_s + per_gpu_batch * self.image_s)


def fit_curve(points: tuple[RatePoint, ...] | list[RatePoint]) -> StepCurve:
    """Least squares of 1 / rate on 1 / batch: the intercept is image_s, the slope fixed_s."""
    xs = [1 / p.per_gpu_batch for p in points]
    ys = [1 / p.images_per_s for p in points]
    if len(set(xs)) < 2:
        raise ValueError("a step curve needs rates at two or more per-GPU batches")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return StepCurve(fixed_s=slope, image_s=my - slope * mx)


def fitted(device: str, leave_out: tuple[RatePoint, ...] = ()) -> StepCurve:
    """The curve fitted to `device`'s points (without `leave_out`: a benchmark's leave-one-out)."""
    return fit_curve([p for p in POINTS if p.device == device and p not in leave_out])
