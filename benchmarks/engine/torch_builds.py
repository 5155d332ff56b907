"""The engine's training step on two torch builds: the same code run by two Python interpreters
(each a virtual environment with its own torch), in turn, so drift hits both alike. Prints each
shape's median step time and the ratio of the second build to the first.

    python benchmarks/engine/torch_builds.py --baseline OLD_VENV/bin/python --candidate NEW_VENV/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

from common import ROOT, print_table

# (name, model, resolution, batch, precision, memory format): the proxy's shapes and ResNet-50's
SHAPES = (
    ("proxy resnet_small w16 32px b128 fp32", "resnet_small", 32, 128, "fp32", "contiguous"),
    ("proxy resnet_small w16 32px b128 bf16", "resnet_small", 32, 128, "bf16", "contiguous"),
    ("resnet50 64px b16 fp32 channels_last", "resnet50", 64, 16, "fp32", "channels_last"),
)


def worker(steps: int) -> None:
    """Time `steps` training steps of every shape (after one warm-up step); print JSON."""
    import torch
    from precision import timed_steps

    from tianfeng.core.run_config import ModelConfig, PrecisionConfig
    from tianfeng.trainers.models import build_model
    from tianfeng.trainers.precision import build_precision

    torch.manual_seed(0)
    out = {"torch": torch.__version__}
    for name, model_name, resolution, batch, mode, layout in SHAPES:
        cfg = ModelConfig(name=model_name, width=16) if model_name == "resnet_small" else ModelConfig(name=model_name)
        model = build_model(cfg, 3, 10)
        fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
        model = model.to(memory_format=fmt)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        precision = build_precision(PrecisionConfig(mode=mode), torch.device("cpu"))
        x = torch.randn(batch, 3, resolution, resolution).to(memory_format=fmt)
        y = torch.randint(0, 10, (batch,))
        out[name] = timed_steps(model, opt, precision, x, y, steps)
    print(json.dumps(out))


def measure(python: str, steps: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([python, __file__, "--worker", "--steps", str(steps)], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", help="the Python of the environment with the first torch build")
    parser.add_argument("--candidate", help="the Python of the environment with the second torch build")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.steps)
    if not (args.baseline and args.candidate):
        sys.exit("torch_builds: give --baseline and --candidate (two environments' python)")
    runs: dict[str, list[dict]] = {"baseline": [], "candidate": []}
    for _ in range(args.repeats):
        for arm, python in (("baseline", args.baseline), ("candidate", args.candidate)):
            runs[arm].append(measure(python, args.steps))
    versions = {arm: r[0]["torch"] for arm, r in runs.items()}
    rows = []
    for name, *_ in SHAPES:
        base = statistics.median(r[name] for r in runs["baseline"])
        cand = statistics.median(r[name] for r in runs["candidate"])
        rows.append((name, f"{1000 * base:.1f} ms", f"{1000 * cand:.1f} ms", f"{cand / base:.2f}x"))
    print_table(f"training step, CPU: torch {versions['baseline']} (baseline) vs {versions['candidate']}",
                rows, headers=("shape", "baseline", "candidate", "candidate / baseline"))


if __name__ == "__main__":
    main()
