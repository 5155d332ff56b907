"""`tianfeng plan`: predicted step time, samples/s and scaling efficiency of a run at several
GPU counts for flat, hierarchical and compressed gradient exchange."""

from __future__ import annotations

import json
import math
import sys

from rich.console import Console

from tianfeng.costmodel import PRESETS, VARIANTS, Cluster, Link, Phase, predict_run
from tianfeng.tables import add_plain_row, plain_table
from trainers.config import ConfigError, load_config
from trainers.models import build_model


def _check_flags(args) -> None:
    finite = math.isfinite
    checks = [("--gpus", args.gpus >= 1, ">= 1"), ("--gpus-per-node", args.gpus_per_node >= 1, ">= 1"),
              ("--classes", args.classes >= 2, ">= 2"),
              ("--gpu-images-per-s", finite(args.gpu_images_per_s) and args.gpu_images_per_s > 0, "> 0"),
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
    cfg = load_config(args.config)
    preset = PRESETS[args.preset]
    intra = Link(args.intra_gbps or preset.intra.gbit_s,
                 preset.intra.latency_us if args.intra_latency_us is None else args.intra_latency_us)
    inter = Link(args.inter_gbps or preset.inter.gbit_s,
                 preset.inter.latency_us if args.inter_latency_us is None else args.inter_latency_us)
    adapters = args.adapters_per_node or preset.adapters_per_node
    params = sum(p.numel() for p in build_model(cfg.model, 3, args.classes).parameters())
    grad_bytes = params * 4  # fp32 gradients, as DDP exchanges them
    bucket_bytes = (25.0 if cfg.distributed.bucket_mb == "auto" else cfg.distributed.bucket_mb) * 2**20
    last = cfg.phases[-1]
    counts = sorted({g for g in (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048) if g <= args.gpus} | {args.gpus})
    rows = []
    for gpus in counts:
        phases = []
        for ph in cfg.phases:  # every phase: its own per-GPU batch and resolution
            per_gpu = max(1, ph.batch_size // gpus)
            if args.compute_ms is not None:
                step_s = args.compute_ms / 1000 * (per_gpu / max(1, last.batch_size // gpus))
            else:
                step_s = per_gpu / args.gpu_images_per_s
            phases.append(Phase(ph.epochs * max(1, args.train_images // ph.batch_size), per_gpu,
                                step_s * (ph.resolution / last.resolution) ** 2))
        cluster = Cluster(gpus, args.gpus_per_node, intra, inter, adapters)
        for variant in VARIANTS:
            rows.append(predict_run(variant, cluster, grad_bytes=grad_bytes, phases=phases,
                                    bucket_bytes=bucket_bytes, backward_share=args.overlap))
    print(f"link figures: {preset.source}", file=sys.stderr)
    if args.json:
        print(json.dumps([vars(r) for r in rows], indent=2))
        return 0
    table = plain_table(title=f"{cfg.model.name}: {params / 1e6:.1f}M params ({grad_bytes / 2**20:.0f} MiB of fp32 "
                        f"gradients, {bucket_bytes / 2**20:g} MiB buckets), {len(cfg.phases)} phase(s), "
                        f"{args.train_images:,} training images; last phase {max(1, last.batch_size // args.gpus)} "
                        f"images/GPU at {last.resolution} px; links: {args.preset} preset, intra {intra.gbit_s:g} "
                        f"Gbit/s per GPU, {adapters} x {inter.gbit_s:g} Gbit/s adapters per node; overlapping "
                        f"exchanges hide behind {args.overlap:.0%} of the compute except the last bucket's",
                        columns=("GPUs", "variant", "comm ms", "step ms", "samples/s", "scaling eff.", "run min"))
    for r in rows:
        add_plain_row(table, str(r.gpus), r.variant, f"{1000 * r.comm_s:.1f}", f"{1000 * r.step_s:.1f}",
                      f"{r.samples_per_s:,.0f}", f"{100 * r.efficiency:.1f}%", f"{r.run_s / 60:.1f}")
    Console(width=160).print(table)
    return 0
