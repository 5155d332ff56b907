"""`tianfeng plan`: predicted step time, samples/s and scaling efficiency of a run at several
GPU counts for flat, hierarchical and compressed gradient exchange."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from tianfeng.costmodel import VARIANTS, Cluster, Link, predict
from trainers.config import ConfigError, load_config
from trainers.models import build_model


def run_plan_command(args) -> int:
    cfg = load_config(args.config)
    if args.gpus < 1 or args.gpus_per_node < 1:
        raise ConfigError("--gpus", "", f"--gpus and --gpus-per-node must be >= 1, got {args.gpus}, {args.gpus_per_node}")
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
    table = Table(title=f"{cfg.model.name}: {params / 1e6:.1f}M params ({grad_bytes / 2**20:.0f} MiB of fp32 "
                        f"gradients), {per_gpu_batch} images/GPU, compute {1000 * compute_s:.0f} ms/step; "
                        f"links: intra {args.intra_gbps:g} Gbit/s, inter {args.inter_gbps:g} Gbit/s; "
                        f"overlap {args.overlap:g}", title_justify="left")
    for column in ("GPUs", "variant", "comm ms", "step ms", "samples/s", "scaling eff."):
        table.add_column(column)
    for r in rows:
        table.add_row(str(r.gpus), r.variant, f"{1000 * r.comm_s:.1f}", f"{1000 * r.step_s:.1f}",
                      f"{r.samples_per_s:,.0f}", f"{100 * r.efficiency:.1f}%")
    Console().print(table)
    return 0
