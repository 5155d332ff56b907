"""`tianfeng plan`: the predicted wall time of a run at several GPU counts for flat,
hierarchical and compressed gradient exchange, part by part (tianfeng.hpo.walltime: the
same model the search scores recipes with), and whether its per-GPU batch fits the memory."""

from __future__ import annotations

import json
import math
import sys

from rich.console import Console

from tianfeng import api
from tianfeng.costmodel import PRESETS
from tianfeng.hpo.walltime import format_seconds
from tianfeng.tables import add_plain_row, plain_table
from tianfeng.throughput import DEVICES
from tianfeng.trainers.config import ConfigError


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


def run_plan_command(args) -> int:
    _check_flags(args)
    grid = api.plan(args.config, gpus=args.gpus, gpus_per_node=args.gpus_per_node, device=args.preset,
                    train_images=args.train_images, val_images=args.val_images, classes=args.classes,
                    compute_ms=args.compute_ms, overlap=args.overlap, intra_gbps=args.intra_gbps,
                    inter_gbps=args.inter_gbps, intra_latency_us=args.intra_latency_us,
                    inter_latency_us=args.inter_latency_us, adapters_per_node=args.adapters_per_node,
                    loader=args.loader, cpu_cores_per_gpu=args.cpu_cores_per_gpu, memory_gib=args.memory_gib,
                    images_per_s=args.gpu_images_per_s)
    cfg, spec, rows = grid.config, grid.cluster, grid.rows
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
