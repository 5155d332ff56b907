"""What BatchNorm per emulated GPU costs a proxy step: forward, backward and an SGD step of
`resnet_small` with torch's BatchNorm over the whole batch (the baseline, measured in the same
run) against `tianfeng.trainers.per_gpu_bn` at several images per GPU, in the engine's layouts. The
target is a step within 1.10x of the baseline's."""

from __future__ import annotations

import argparse
import os

import torch
from common import interleaved, print_table, timed
from torch import nn

from tianfeng.trainers import per_gpu_bn
from tianfeng.trainers.config import ModelConfig
from tianfeng.trainers.models import build_model

CASES = (  # (label, width, resolution, batch)
    ("proxy w8 8px b256", 8, 8, 256),
    ("proxy w8 16px b512", 8, 16, 512),
    ("full w16 16px b256", 16, 16, 256),
)


def step_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    return step


def run_case(width: int, resolution: int, batch: int, layout: torch.memory_format, groups: list[int],
             repeats: int, steps: int) -> list[tuple[str, ...]]:
    torch.manual_seed(0)
    x = torch.randn(batch, 3, resolution, resolution).contiguous(memory_format=layout)
    y = torch.randint(0, 10, (batch,))
    variants = {}
    base = build_model(ModelConfig(width=width, depth=1, stages=3), 3, 10).to(memory_format=layout)
    variants["BatchNorm over the batch"] = step_fn(base, x, y)
    for images in groups:
        model = per_gpu_bn.convert(build_model(ModelConfig(width=width, depth=1, stages=3), 3, 10))
        model = model.to(memory_format=layout)
        per_gpu_bn.set_groups(model, batch // images)
        variants[f"per GPU, {images} images each ({batch // images} GPUs)"] = step_fn(model, x, y)
    for fn in variants.values():  # warm-up
        fn()
    times = interleaved({name: (lambda fn=fn: timed(lambda: [fn() for _ in range(steps)]) / steps)
                         for name, fn in variants.items()}, repeats)
    baseline = times["BatchNorm over the batch"]
    return [(name, f"{1000 * t:.2f} ms", f"{t / baseline:.3f}x") for name, t in times.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s); median of {args.repeats} interleaved repeats "
          f"of {args.steps} steps")
    for label, width, resolution, batch in CASES:
        for layout_name, layout in (("contiguous", torch.contiguous_format), ("channels_last", torch.channels_last)):
            rows = run_case(width, resolution, batch, layout, [batch // 8, 8, 2], args.repeats, args.steps)
            print_table(f"{label}, {layout_name}", rows, headers=("BatchNorm", "step", "ratio"))


if __name__ == "__main__":
    main()
