"""What gradient compression costs in accuracy: the same cifar5-dev run (same seed, data order and
initial weights) at world 4 = 2 emulated nodes x 2 gloo ranks, launched by `tianfeng launch
--device cpu`, with a flat allreduce and with each compressed exchange. Bytes are the busiest
rank's inter-node gradient payload per step, averaged over the whole run (PowerSGD's
plain-allreduce start included). Aim: PowerSGD sends >= 10x fewer bytes than flat for <= 0.5
point of val top-1, first asked of rank 4."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import yaml
from common import ROOT, cifar5_dir, print_table

from tianfeng.core.run_config import ModelConfig
from tianfeng.trainers.models import build_model

VARIANTS = {
    "flat allreduce": {"hook": "none", "compression": "none"},
    "fp16 cast + hierarchical": {"hook": "hierarchical", "compression": "fp16"},
    "PowerSGD rank 4": {"hook": "none", "compression": "powersgd", "powersgd_rank": 4},
    "PowerSGD rank 8": {"hook": "none", "compression": "powersgd", "powersgd_rank": 8},
    # ours: the node sums first, then PowerSGD between nodes only, each local rank a share of the matrices
    "PowerSGD rank 4 + hierarchical": {"hook": "hierarchical", "compression": "powersgd", "powersgd_rank": 4},
    "PowerSGD rank 8 + hierarchical": {"hook": "hierarchical", "compression": "powersgd", "powersgd_rank": 8},
    # torch's advice: start compressing once the LR warm-up is over (here 1 epoch = 97 steps)
    "PowerSGD rank 4 from step 97": {"hook": "none", "compression": "powersgd", "powersgd_rank": 4,
                                      "powersgd_start_step": 97},
}


def run(tmp: Path, name: str, distributed: dict, args) -> tuple[float, float | None, float]:
    """(final val top-1, inter-node bytes per step and rank or None when not counted, seconds)."""
    cfg = {"name": name, "run_dir": str(tmp / name), "seed": args.seed,
           "data": {"source": f"imagefolder:{cifar5_dir()}"},
           "model": {"width": args.width, "depth": 1, "stages": 3},
           "optimizer": {"name": "sgd", "lr": 0.4, "momentum": 0.9, "weight_decay": 5e-4, "label_smoothing": 0.1},
           "schedule": {"warmup_epochs": 1, "decay": "cosine", "scaling_rule": "linear",
                        "reference_batch_size": 256},
           "phases": [{"epochs": args.epochs, "resolution": args.resolution, "batch_size": args.batch}],
           "distributed": {"local_size": 2, "bucket_mb": 5, **distributed}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "tianfeng.cli", "launch", "--config", str(path), "--nodes", "2",
                          "--gpus-per-node", "2", "--device", "cpu"], capture_output=True, text=True, env=env,
                         cwd=ROOT, check=False)
    if out.returncode:
        raise SystemExit(f"{name} failed:\n{out.stderr[-2000:]}")
    result = json.loads((tmp / name / "result.json").read_text())
    counted = re.findall(r"comm per step, busiest rank: (\d+) B inter-node", out.stderr)
    return result["final"]["val_top1"], float(counted[-1]) if counted else None, result["final"]["elapsed_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=24)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--resolution", type=int, default=16)
    parser.add_argument("--batch", type=int, default=256, help="global batch (64 per rank)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated; flat always runs")
    args = parser.parse_args()
    chosen = {"flat allreduce", *args.variants.split(",")}
    unknown = chosen - set(VARIANTS)
    if unknown:
        parser.error(f"--variants: unknown {', '.join(sorted(unknown))}; allowed: {', '.join(VARIANTS)}")
    model = build_model(ModelConfig(width=args.width, depth=1, stages=3), 3, 5)
    flat_bytes = 4.0 * sum(p.numel() for p in model.parameters())  # fp32 gradient, each rank, each step
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, distributed) in enumerate(VARIANTS.items()):
            if name not in chosen:
                continue
            top1, sent, seconds = run(Path(tmp), f"v{i}", distributed, args)
            results[name] = (top1, flat_bytes if sent is None else sent, seconds)
            print(f"{name}: val top-1 {top1:.2f}, {results[name][1]:,.0f} B/step/rank, {seconds:.0f} s",
                  file=sys.stderr)
    base_top1, base_bytes, base_s = results["flat allreduce"]
    print_table(f"gradient compression on cifar5-dev, world 4 = 2 nodes x 2 (gloo), resnet_small width "
                f"{args.width}, {args.resolution}px, {args.epochs} epochs, batch {args.batch}, seed {args.seed} for all",
                [(name, f"{top1:.2f} ({top1 - base_top1:+.2f})", f"{sent:,.0f} ({base_bytes / sent:.1f}x fewer)",
                  f"{seconds:.0f} s ({seconds / base_s:.2f})") for name, (top1, sent, seconds) in results.items()],
                headers=("exchange", "val top-1 (vs flat)", "inter-node B/step/rank", "wall (vs flat)"))


if __name__ == "__main__":
    main()
