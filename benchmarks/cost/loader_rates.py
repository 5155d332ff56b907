"""Images per second per CPU core of the two CPU data paths the wall-time model prices, at the
resolutions a run trains at, on an ImageNet-sized JPEG (500 x 375, quality 90, the data set's
typical size): the torch loader's decode + resize per image, and the cache loader's batched
normalise + random-resized-crop of pre-decoded images. One thread: the per-core figures the
model multiplies by `cluster.cpu_cores_per_gpu`. The ratio printed is each rate against the
torch loader's at 224 px, measured in the same run."""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # common.py, one folder up

import numpy as np
import torch
from common import ROOT  # noqa: F401  (puts the repository on the path)
from PIL import Image

from tianfeng.trainers.data.augment import AugmentSpec, normalise_and_augment, sample_theta
from tianfeng.trainers.data.decode import decode_file


def _jpeg(path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    # smooth content with noise, as photographs compress: not a flat image JPEG decodes for free
    base = rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)
    img = Image.fromarray(base).resize((500, 375), Image.BICUBIC)
    arr = np.clip(np.asarray(img, dtype=np.int16) + rng.integers(-12, 12, (375, 500, 3)), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=90)
    path.write_bytes(buf.getvalue())


def decode_rate(files: list[Path], resolution: int, seconds: float) -> float:
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        decode_file(str(files[done % len(files)]), resolution, 3)
        done += 1
    return done / (time.perf_counter() - start)


def cache_rate(resolution: int, stored: int, batch: int, seconds: float) -> float:
    images = torch.randint(0, 255, (batch, stored, stored, 3), dtype=torch.uint8)
    mean, std = torch.tensor([120.0, 115.0, 100.0]), torch.tensor([60.0, 60.0, 60.0])
    spec = AugmentSpec(kind="random_resized_crop", flip=True, min_crop_scale=0.35)
    gen = torch.Generator().manual_seed(0)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        theta = sample_theta(spec, batch, resolution, gen)
        normalise_and_augment(images, mean, std, theta, resolution, torch.channels_last)
        done += batch
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="timing per figure")
    parser.add_argument("--resolutions", default="128,224,288")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        files = [Path(tmp) / f"{i}.jpg" for i in range(16)]
        for i, f in enumerate(files):
            _jpeg(f, i)
        resolutions = [int(r) for r in args.resolutions.split(",")]
        rows = []
        for r in resolutions:
            rows.append((r, decode_rate(files, r, args.seconds), cache_rate(r, max(r, 256), 64, args.seconds)))
    base = next((d for r, d, _ in rows if r == 224), rows[0][1])
    print(f"{'px':>5} {'torch img/s/core':>17} {'ratio':>6} {'cache img/s/core':>17} {'ratio':>6}")
    for r, d, c in rows:
        print(f"{r:>5} {d:>17.0f} {d / base:>6.2f} {c:>17.0f} {c / base:>6.2f}")


if __name__ == "__main__":
    main()
