"""The first checks to run on a GPU machine (see scripts/gpu_check.sh): each prints PASS or FAIL
with its figures and takes under 10 minutes. Without a CUDA GPU it says so and runs nothing.

Checks: nccl (torchrun, one process per GPU, synthetic ResNet-50 data, clean exit), resume
(kill -9 mid-run, resume at half the world size), precision (bf16/fp16 chosen by capability;
host syncs and optimizer kernels per step under the profiler), overlap (flat and hierarchical
exchange under the profiler: how much of the NCCL time runs beside compute), loaders (cache,
DALI and torch loaders on a generated image folder: images/s, data wait, cache size), and the
figure checks of scripts/gpu_figures.py (per_gpu_bn, step_curve, dali, search). With --out DIR
it writes versions.json and results.json there, after every check; the whole run stops starting
checks after --budget seconds (8 minutes). --device cpu --quick rehearses the figure checks on
this CPU (tests/test_gpu_check.py runs it)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_figures import FIGURE_CHECKS, Target, versions, write_json  # noqa: E402 - beside this script

LIMIT_S = 600  # every check stops here


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}


def _torchrun(world: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={world}", *args]


def _train_args(run_dir: Path, *sets: str) -> list[str]:
    base = ["device=cuda", f"run_dir={run_dir}", "model.name=resnet50", "data.source=synthetic",
            "data.synthetic_classes=1000", "log_every_steps=10"]
    return ["-m", "tianfeng.cli", "train", *[a for s in (*base, *sets) for a in ("--set", s)]]


def _metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def check_nccl(gpus: int, work: Path) -> tuple[bool, str]:
    world = min(8, gpus)
    run = work / "nccl"
    started = time.monotonic()
    out = subprocess.run(_torchrun(world, *_train_args(
        run, "phases.0.epochs=1", "phases.0.resolution=224", f"phases.0.batch_size={64 * world}",
        f"data.synthetic_images={64 * world * 12}")), capture_output=True, text=True, timeout=LIMIT_S, env=_env())
    took = time.monotonic() - started
    result = json.loads((run / "result.json").read_text()) if (run / "result.json").exists() else {}
    metrics = _metrics(run)
    ok = out.returncode == 0 and result.get("status") == "completed"
    figures = (f"{world} ranks, exit {out.returncode}, {took:.0f} s, "
               f"{metrics[-1]['samples_per_s']:,.0f} images/s" if metrics else f"exit {out.returncode}")
    return ok, figures + ("" if ok else f"; stderr: {out.stderr.strip().splitlines()[-1:]}")


def check_resume(gpus: int, work: Path) -> tuple[bool, str]:
    world = min(8, gpus) - min(8, gpus) % 2
    if world < 2:
        return False, "needs 2 GPUs"
    run = work / "resume"
    args = _train_args(run, "phases.0.epochs=2", "phases.0.resolution=128", f"phases.0.batch_size={32 * world}",
                       f"data.synthetic_images={32 * world * 40}", "checkpoint.every_steps=10")
    proc = subprocess.Popen(_torchrun(world, *args), env=_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt, deadline = run / "checkpoints" / "last.pt", time.monotonic() + LIMIT_S / 2
    while time.monotonic() < deadline and not ckpt.exists() and proc.poll() is None:
        time.sleep(0.5)
    if not ckpt.exists():
        proc.kill()
        return False, "no checkpoint was written"
    os.killpg(proc.pid, signal.SIGKILL)  # every rank, mid-run
    proc.wait()
    out = subprocess.run(_torchrun(world // 2, *args), capture_output=True, text=True, timeout=LIMIT_S, env=_env())
    result = json.loads((run / "result.json").read_text()) if (run / "result.json").exists() else {}
    ok = out.returncode == 0 and "resumed from" in out.stderr and result.get("status") == "completed"
    return ok, (f"killed {world} ranks after a checkpoint, resumed on {world // 2}: exit {out.returncode}, "
                f"status {result.get('status')}, {len(_metrics(run))} epochs recorded")


def check_precision(gpus: int, work: Path) -> tuple[bool, str]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from tianfeng.core.run_config import load_config
    from tianfeng.trainers import engine
    from tianfeng.trainers.precision import resolve_mode

    mode, reason = resolve_mode("auto", torch.device("cuda", 0))
    major, minor = torch.cuda.get_device_capability(0)
    expected = "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16"
    cfg = load_config(None, ["device=cuda", f"run_dir={work / 'precision'}", "model.name=resnet50",
                             "data.source=synthetic", "data.synthetic_images=2048", "data.synthetic_classes=1000",
                             "phases.0.epochs=1", "phases.0.resolution=224", "phases.0.batch_size=64",
                             "optimizer.name=lars", "checkpoint.every_epochs=0"])
    steps = 48
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        engine.train(cfg, max_steps=steps)
    events = prof.key_averages()
    syncs = sum(e.count for e in events if e.key in ("cudaStreamSynchronize", "cudaDeviceSynchronize",
                                                      "aten::_local_scalar_dense"))
    optimizer_kernels = sum(e.count for e in events if "multi_tensor" in e.key or "foreach" in e.key
                            or e.key.startswith("aten::_foreach"))
    ok = mode == expected and syncs / steps <= 1.0
    return ok, (f"GPU capability {major}.{minor}: auto picked {mode} ({reason}), expected {expected}; "
                f"{syncs / steps:.2f} host syncs per step, {optimizer_kernels / steps:.0f} multi-tensor "
                "optimizer ops per step")


def _overlap_worker(out_path: str, hook: str) -> None:
    """Under torchrun: DDP ResNet-50 steps with the engine's hooks; rank 0 profiles steps 5-9 and
    writes how much NCCL kernel time ran while a non-NCCL kernel ran too."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from tianfeng.core.run_config import ModelConfig
    from tianfeng.trainers.comm import hierarchical
    from tianfeng.trainers.models import build_model

    local = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    model = build_model(ModelConfig(name="resnet50"), 3, 1000).to(device, memory_format=torch.channels_last)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    if hook != "flat":
        state = hierarchical.build_state(max(1, dist.get_world_size() // 2))
        ddp.register_comm_hook(state, hierarchical.hierarchical_allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(64, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (64,), device=device)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16 if torch.cuda.is_bf16_supported(False) else torch.float16):
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    step_ms = (time.perf_counter() - started) / 5 * 1000
    kernels = [(e.time_range.start, e.time_range.end, "nccl" in e.name.lower()) for e in prof.events()
               if e.device_type.name == "CUDA"]
    nccl = [(s, e) for s, e, is_nccl in kernels if is_nccl]
    compute = sorted((s, e) for s, e, is_nccl in kernels if not is_nccl)
    total = sum(e - s for s, e in nccl) or 1
    hidden = sum(max(0, min(e, ce) - max(s, cs)) for s, e in nccl for cs, ce in compute if cs < e and ce > s)
    if dist.get_rank() == 0:
        Path(out_path).write_text(json.dumps({"step_ms": step_ms, "overlap": min(1.0, hidden / total),
                                              "nccl_ms": total / 1000 / 5}))
    dist.destroy_process_group()


def check_overlap(gpus: int, work: Path) -> tuple[bool, str]:
    world = min(8, gpus) - min(8, gpus) % 2
    if world < 2:
        return False, "needs 2 GPUs"
    figures, ok = [], True
    for hook in ("flat", "hierarchical"):
        out_path = work / f"overlap-{hook}.json"
        out = subprocess.run(_torchrun(world, str(Path(__file__)), "_overlap_worker", str(out_path), hook),
                             capture_output=True, text=True, timeout=LIMIT_S, env=_env())
        if out.returncode != 0 or not out_path.exists():
            ok = False
            figures.append(f"{hook}: exit {out.returncode}")
            continue
        r = json.loads(out_path.read_text())
        figures.append(f"{hook}: {r['step_ms']:.1f} ms/step, NCCL {r['nccl_ms']:.1f} ms/step, "
                       f"{100 * r['overlap']:.0f}% of it beside compute")
    return ok, f"{world} ranks as 2 nodes; " + "; ".join(figures)


def check_loaders(gpus: int, work: Path) -> tuple[bool, str]:
    import numpy as np
    import torch
    from PIL import Image

    from tianfeng.core.run_config import DataConfig
    from tianfeng.trainers.data.loaders import build_pipeline
    from tianfeng.trainers.data.sources import imagefolder_source

    folder = work / "images"
    rng = np.random.default_rng(0)
    for split, n in (("train", 2000), ("val", 200)):
        for c in range(4):
            d = folder / split / f"class{c}"
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n // 4):
                Image.fromarray(rng.integers(0, 255, (160, 200, 3), dtype=np.uint8)).save(d / f"{i}.jpg")
    source = imagefolder_source(str(folder))
    figures, ok = [], True
    for loader in ("cache", "dali", "torch"):
        cache = work / f"cache-{loader}"
        cfg = DataConfig(source=f"imagefolder:{folder}", loader=loader, cache_dir=str(cache), workers=4)
        try:
            pipe, _ = build_pipeline(source, cfg, seed=0, train_indices=np.arange(len(source.train)),
                                     resolution=128, device=torch.device("cuda", 0))
            pipe.prepare([128])
            started, images = time.perf_counter(), 0
            for x, _y in pipe.train_batches(0, 128, 250):
                images += len(x)
            torch.cuda.synchronize()
            took = time.perf_counter() - started
            size = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) if cache.exists() else 0
            figures.append(f"{loader} {images / took:,.0f} images/s, cache {size / 2**20:.0f} MiB")
            if loader != "cache" and size:
                ok = False  # the streaming loaders must not build the decoded cache
        except Exception as exc:  # noqa: BLE001 - reported as the check's failure
            ok = False
            figures.append(f"{loader} failed: {type(exc).__name__}: {exc}")
    return ok, "; ".join(figures)


CUDA_CHECKS = {"nccl": check_nccl, "resume": check_resume, "precision": check_precision,
               "overlap": check_overlap, "loaders": check_loaders}
CHECKS = [*CUDA_CHECKS, *FIGURE_CHECKS]
BUDGET_S = 8 * 60  # the whole script on one GPU node: no check starts past it


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_overlap_worker":
        _overlap_worker(sys.argv[2], sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checks", nargs="*", help=f"some of {', '.join(CHECKS)} (default: all)")
    parser.add_argument("--out", type=Path, help="write versions.json, results.json and each check's figures here")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu rehearses the figure checks (per_gpu_bn, step_curve, dali, search) on this CPU")
    parser.add_argument("--quick", action="store_true", help="tiny shapes: the rehearsal's sizes")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help=f"seconds in all (default {BUDGET_S})")
    args = parser.parse_args()
    unknown = [c for c in args.checks if c not in CHECKS]
    if unknown:
        parser.error(f"unknown check {unknown[0]!r}; allowed: {', '.join(CHECKS)}")
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = args.checks or (CHECKS if args.device == "cuda" else list(FIGURE_CHECKS))
    if args.device == "cpu" and any(n in CUDA_CHECKS for n in names):
        parser.error(f"--device cpu: {', '.join(n for n in names if n in CUDA_CHECKS)} need a CUDA GPU")
    if args.device == "cuda" and gpus == 0:
        print(f"gpu_check: no CUDA GPU visible to torch {torch.__version__} (CUDA build: "
              f"{torch.version.cuda or 'none'}): nothing was run. Run this on a GPU node.")
        return 0
    found = versions()
    print("gpu_check: " + ", ".join(f"{k} {v}" for k, v in found.items() if v is not None), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        write_json(args.out / "versions.json", found)
    target, results, deadline = Target(args.device, args.quick), [], time.monotonic() + args.budget
    with tempfile.TemporaryDirectory(prefix="tianfeng-gpu-check-") as tmp:
        for name in names:
            if time.monotonic() > deadline:
                results.append({"check": name, "ok": False, "text": "not run: the time budget was spent"})
                print(f"SKIP {name}: the {args.budget:.0f} s budget was spent", flush=True)
                continue
            work = Path(tmp) / name
            work.mkdir()
            started = time.monotonic()
            figures: dict = {}
            try:
                if name in CUDA_CHECKS:
                    ok, text = CUDA_CHECKS[name](gpus, work)
                else:
                    ok, text, figures = FIGURE_CHECKS[name](target, work)
            except Exception as exc:  # noqa: BLE001 - one check's crash is its FAIL, not the script's
                ok, text = False, f"{type(exc).__name__}: {exc}"
            took = time.monotonic() - started
            print(f"{'PASS' if ok else 'FAIL'} {name} ({took:.0f} s): {text}", flush=True)
            results.append({"check": name, "ok": ok, "seconds": round(took, 1), "text": text, "figures": figures})
            if args.out:  # after every check: a run cut short keeps what it measured
                write_json(args.out / "results.json", {"versions": found, "target": dataclasses.asdict(target),
                                                        "results": results})
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
