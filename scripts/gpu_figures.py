"""The GPU checks that measure figures the cost model and the engine rely on (run by
scripts/gpu_check.py): per-GPU BatchNorm against torch's BatchNorm GPU by GPU, ResNet-50's step
curve against the device table, DALI's GPU decode against the cache loader's pixels, and a short
search and promotion. Each check takes a `Target`: the device, and `quick` (tiny shapes, for the
rehearsal on a CPU that the tests run) or the real sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Target:
    device: str  # "cuda" or "cpu"
    quick: bool  # rehearsal sizes

    @property
    def torch_device(self):
        import torch

        return torch.device(self.device, 0) if self.device == "cuda" else torch.device("cpu")


def _sync(target: Target) -> None:
    import torch

    if target.device == "cuda":
        torch.cuda.synchronize()


def check_per_gpu_bn(target: Target, work: Path) -> tuple[bool, str, dict]:
    """Per-GPU BatchNorm over 8 emulated GPUs against torch's BatchNorm2d applied to each GPU's
    share in turn: outputs, input gradients and running statistics; then its training-step time
    against plain BatchNorm over the whole batch."""
    import torch
    from torch import nn

    from tianfeng.trainers import per_gpu_bn

    torch.manual_seed(0)
    device, groups = target.torch_device, 8
    per_gpu, channels, size = (4, 8, 8) if target.quick else (32, 64, 56)
    x = torch.randn(groups * per_gpu, channels, size, size, device=device)
    reference = nn.BatchNorm2d(channels).to(device)
    with torch.no_grad():
        reference.weight.uniform_(0.5, 1.5)
        reference.bias.uniform_(-0.5, 0.5)
    grouped = per_gpu_bn.convert(nn.Sequential(nn.BatchNorm2d(channels))).to(device)
    grouped[0].load_state_dict(reference.state_dict())
    per_gpu_bn.set_groups(grouped, groups)
    xa = x.clone().requires_grad_(True)
    out = grouped(xa)
    (out * torch.linspace(-1, 1, out.numel(), device=device).view_as(out)).sum().backward()
    # torch's own layer, GPU by GPU: image i is GPU i mod 8's (dealt in turn, as ranks are), each
    # share normalised by its own statistics; the running statistics kept are GPU 0's
    whole = torch.empty_like(x)
    xb = x.clone().requires_grad_(True)
    layers = []
    for r in range(groups):
        bn = nn.BatchNorm2d(channels).to(device)
        bn.load_state_dict(reference.state_dict())
        whole[r::groups] = bn(xb[r::groups])
        layers.append(bn)
    (whole * torch.linspace(-1, 1, whole.numel(), device=device).view_as(whole)).sum().backward()
    out_diff = (out - whole).abs().max().item()
    grad_diff = (xa.grad - xb.grad).abs().max().item()
    stat_diff = max((grouped[0].running_mean - layers[0].running_mean).abs().max().item(),
                    (grouped[0].running_var - layers[0].running_var).abs().max().item())

    def step_time(model: nn.Module) -> float:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(13):
            if i == 3:
                _sync(target)
                started = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            opt.step()
        _sync(target)
        return (time.perf_counter() - started) / 10

    plain = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels)).to(device)
    emulated = per_gpu_bn.convert(nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1),
                                                nn.BatchNorm2d(channels))).to(device)
    per_gpu_bn.set_groups(emulated, groups)
    plain_s, grouped_s = step_time(plain), step_time(emulated)
    tolerance = 1e-4
    ok = max(out_diff, grad_diff) < tolerance and stat_diff < 1e-5
    figures = {"outputs_max_diff": out_diff, "input_grad_max_diff": grad_diff, "running_stats_max_diff": stat_diff,
               "plain_step_ms": plain_s * 1e3, "per_gpu_step_ms": grouped_s * 1e3,
               "per_gpu_over_plain": grouped_s / plain_s}
    return ok, (f"{groups} GPUs x {per_gpu}: outputs within {out_diff:.1e}, input gradients {grad_diff:.1e}, "
                f"running statistics {stat_diff:.1e}; conv+BN step {grouped_s * 1e3:.2f} ms against "
                f"{plain_s * 1e3:.2f} ms plain ({grouped_s / plain_s:.2f}x)"), figures


def _fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares of step_s = fixed_s + b * image_s over (b, step_s) points."""
    b = np.array([p[0] for p in points], dtype=float)
    s = np.array([p[1] for p in points])
    image_s, fixed_s = np.polyfit(b, s, 1)
    return float(fixed_s), float(image_s)


