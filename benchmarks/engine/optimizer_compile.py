"""Does torch.compile of the optimizer step pay on a proxy run? It is worth having only if it pays.

For the proxy net (`resnet_small` at the `lowres_half` rung: width 8, 8 px) and the full-fidelity
one (width 16, 16 px) at a small and a large batch, measures in one run, interleaved:
the training step's forward and backward, and the optimizer step (each timed right after a
backward pass, as in training) as the engine runs it (LARS fused on CPU, LAMB and SGD
multi-tensor) and LARS multi-tensor, against the same steps compiled (`torch.compile` of a
function calling `opt.step()`, as torch's compiled-optimizer recipe does). Prints the optimizer's
share of the whole step, the compiled step's speed-up, its compile time, and how many steps it
needs to pay that back. The LR is held constant here: the best case for a compiled step (a
warm-up or decay that changes a float LR every step recompiles it, unless the LR is a tensor)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import torch
import torch._dynamo
from common import interleaved, print_table, timed

from tianfeng.core.run_config import ModelConfig
from tianfeng.trainers.models import build_model
from tianfeng.trainers.optim import Lamb, Lars, parameter_groups

CASES = (  # (label, width, resolution, batch)
    ("proxy w8 8px b256", 8, 8, 256),
    ("proxy w8 8px b2048", 8, 8, 2048),
    ("full w16 16px b256", 16, 16, 256),
    ("full w16 16px b2048", 16, 16, 2048),
)


def make_optimizers(model: torch.nn.Module) -> dict[str, torch.optim.Optimizer]:
    def groups():
        return parameter_groups(model, 5e-5)

    return {
        "lars": Lars(groups(), lr=1.0, trust_coefficient=0.01),  # auto: fused on CPU
        "lars foreach": Lars(groups(), lr=1.0, trust_coefficient=0.01, implementation="foreach"),
        "lamb": Lamb(groups(), lr=1e-3),
        "sgd": torch.optim.SGD(groups(), lr=0.1, momentum=0.9),
    }


def compiled_step(opt: torch.optim.Optimizer):
    @torch.compile
    def step() -> None:
        opt.step()

    return step


def run_case(width: int, resolution: int, batch: int, repeats: int) -> tuple[list[tuple[str, ...]], dict]:
    torch.manual_seed(0)
    model = build_model(ModelConfig(name="resnet_small", width=width, depth=1, stages=3), 3, 10)
    x = torch.randn(batch, 3, resolution, resolution)
    y = torch.randint(0, 10, (batch,))
    loss_fn = torch.nn.CrossEntropyLoss()

    def forward_backward() -> None:
        model.zero_grad(set_to_none=False)
        loss_fn(model(x), y).backward()

    forward_backward()
    tensors = sum(1 for _ in model.parameters())
    eager = make_optimizers(model)
    compiled = {}
    compile_s = {}
    for name in ("lars foreach", "lamb", "sgd"):
        opt = make_optimizers(model)[name]
        opt.step()  # state allocated before the first compiled call
        step = compiled_step(opt)
        start = time.perf_counter()
        step()
        first = time.perf_counter() - start
        compiled[name], compile_s[name] = step, first
    for opt in eager.values():
        opt.step()

    def after_backward(step) -> float:
        """The step timed where it runs in training: right after a backward pass."""
        forward_backward()
        return timed(step)

    variants = {"forward+backward": lambda: timed(forward_backward)}
    for name, opt in eager.items():
        variants[f"{name} eager"] = (lambda o=opt: after_backward(o.step))
    for name, step in compiled.items():
        variants[f"{name} compiled"] = (lambda s=step: after_backward(s))
    times = interleaved(variants, repeats)
    fb = times["forward+backward"]
    rows = [("forward+backward", f"{1e3 * fb:.2f} ms", "", "", "", "")]
    for name in eager:
        e = times[f"{name} eager"]
        rows.append((f"{name} eager", f"{1e3 * e:.2f} ms", f"{100 * e / (fb + e):.1f}%", "", "", ""))
    for name in compiled:
        # the engine's own step for this optimizer: LARS's is the fused one
        base = times["lars eager"] if name.startswith("lars") else times[f"{name} eager"]
        c = times[f"{name} compiled"]
        cost = max(0.0, compile_s[name] - c)
        saving = base - c
        payback = f"{cost / saving:.0f}" if saving > 0 else "never"
        rows.append((f"{name} compiled", f"{1e3 * c:.2f} ms", f"{100 * c / (fb + c):.1f}%",
                     f"{base / c:.2f}x", f"{cost:.1f} s", payback))
    return rows, {"tensors": tensors, "whole_step_ms": 1e3 * (fb + times["lars eager"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch._dynamo.config.cache_size_limit = 64  # one compile per optimizer and case, never a fallback
    # inductor's caches start empty: the first case pays a cold compile, later ones (the same
    # parameter shapes) find its kernels, as a later trial of a search would
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
    print(f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    for label, width, resolution, batch in CASES:
        torch._dynamo.reset()
        rows, info = run_case(width, resolution, batch, args.repeats)
        print_table(f"{label}: {info['tensors']} parameter tensors, whole step with LARS "
                    f"{info['whole_step_ms']:.1f} ms (medians of interleaved repeats; speed-up over "
                    "the engine's eager step; payback = steps to earn back the compile)",
                    rows, headers=("step", "time", "share", "speed-up", "compile", "payback"))


if __name__ == "__main__":
    main()
