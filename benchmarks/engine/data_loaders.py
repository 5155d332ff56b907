"""Data pipelines on the real cifar5-dev JPEGs: images/s of the pre-decoded cache, DALI on the
CPU and a torch DataLoader decoding with PIL (the baseline). Target: cache >= 5x PIL.
Also the engine's data-wait share of step time for the small proxy net (target <= 5%)."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import numpy as np
from common import cifar5_dir, interleaved, print_table

from tianfeng.core.run_config import DataConfig, RunConfig, config_from_dict, config_to_dict
from tianfeng.trainers.data.cache import decoded_split
from tianfeng.trainers.data.loaders import build_pipeline
from tianfeng.trainers.data.sources import imagefolder_source
from tianfeng.trainers.engine import train


def epoch_rate(folder: Path, loader: str, resolution: int, batch: int, workers: int) -> float:
    src = imagefolder_source(str(folder))
    cfg = DataConfig(source=f"imagefolder:{folder}", loader=loader, workers=workers)
    pipe, _ = build_pipeline(src, cfg, seed=0, train_indices=np.arange(len(src.train)),
                             resolution=resolution)
    start = time.perf_counter()
    n = sum(len(y) for _, y in pipe.train_batches(0, resolution, batch))
    return n / (time.perf_counter() - start)


def data_wait(folder: Path, tmp: str) -> tuple[float, float]:
    raw = config_to_dict(RunConfig())
    raw.update(run_dir=tmp, device="cpu")
    raw["data"].update(source=f"imagefolder:{folder}", fraction=0.4)
    raw["model"].update(width=16, depth=1, stages=3)
    raw["precision"]["mode"] = "fp32"
    raw["checkpoint"].update(every_epochs=0, resume=False)
    raw["phases"] = [{"epochs": 2, "resolution": 16, "batch_size": 256}]
    result = train(config_from_dict(raw, "benchmark"))
    last = result.epochs[-1]
    return last.data_wait_fraction, last.samples_per_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--resolution", type=int, default=32)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    args = parser.parse_args()
    logging.getLogger("tianfeng").setLevel(logging.WARNING)
    folder = cifar5_dir()
    src = imagefolder_source(str(folder))
    start = time.perf_counter()
    decoded_split(src, "train", args.resolution)
    build_s = time.perf_counter() - start
    arms = {
        "torch DataLoader + PIL": lambda: epoch_rate(folder, "torch", args.resolution, args.batch, args.workers),
        "DALI (CPU)": lambda: epoch_rate(folder, "dali", args.resolution, args.batch, args.workers),
        "pre-decoded cache": lambda: epoch_rate(folder, "cache", args.resolution, args.batch, args.workers),
    }
    if importlib.util.find_spec("nvidia") is None or importlib.util.find_spec("nvidia.dali") is None:
        print("data_loaders: DALI is not installed (pip install 'tianfeng[dali]'): its arm is left out",
              file=sys.stderr)
        del arms["DALI (CPU)"]
    rates = interleaved(arms, args.repeats)
    base = rates["torch DataLoader + PIL"]
    print_table(f"loaders, one epoch of cifar5-dev train (25,000 JPEGs) at {args.resolution}px, batch "
                f"{args.batch}, with augmentation; median of {args.repeats}",
                [(name, f"{r:,.0f} img/s", f"{r / base:.2f}x") for name, r in rates.items()],
                headers=("loader", "throughput", "vs PIL"))
    print(f"  (cache built once in {build_s:.1f} s if it was not there; reused after that)")
    with tempfile.TemporaryDirectory() as tmp:
        wait, rate = data_wait(folder, tmp)
    print_table("engine data wait, small proxy net (width 16, 16px, batch 256, cache loader)",
                [("data-wait share of step time", f"{100 * wait:.1f}%", f"{rate:,.0f} img/s")],
                headers=("measure", "value", "training throughput"))


if __name__ == "__main__":
    main()
