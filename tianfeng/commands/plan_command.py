"""`tianfeng plan`: the predicted wall time of a run at several GPU counts for flat,
hierarchical and compressed gradient exchange, part by part (tianfeng.hpo.walltime: the
same model the search scores recipes with), and whether its per-GPU batch fits the memory."""

from __future__ import annotations

import json
import math
import sys

from rich.console import Console

from tianfeng.costmodel import PRESETS, VARIANTS
from tianfeng.hpo.cluster import ClusterSpec, checked
from tianfeng.hpo.walltime import check_memory, format_seconds, predict_wall_time
from tianfeng.tables import add_plain_row, plain_table
from tianfeng.throughput import DEVICES
from tianfeng.trainers.config import ConfigError, load_config


def _check_flags(args) -> None:
    finite = math.isfinite
    checks = [("--gpus", args.gpus >= 1, ">= 1"), ("--gpus-per-node", args.gpus_per_node >= 1, ">= 1"),
              ("--classes", args.classes >= 2, ">= 2"),
              ("--gpu-images-per-s", args.gpu_images_per_s is None or (
                  finite(args.gpu_images_per_s) and args.gpu_images_per_s > 0), "> 0"),
              ("--val-images", args.val_images >= 0, ">= 0"),
              ("--cpu-cores-per-gpu", args.cpu_cores_per_gpu is None or (
                  finite(args.cpu_cores_per_gpu) and args.cpu_cores_per_gpu > 0), "> 0"),
              ("--memory-gib", args.memory_gib is None or (finite(args.memory_gib) and args.memory_gib > 0), "> 0"),
              ("--compute-ms", args.compute_ms is None or (finite(args.compute_ms) and args.compute_ms > 0), "> 0"),
              ("--intra-gbps", args.intra_gbps is None or (finite(args.intra_gbps) and args.intra_gbps > 0), "> 0"),
              ("--inter-gbps", args.inter_gbps is None or (finite(args.inter_gbps) and args.inter_gbps > 0), "> 0"),
              ("--intra-latency-us", args.intra_latency_us is None or (
                  finite(args.intra_latency_us) and args.intra_latency_us >= 0), ">= 0"),
              ("--inter-latency-us", args.inter_latency_us is None or (
                  finite(args.inter_latency_us) and args.inter_latency_us >= 0), ">= 0"),
              ("--adapters-per-node", args.adapters_per_node is None or args.adapters_per_node >= 1, ">= 1"),
              ("--train-images", args.train_images >= 1, ">= 1"),
              ("--overlap", 0 <= args.overlap <= 1, "between 0 and 1")]
    for flag, ok, rule in checks:
        if not ok:
            value = getattr(args, flag[2:].replace("-", "_"))
            raise ConfigError(flag, "", f"must be {rule}, got {value:g}")


def _spec(args, gpus: int, variant: str) -> ClusterSpec:
    return ClusterSpec(gpus=gpus, gpus_per_node=min(args.gpus_per_node, gpus), device=args.preset, exchange=variant,
                       overlap=args.overlap, images_per_s=args.gpu_images_per_s, intra_gbps=args.intra_gbps,
                       inter_gbps=args.inter_gbps, intra_latency_us=args.intra_latency_us,
                       inter_latency_us=args.inter_latency_us, adapters_per_node=args.adapters_per_node,
                       loader=args.loader, cpu_cores_per_gpu=args.cpu_cores_per_gpu, memory_gib=args.memory_gib)


def _images_per_s(cfg, args) -> float | None:
    """--compute-ms (one step of the last phase at --gpus) as the model's throughput at 256 per GPU."""
    if args.compute_ms is None:
        return args.gpu_images_per_s
    half = DEVICES[args.preset].half_batch
    per_gpu = math.ceil(cfg.phases[-1].batch_size / args.gpus)
    image_s = args.compute_ms / 1000 / (half + per_gpu)
    return 256 / ((half + 256) * image_s)


def run_plan_command(args) -> int:
    _check_flags(args)
    cfg = load_config(args.config)
    args.gpu_images_per_s = _images_per_s(cfg, args)
    smallest = min(p.batch_size for p in cfg.phases)
    counts = sorted({g for g in (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048) if g <= min(args.gpus, smallest)}
                    | {args.gpus})
    rows = []
    for gpus in counts:
        for variant in VARIANTS:
            spec = checked(_spec(args, gpus, variant), "command line", prefix="--")
            try:
                check_memory(cfg, spec, in_channels=3, classes=args.classes, source=str(args.config))
                fits = ""
            except ConfigError as exc:
                fits = exc.message
            w = predict_wall_time(cfg, spec, train_images=args.train_images, val_images=args.val_images,
                                  classes=args.classes)
            images = sum(p.epochs * (args.train_images // p.batch_size) * p.batch_size for p in cfg.phases)
            rows.append({"gpus": gpus, "variant": variant, "seconds": w.seconds, "gpu_hours": w.gpu_hours,
                         "steps": w.steps, "samples_per_s": images / w.train_s, "efficiency": w.efficiency,
                         "parts": w.parts, "notes": list(w.notes), "memory": fits or "fits"})
    spec = _spec(args, args.gpus, "flat")
    print(f"figures: {DEVICES[args.preset].source}; {DEVICES[args.preset].node_source}; "
          f"{PRESETS[args.preset].source}", file=sys.stderr)
    for row in rows:
        if row["gpus"] == args.gpus and row["variant"] == "flat":
            for note in row["notes"]:
                print(f"tianfeng: {note}", file=sys.stderr)
            if row["memory"] != "fits":
                print(f"tianfeng: does not fit: {row['memory']}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    last = cfg.phases[-1]
    links = spec.links()
    table = plain_table(title=f"{cfg.model.name}, {len(cfg.phases)} phase(s), {args.train_images:,} training images; "
                        f"last phase {math.ceil(last.batch_size / args.gpus)} images/GPU at {last.resolution} px on "
                        f"{args.preset.upper()}; links intra {links.intra.gbit_s:g} Gbit/s per GPU, "
                        f"{links.adapters_per_node} x {links.inter.gbit_s:g} Gbit/s adapters per node; "
                        f"{spec.loader} data on {spec.loader_cores:g} cores per GPU",
                        columns=("GPUs", "variant", "run", "start-up", "compute", "exchange", "data wait",
                                 "other", "samples/s", "scaling eff.", "memory"))
    for r in rows:
        p = r["parts"]
        other = sum(p.values()) - p["startup"] - p["compute"] - p["exchange"] - p["data_wait"]
        add_plain_row(table, str(r["gpus"]), r["variant"], format_seconds(r["seconds"]),
                      format_seconds(p["startup"]), format_seconds(p["compute"]), format_seconds(p["exchange"]),
                      format_seconds(p["data_wait"]), format_seconds(other), f"{r['samples_per_s']:,.0f}",
                      f"{100 * r['efficiency']:.1f}%", "fits" if r["memory"] == "fits" else "too big")
    Console(width=170).print(table)
    print("other: optimizer passes, noise-scale steps, SyncBN, evaluation and checkpoints; --json has each part",
          file=sys.stderr)
    return 0
