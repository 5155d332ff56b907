"""fp32 vs bf16 (and fp16) autocast step time on this machine: the figure behind
`precision: auto`, which picks fp32 on CPUs without bf16 matrix instructions."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import torch
from common import interleaved, print_table

from tianfeng.core.run_config import ModelConfig, PrecisionConfig
from tianfeng.trainers.models import build_model
from tianfeng.trainers.precision import build_precision, resolve_mode


def step_time(mode: str, batch: int, resolution: int, width: int, steps: int) -> float:
    torch.manual_seed(0)
    device = torch.device("cpu")
    model = build_model(ModelConfig(width=width, depth=1, stages=3), 3, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    precision = build_precision(PrecisionConfig(mode=mode), device)
    x = torch.randn(batch, 3, resolution, resolution)
    y = torch.randint(0, 10, (batch,))
    return timed_steps(model, opt, precision, x, y, steps)


def timed_steps(model, opt, precision, x, y, steps: int) -> float:
    """Seconds per training step over `steps` steps, after one that warms up kernels."""
    for i in range(steps + 1):
        if i == 1:
            start = time.perf_counter()
        with precision.autocast():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        precision.scaler.scale(loss).backward()
        precision.scaler.step(opt)
        precision.scaler.update()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    shape = dict(batch=64, resolution=16, width=16, steps=args.steps)
    times = interleaved({m: (lambda m=m: step_time(m, **shape)) for m in ("fp32", "bf16", "fp16")},
                        args.repeats)
    base = times["fp32"]
    print_table("training step time by precision (resnet_small width 16, 16px, batch 64, CPU)",
                [(m, f"{1000 * t:.1f} ms", f"{t / base:.1f}x") for m, t in times.items()],
                headers=("precision", "step time", "vs fp32"))
    mode, reason = resolve_mode("auto", torch.device("cpu"))
    print(f"\n  precision: auto picks {mode} here: {reason}")


if __name__ == "__main__":
    main()
