"""What BatchNorm per emulated GPU costs a proxy step: forward, backward and an SGD step of
`resnet_small` with torch's BatchNorm over the whole batch (the baseline, measured in the same
run) against `tianfeng.trainers.per_gpu_bn` at several images per GPU, in both of the engine's
layouts, and as a CPU proxy runs them: each model at the layout `memory_format: auto` would pick
for it (the faster one). The target is a step within 1.10x of the baseline's. With `--compile`,
both models at the smallest per-GPU batch are also timed under torch.compile in channels_last
(where the CPU kernel runs eagerly and the traceable path runs compiled)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import torch
from common import interleaved, print_table, timed
from torch import nn

from tianfeng.core.run_config import ModelConfig
from tianfeng.trainers import per_gpu_bn
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


LAYOUTS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}
PLAIN = "BatchNorm over the batch"


def per_gpu_name(images: int, batch: int) -> str:
    return f"per GPU, {images} images each ({batch // images} GPUs)"


def plain_model(width: int, layout: torch.memory_format) -> nn.Module:
    return build_model(ModelConfig(width=width, depth=1, stages=3), 3, 10).to(memory_format=layout)


def per_gpu_model(width: int, layout: torch.memory_format, gpus: int) -> nn.Module:
    model = per_gpu_bn.convert(build_model(ModelConfig(width=width, depth=1, stages=3), 3, 10))
    per_gpu_bn.set_groups(model, gpus)
    return model.to(memory_format=layout)


def run_case(width: int, resolution: int, batch: int, groups: list[int], repeats: int,
             steps: int, compiled: bool = False) -> dict[tuple[str, str], float]:
    """Seconds a step, by (layout, BatchNorm variant); every variant of both layouts interleaved."""
    torch.manual_seed(0)
    y = torch.randint(0, 10, (batch,))
    images = torch.randn(batch, 3, resolution, resolution)
    variants = {}
    for layout_name, layout in LAYOUTS.items():
        x = images.contiguous(memory_format=layout)
        variants[(layout_name, PLAIN)] = step_fn(plain_model(width, layout), x, y)
        for per_gpu in groups:
            variants[(layout_name, per_gpu_name(per_gpu, batch))] = step_fn(per_gpu_model(width, layout, batch // per_gpu),
                                                                              x, y)
        if compiled and layout_name == "channels_last":
            variants[(layout_name, PLAIN + ", compiled")] = step_fn(torch.compile(plain_model(width, layout)), x, y)
            model = torch.compile(per_gpu_model(width, layout, batch // min(groups)))
            variants[(layout_name, per_gpu_name(min(groups), batch) + ", compiled")] = step_fn(model, x, y)
    for fn in variants.values():  # warm-up (and the compiles)
        fn()
    by_label = interleaved({f"{layout}|{name}": (lambda fn=fn: timed(lambda: [fn() for _ in range(steps)]) / steps)
                            for (layout, name), fn in variants.items()}, repeats)
    return {tuple(label.split("|", 1)): t for label, t in by_label.items()}


def layout_rows(times: dict[tuple[str, str], float], layout: str) -> list[tuple[str, ...]]:
    baseline = times[(layout, PLAIN)]
    return [(name, f"{1000 * t:.2f} ms", f"{t / baseline:.3f}x") for (lay, name), t in times.items() if lay == layout]


def proxy_rows(times: dict[tuple[str, str], float]) -> list[tuple[str, ...]]:
    """What a CPU proxy pays: `memory_format: auto` times the model it will train and keeps the
    faster layout, so each variant at its faster layout against the plain model at its own."""
    names = dict.fromkeys(name for _, name in times)
    best = {name: min((times[(lay, name)], lay) for lay in LAYOUTS if (lay, name) in times) for name in names}
    baseline = best[PLAIN][0]
    return [(name, lay, f"{1000 * t:.2f} ms", f"{t / baseline:.3f}x") for name, (t, lay) in best.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--compile", action="store_true", help="also time both models under torch.compile "
                        "(channels_last; ~1 min of compiling a case)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s); median of {args.repeats} interleaved repeats "
          f"of {args.steps} steps")
    for label, width, resolution, batch in CASES:
        times = run_case(width, resolution, batch, [batch // 8, 8, 2], args.repeats, args.steps, args.compile)
        for layout in LAYOUTS:
            print_table(f"{label}, {layout}", layout_rows(times, layout), headers=("BatchNorm", "step", "ratio"))
        print_table(f"{label}, each at its faster layout (what memory_format: auto trains)", proxy_rows(times),
                    headers=("BatchNorm", "layout", "step", "ratio"))

if __name__ == "__main__":
    main()