def check_step_curve(target: Target, work: Path) -> tuple[bool, str, dict]:
    """ResNet-50 training steps at 224 px (each shipped space's resolution too) at per-GPU batch
    16-256, bf16 and fp16 autocast, eager and compiled: images/s and the fitted fixed and
    per-image parts beside the device table's row (an H200 is priced as the table's H100)."""
    import torch

    from tianfeng.core.run_config import ModelConfig
    from tianfeng.cost.step_time import DEVICES, reference_step_model
    from tianfeng.trainers.models import build_model

    device = target.torch_device
    if target.quick:
        # batches far enough apart that a busy CPU's noise cannot turn the per-image part negative
        name, steps = "torchvision:resnet18", 4
        combos = [("bf16", "eager", 32, (4, 32, 64))]
    else:  # eager bf16 at every shipped resolution; fp16 and compiled at 224 px (the budget is minutes)
        name, steps, batches = "resnet50", 12, (16, 32, 64, 128, 256)
        combos = [("bf16", "eager", 224, batches), ("fp16", "eager", 224, batches), ("bf16", "eager", 128, batches),
                  ("bf16", "eager", 160, batches), ("bf16", "compiled", 224, (32, 128, 256))]
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    rows, fits = [], {}
    for precision, mode, resolution, batches in combos:
        points = []
        for batch in batches:
            model = build_model(ModelConfig(name=name), 3, 1000).to(device, memory_format=torch.channels_last)
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
            run = torch.compile(model, dynamic=False) if mode == "compiled" else model
            x = torch.randn(batch, 3, resolution, resolution, device=device).contiguous(
                memory_format=torch.channels_last)
            y = torch.randint(0, 1000, (batch,), device=device)
            for i in range(steps + 3):
                if i == 3:
                    _sync(target)
                    started = time.perf_counter()
                with torch.autocast(device.type, dtype=dtypes[precision]):
                    loss = torch.nn.functional.cross_entropy(run(x), y)
                opt.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            _sync(target)
            step_s = (time.perf_counter() - started) / steps
            points.append((batch, step_s))
            rows.append({"precision": precision, "mode": mode, "resolution": resolution, "batch": batch,
                         "step_ms": step_s * 1e3, "images_per_s": batch / step_s})
        fixed_s, image_s = _fit(points)
        fits[f"{precision}-{mode}-{resolution}"] = {"fixed_s": fixed_s, "image_s": image_s,
                                                    "half_batch": fixed_s / image_s if image_s > 0 else None}
    row = DEVICES["h100"]
    table = reference_step_model(row.mixed_images_per_s, row.batch, row.half_batch)
    key = f"bf16-eager-{combos[0][2]}"
    measured = fits[key]
    ok = all(r["images_per_s"] > 0 for r in rows) and measured["image_s"] > 0
    text = (f"{name} {key}: fixed {measured['fixed_s'] * 1e3:.2f} ms + {measured['image_s'] * 1e6:.1f} us/image "
            f"(half peak at {measured['half_batch'] or 0:.0f} images); the table's H100 row: fixed "
            f"{table.fixed_s * 1e3:.2f} ms + {table.image_s * 1e6:.1f} us/image (half peak at {row.half_batch:.0f}); "
            + ", ".join(f"b{r['batch']} {r['images_per_s']:,.0f} img/s" for r in rows
                        if f"{r['precision']}-{r['mode']}-{r['resolution']}" == key))
    return ok, text, {"model": name, "points": rows, "fits": fits,
                      "table_h100": {"fixed_s": table.fixed_s, "image_s": table.image_s,
                                     "half_batch": row.half_batch}}


def _image_folder(folder: Path, per_class: int, size: tuple[int, int]) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", per_class), ("val", max(2, per_class // 4))):
        for c in range(4):
            d = folder / split / f"class{c}"
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 255, (*size, 3), dtype=np.uint8)).save(d / f"{i}.jpg", quality=90)


