"""`tianfeng calibrate`: how well do the proxies rank recipes? Promote the top-k and a few random
trials to full fidelity and store the Spearman rank correlation of proxy and full scores."""

from __future__ import annotations

import logging
import sys

from tianfeng.commands.flags import emit
from tianfeng.promotion.calibration import MIN_PAIRS, calibrate

log = logging.getLogger("tianfeng.calibrate")


def _sizes(flag: str, text: str | None, low: int) -> list[int] | None:
    from tianfeng.trainers.config import ConfigError

    if text is None:
        return None
    try:
        sizes = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise ConfigError(flag, "", f"must be comma-separated integers, e.g. 32,128,512; got {text!r}") from None
    if not sizes or sizes[0] < low:
        raise ConfigError(flag, "", f"must be integers >= {low}; got {text!r}")
    return sizes


def run_throughput(args) -> int:
    """Measure and fit this machine's step time for the space's full-fidelity model."""
    import functools

    from tianfeng.hpo.materialize import build_config, sample_active
    from tianfeng.hpo.space import corner_value, load_space
    from tianfeng.throughput_measure import measure_throughput, write_throughput
    from tianfeng.trainers.config import ConfigError
    from tianfeng.trainers.data.sources import default_cache_dir, open_source

    if args.space is None:
        raise ConfigError("--throughput", "", "needs --space: the model and precision to measure")
    resolutions = _sizes("--resolutions", args.resolutions, 4)
    batches = _sizes("--batches", args.batches, 1) or [32, 128, 512]
    if args.threads is not None and args.threads < 1:
        raise ConfigError("--threads", "", f"must be >= 1, got {args.threads}")
    if args.processes < 1:
        raise ConfigError("--processes", "", f"must be >= 1, got {args.processes}")
    space = load_space(args.space, data=args.data)
    targets = [build_config(space, sample_active(space, functools.partial(corner_value, low=low)), "target")
               for low in (True, False)]
    cfg = targets[0]
    if resolutions is None:  # the space's corners' resolutions, and half and 3/4 of the largest
        from tianfeng.hpo.space import round_resolution

        used = {p.resolution for t in targets for p in t.phases}
        resolutions = sorted(used | {round_resolution(max(used) * f) for f in (0.5, 0.75)})
    d = cfg.data
    source = open_source(d.source, synthetic_images=d.synthetic_images, synthetic_classes=d.synthetic_classes)
    result = measure_throughput(cfg, resolutions, batches, in_channels=source.channels,
                                classes=source.num_classes, processes=args.processes, threads=args.threads)
    output = args.output or default_cache_dir() / "throughput" / f"{space.name}-{result['host']}.json"
    write_throughput(result, output)
    summary = {"throughput": str(output), "processes": result["processes"], "threads": result["threads"],
               "precision": result["precision"], "fits": result["fits"], "links": result["links"]}
    emit(args, summary, [f"throughput of {result['processes']} process(es) x {result['threads']} thread(s), "
                         f"{result['precision']}, written to {output}"])
    gpus = result["processes"]
    print(f"tianfeng: use it with `cluster: {{gpus: {gpus}, gpus_per_node: {gpus}, device: measured, "
          f"throughput: {output}}}`", file=sys.stderr)
    return 0


def run_calibrate_command(args) -> int:
    from tianfeng.trainers.config import ConfigError

    if args.throughput:
        return run_throughput(args)
    for flag, value in (("--top-k", args.top_k), ("--random", args.random)):
        if value < 0:
            raise ConfigError(flag, "", f"must be >= 0, got {value}")
    result = calibrate(args.storage, args.study, top_k=args.top_k, n_random=args.random, seed=args.seed,
                       runs_dir=args.runs_dir)
    from tianfeng.api import report as write_report

    result["report"] = str(write_report(result["study"], storage=args.storage))
    rho = result["spearman_rho"]
    emit(args, result, [f"calibration of {result['study']}: Spearman's rho of proxy and full scores "
                        f"{'not computed' if rho is None else f'{rho:.3f}'} over {result['pairs_used']} promoted "
                        f"pair(s)", f"report: {result['report']}"])
    if result["spearman_rho"] is None:
        print(f"tianfeng: calibration: {result['pairs_used']} of {len(result['pairs'])} promoted runs gave a usable "
              f"score with a ranking (at least {MIN_PAIRS} are needed): Spearman's rho not computed", file=sys.stderr)
        return 1
    return 0
