"""`tianfeng plan`: predicted step time, samples/s and scaling efficiency of a run at several
GPU counts for flat, hierarchical and compressed gradient exchange."""

from __future__ import annotations

import json
import math

from rich.console import Console

from tianfeng.costmodel import VARIANTS, Cluster, Link, predict
from tianfeng.tables import add_plain_row, plain_table
from trainers.config import ConfigError, load_config
from trainers.models import build_model


def _check_flags(args) -> None:
    finite = math.isfinite
    checks = [("--gpus", args.gpus >= 1, ">= 1"), ("--gpus-per-node", args.gpus_per_node >= 1, ">= 1"),
              ("--classes", args.classes >= 2, ">= 2"),
              ("--gpu-images-per-s", finite(args.gpu_images_per_s) and args.gpu_images_per_s > 0, "> 0"),
              ("--compute-ms", args.compute_ms is None or (finite(args.compute_ms) and args.compute_ms > 0), "> 0"),
              ("--intra-gbps", finite(args.intra_gbps) and args.intra_gbps > 0, "> 0"),
              ("--inter-gbps", finite(args.inter_gbps) and args.inter_gbps > 0, "> 0"),
              ("--intra-latency-us", finite(args.intra_latency_us) and args.intra_latency_us >= 0, ">= 0"),
              ("--inter-latency-us", finite(args.inter_latency_us) and args.inter_latency_us >= 0, ">= 0"),
              ("--overlap", 0 <= args.overlap <= 1, "between 0 and 1")]
    for flag, ok, rule in checks:
        if not ok:
            value = getattr(args, flag[2:].replace("-", "_"))
            raise ConfigError(flag, "", f"must be {rule}, got {value:g}")


def run_plan_command(args) -> int:
    _check_flags(args)
    cfg = load_config(args.config)
    classes = args.classes
    params = sum(p.numel() for p in build_model(cfg.model, 3, classes).parameters())
    grad_bytes = params * 4  # fp32 gradients, as DDP exchanges them
    per_gpu_batch = max(1, cfg.phases[-1].batch_size // args.gpus)
    compute_s = per_gpu_batch / args.gpu_images_per_s if args.compute_ms is None else args.compute_ms / 1000
    intra, inter = Link(args.intra_gbps, args.intra_latency_us), Link(args.inter_gbps, args.inter_latency_us)
    counts = sorted({g for g in (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048) if g <= args.gpus} | {args.gpus})
    rows = []
    for gpus in counts:
        cluster = Cluster(gpus, args.gpus_per_node, intra, inter)
        for variant in VARIANTS:
            p = predict(variant, cluster, grad_bytes=grad_bytes, compute_s=compute_s,
                        per_gpu_batch=per_gpu_batch, overlap=args.overlap)
            rows.append(p)
    if args.json:
        print(json.dumps([vars(r) for r in rows], indent=2))
        return 0
    table = plain_table(title=f"{cfg.model.name}: {params / 1e6:.1f}M params ({grad_bytes / 2**20:.0f} MiB of fp32 "
                        f"gradients), {per_gpu_batch} images/GPU, compute {1000 * compute_s:.0f} ms/step; "
                        f"links: intra {args.intra_gbps:g} Gbit/s, inter {args.inter_gbps:g} Gbit/s; "
                        f"overlap {args.overlap:g}",
                        columns=("GPUs", "variant", "comm ms", "step ms", "samples/s", "scaling eff."))
    for r in rows:
        add_plain_row(table, str(r.gpus), r.variant, f"{1000 * r.comm_s:.1f}", f"{1000 * r.step_s:.1f}",
                      f"{r.samples_per_s:,.0f}", f"{100 * r.efficiency:.1f}%")
    Console().print(table)
    return 0