def check_dali_pixels(target: Target, work: Path) -> tuple[bool, str, dict]:
    """DALI's decode on the device against the cache loader's PIL decode of the same JPEG files,
    at the images' own 32 px (no resize on either side): each image DALI delivers is matched to
    its file, and the largest and mean pixel differences (0-255) are the two IDCTs' rounding."""
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return False, "DALI is not installed here (pip install 'tianfeng[dali]')", {}
    import torch

    from tianfeng.core.run_config import DataConfig
    from tianfeng.trainers.data.decode import decode_file
    from tianfeng.trainers.data.loaders import build_pipeline
    from tianfeng.trainers.data.sources import imagefolder_source

    folder = work / "images"
    _image_folder(folder, 8 if target.quick else 64, (32, 32))
    source = imagefolder_source(str(folder))
    cfg = DataConfig(source=f"imagefolder:{folder}", loader="dali", workers=2)
    pipe, _ = build_pipeline(source, cfg, seed=5, train_indices=np.arange(len(source.train)), resolution=32,
                             rank=0, world=1, device=target.torch_device)
    reference = torch.from_numpy(np.stack([decode_file(f, 32, 3) for f in source.train.files])).int()
    batch = 8
    iterator = pipe._iterator(32, batch)
    worst, matched, wrong_label = [], set(), 0
    for _ in range(len(source.train) // batch):
        images, labels = pipe._next(iterator)
        for image, label in zip(images.cpu().int(), labels.tolist(), strict=True):
            distance = (reference - image).abs().flatten(1).max(dim=1).values
            nearest = int(distance.argmin())
            wrong_label += int(source.train.labels[nearest] != label)
            worst.append(int(distance[nearest]))
            matched.add(nearest)
    mean = float(np.mean(worst))
    ok = len(matched) == len(source.train) and not wrong_label and max(worst) <= 3 and mean <= 1.5
    return ok, (f"{len(matched)} of {len(source.train)} files matched on {target.device}, {wrong_label} with "
                f"another label; pixel difference largest {max(worst)}, mean of each image's largest {mean:.2f}"), {
        "files": len(source.train), "matched": len(matched), "max_abs_diff": max(worst), "mean_max_diff": mean}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-m", "tianfeng.cli", *args], capture_output=True, text=True,
                          timeout=600, env=env, cwd=cwd)


def check_search(target: Target, work: Path) -> tuple[bool, str, dict]:
    """A short proxy search of the shipped large-batch space on digits on the device, then one
    promotion of the front's fastest trial: trials per minute against the README's dated CPU
    figure, the promotion's exit and the report written."""
    trials = "4" if target.quick else "12"
    db = f"sqlite:///{work / 'search.db'}"
    started = time.perf_counter()
    searched = _cli("search", "--space", "large_batch.yaml", "--storage", db, "--study", "gpu", "--trials", trials,
                    "--runs-dir", str(work / "runs"), cwd=work)  # the space's device: auto, a GPU where there is one
    search_s = time.perf_counter() - started
    if searched.returncode != 0:
        return False, f"search exit {searched.returncode}: {searched.stderr.strip().splitlines()[-1:]}", {}
    started = time.perf_counter()
    promoted = _cli("promote", "--fastest-to", "0", "--study", "gpu", "--storage", db, "--runs-dir", str(work / "promoted"),
                    "--json", cwd=work)
    promote_s = time.perf_counter() - started
    report = work / "reports" / "gpu.html"
    ok = promoted.returncode == 0 and report.exists()
    per_minute = int(trials) / search_s * 60
    return ok, (f"{trials} trials in {search_s:.0f} s ({per_minute:.1f} trials/min), promotion exit "
                f"{promoted.returncode} in {promote_s:.0f} s, report {'written' if report.exists() else 'missing'}"), {
        "trials": int(trials), "search_s": search_s, "trials_per_min": per_minute, "promote_s": promote_s,
        "promote_exit": promoted.returncode, "promote_stderr_tail": promoted.stderr[-500:]}


def versions() -> dict:
    """What the machine has: the recorded versions that every figure is measured with."""
    import platform

    import torch

    found = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
             "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}
    if torch.cuda.is_available():
        found |= {"gpu": torch.cuda.get_device_name(0), "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
                  "nccl": ".".join(map(str, torch.cuda.nccl.version()))}
    try:
        import nvidia.dali

        found["dali"] = nvidia.dali.__version__
    except ImportError:
        found["dali"] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
        found["commit"] = commit.stdout.strip() or None
    except OSError:
        found["commit"] = None
    found["date"] = time.strftime("%Y-%m-%d")
    return found


FIGURE_CHECKS = {"per_gpu_bn": check_per_gpu_bn, "step_curve": check_step_curve, "dali": check_dali_pixels,
                 "search": check_search}


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, default=str))
