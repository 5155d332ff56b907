"""The LARS and LAMB optimizer step on ResNet-50's parameters (25.6 M in 161 tensors, the
ImageNet model the records train): the multi-tensor (torch._foreach_*) step against the
per-tensor Python loop the engine used before (its code kept here), and torch's own SGD step as
a yardstick.
Target: multi-tensor LARS at least 2x faster than the per-tensor loop, in one run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import torch
from common import interleaved, print_table, timed

from tianfeng.core.run_config import ModelConfig
from tianfeng.trainers.models import build_model
from tianfeng.trainers.optim import Lamb, Lars, parameter_groups


class LarsBefore(torch.optim.Optimizer):
    """The engine's LARS step before the multi-tensor one (commit 1984d62), kept as the baseline:
    a Python loop over tensors, torch's norm kernel, a temporary per tensor."""

    def __init__(self, params, lr: float, momentum: float = 0.9, trust_coefficient: float = 0.001,
                 eps: float = 1e-9) -> None:
        super().__init__(params, dict(lr=lr, momentum=momentum, trust_coefficient=trust_coefficient,
                                      eps=eps, weight_decay=0.0, layer_adaptation=True))

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            wd = group["weight_decay"]
            for p in group["params"]:
                grad = p.grad
                if group["layer_adaptation"]:
                    w_norm, g_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(grad)
                    trust = group["trust_coefficient"] * w_norm / (g_norm + wd * w_norm + group["eps"])
                    trust = torch.where((w_norm > 0) & (g_norm > 0), trust, torch.ones_like(trust))
                    grad = grad.add(p, alpha=wd).mul_(trust)
                elif wd:
                    grad = grad.add(p, alpha=wd)
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = state["momentum_buffer"] = grad.clone()
                else:
                    buf.mul_(group["momentum"]).add_(grad)
                p.add_(buf, alpha=-group["lr"])


def optimizers(model: torch.nn.Module) -> dict:
    def groups():
        return parameter_groups(model, 5e-5)

    return {
        "lars before": LarsBefore(groups(), lr=1.0),
        "lars per-tensor": Lars(groups(), lr=1.0, implementation="per_tensor"),
        "lars foreach": Lars(groups(), lr=1.0, implementation="foreach"),
        "lars fused (cpu default)": Lars(groups(), lr=1.0, implementation="fused"),
        "lamb per-tensor": Lamb(groups(), lr=1e-3, implementation="per_tensor"),
        "lamb foreach (default)": Lamb(groups(), lr=1e-3, implementation="foreach"),
        "torch sgd (foreach)": torch.optim.SGD(groups(), lr=0.1, momentum=0.9, foreach=True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per measurement")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = build_model(ModelConfig(name="resnet50"), in_channels=3, num_classes=1000)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    opts = optimizers(model)
    count = sum(p.numel() for p in model.parameters())
    print(f"ResNet-50: {count / 1e6:.1f} M parameters in {len(list(model.parameters()))} tensors, "
          f"{torch.get_num_threads()} threads")

    def measure(opt):
        opt.step()  # state allocated outside the timing
        return lambda: timed(lambda: [opt.step() for _ in range(args.steps)]) / args.steps

    times = interleaved({name: measure(opt) for name, opt in opts.items()}, args.repeats)
    rows = []
    for name, seconds in times.items():
        base = times["lamb per-tensor"] if name.startswith("lamb") else times["lars before"]
        rows.append((name, f"{seconds * 1e3:.1f} ms", f"{base / seconds:.2f}x"))
    print_table("optimizer step (median of interleaved repeats; speed-up over the LARS step before / LAMB's per-tensor loop)",
                rows, headers=("optimizer", "step", "speed-up"))


if __name__ == "__main__":
    main()
