"""`tianfeng plan`: a run's predicted wall time, part by part, at many GPUs."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tianfeng.core.errors import ConfigError
from tianfeng.cost.grid_options import PlanOptions
from tianfeng.verbs import Verb
from tianfeng.verbs._flags import ConfigFlag, options_from_flags


def plan(config: str | Path, options: PlanOptions | None = None, **changes: Any):
    """A run config's predicted wall time at 1, 8, 16, ... up to `gpus` GPUs for flat, hierarchical
    and compressed exchange, part by part, and whether each per-GPU batch fits the GPU. `options`
    (a `PlanOptions`) holds what `tianfeng plan` takes as flags; keyword arguments change single
    options: `plan("run.yaml", gpus=128, preset="a100")`. Returns a
    `tianfeng.cost.grid.WallTimeGrid`. As `tianfeng plan`."""

    from tianfeng.core.run_config import load_config
    from tianfeng.cost.grid import wall_time_grid
    from tianfeng.cost.step_time import DEVICES

    o = (options or PlanOptions()).changed(**changes).checked()
    cfg = load_config(config)
    images_per_s = o.gpu_images_per_s
    if o.compute_ms is not None:  # the model's throughput at 256 per GPU, from one step's time (it wins)
        half = DEVICES[o.preset].half_batch
        image_s = o.compute_ms / 1000 / (half + math.ceil(cfg.phases[-1].batch_size / o.gpus))
        images_per_s = 256 / ((half + 256) * image_s)
    classes, in_channels = o.classes, 3
    if o.profile:  # a profile of this very model measured it on its data: its head and input
        from tianfeng.core.run_config import config_to_dict
        from tianfeng.cost.cluster import read_throughput

        measured = read_throughput(o.profile, "--profile", "")
        if measured.get("model") == config_to_dict(cfg)["model"]:
            classes, in_channels = measured["classes"], measured["in_channels"]
    return wall_time_grid(cfg, o.cluster(images_per_s), train_images=o.train_images, val_images=o.val_images,
                          classes=classes, source=str(config), in_channels=in_channels)


def predict(config: str | Path | None = None, overrides: Sequence[str] = (), *, gpus: int, gpus_per_node: int = 8,
            device: str = "v100", train_images: int = 1_281_167, val_images: int = 50_000, classes: int = 1000,
            startup: bool = True, **cluster: Any):
    """The predicted wall time of a run config on a cluster, part by part (start-up, compute,
    exchange, data waits, evaluation, checkpoints): the model the search scores recipes with and
    `tianfeng plan` prints. `cluster` takes the other keys of a space's `cluster:` section
    (exchange, loader, cpu_cores_per_gpu, memory_gib, ...). Raises ConfigError when a phase's
    per-GPU batch does not fit the GPU's memory. Returns a `tianfeng.cost.walltime.WallTime`."""
    from tianfeng.core.run_config import load_config
    from tianfeng.cost.cluster import ClusterSpec, checked
    from tianfeng.cost.walltime import check_memory, predict_wall_time

    cfg = load_config(config, overrides)
    try:
        spec = checked(ClusterSpec(gpus=gpus, gpus_per_node=gpus_per_node, device=device, **cluster), "predict",
                       prefix="")
    except TypeError as exc:
        raise ConfigError("predict", "", f"{exc}; the cluster keys are those of a space's cluster: section") from None
    check_memory(cfg, spec, in_channels=3, classes=classes, source=str(config or "the default config"))
    return predict_wall_time(cfg, spec, train_images=train_images, val_images=val_images, classes=classes,
                             startup=startup)


def command(args: argparse.Namespace) -> int:
    from tianfeng.cost.exchange import PRESETS
    from tianfeng.cost.step_time import DEVICES
    from tianfeng.cost.walltime import format_seconds
    from tianfeng.terminal.tables import add_plain_row, plain_table, table_console

    grid = plan(args.config, options_from_flags(args, PlanOptions))
    cfg, spec, rows = grid.config, grid.cluster, grid.rows
    if args.profile:
        print("figures: " + ", ".join(f"{k} {v}" for k, v in spec.figure_sources().items())
              + f" (profile {args.profile})", file=sys.stderr)
    else:
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
                        f"{'measured' if args.profile else args.preset.upper()}; links intra {links.intra.gbit_s:g} Gbit/s per GPU, "
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
    table_console().print(table)
    print("other: optimizer passes, noise-scale steps, SyncBN, evaluation and checkpoints; --json has each part",
          file=sys.stderr)
    return 0


VERB = Verb(
    "plan", "predict a run's wall time, part by part, at many GPUs",
    "The predicted wall time of a run (start-up, compute, exchange, data, evaluation, checkpoints) at several GPU "
    "counts for flat, hierarchical and compressed gradient exchange, with scaling efficiency and whether the "
    "per-GPU batch fits the GPU's memory: the model the search scores recipes with.",
    command,
    (("tianfeng plan --config run.yaml --gpus 128", "predicted time part by part at 128 GPUs"),
     ("tianfeng plan --config run.yaml --gpus 512 --preset a100 --json", "on A100s, as JSON")),
    options=(ConfigFlag, PlanOptions), json=True, source="config")
