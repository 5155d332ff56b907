"""`tianfeng calibrate`: how well do the proxies rank recipes? Promote the top-k and a few random
trials to full fidelity and store the Spearman rank correlation of proxy and full scores."""

from __future__ import annotations

import dataclasses
import sys

from tianfeng import api
from tianfeng.commands.flags import emit
from tianfeng.launch.scheduler import SchedulerOptions
from tianfeng.launch.submit_options import SubmitOptions
from tianfeng.promotion.calibration import MIN_PAIRS
from tianfeng.trainers.config import ConfigError


def _sizes(flag: str, text: str | None, low: int) -> list[int] | None:
    if text is None:
        return None
    try:
        sizes = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise ConfigError(flag, "", f"must be comma-separated integers, e.g. 32,128,512; got {text!r}") from None
    if not sizes or sizes[0] < low:
        raise ConfigError(flag, "", f"must be integers >= {low}; got {text!r}")
    return sizes


def _scheduler_options(args) -> SchedulerOptions:
    """The job's options, checked by the same gate as every verb's that submits."""
    submit = SubmitOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(SubmitOptions)})
    submit.check_submit()
    return submit.scheduler_options()


def run_throughput(args) -> int:
    """Measure and fit the step time for the space's full-fidelity model, and the links."""
    if args.space is None:
        raise ConfigError("--throughput", "", "needs --space: the model and precision to measure")
    if args.gpus_per_node is not None:
        raise ConfigError("--gpus-per-node", "", "is a calibration run's: with --throughput give --processes (per node)")
    result = api.measure_throughput(args.space, resolutions=_sizes("--resolutions", args.resolutions, 4),
                                    batches=_sizes("--batches", args.batches, 1) or (32, 128, 512),
                                    processes=args.processes, threads=args.threads, data=args.data,
                                    output=args.output, nodes=args.nodes or 1, launcher=args.launcher,
                                    device=args.device, scheduler_options=_scheduler_options(args))
    output = result["path"]
    nodes = result.get("nodes", 1)
    summary = {"throughput": output, "processes": result["processes"], "nodes": nodes, "threads": result["threads"],
               "precision": result["precision"], "fits": result["fits"], "links": result["links"]}
    emit(args, summary, [f"throughput of {nodes} node(s) x {result['processes']} process(es) x "
                         f"{result['threads']} thread(s), {result['precision']}, written to {output}"])
    per_node = result["processes"]
    print(f"tianfeng: use it with `cluster: {{gpus: {nodes * per_node}, gpus_per_node: {per_node}, device: measured, "
          f"throughput: {output}}}`", file=sys.stderr)
    return 0


def run_from_run(args) -> int:
    """Refine a profile with a promoted run's measured step times."""
    if args.throughput:
        raise ConfigError("--from-run", "", "goes without --throughput (it reads a run, not a new measurement)")
    result = api.calibrate_from_run(args.from_run, storage=args.storage, profile=args.profile, output=args.output)
    lines = []
    for p in result["points"]:
        lines.append(f"{p['resolution']} px, {p['batch']} per process on {p['world']} ({p['nodes']} node(s)), "
                     f"{p['epochs']} epoch(s): step {1000 * p['step_s']:.1f} ms, of it exchange "
                     f"{1000 * p['exchange_s']:.1f} ms (predicted); compute {1000 * p['compute_s']:.1f} ms, "
                     f"predicted {1000 * p['before_s']:.1f} ms before, {1000 * p['after_s']:.1f} ms now")
    refined = f"profile {result['refined']} refined, " if result["refined"] else "new profile "
    lines.append(f"{refined}written to {result['path']}")
    emit(args, result, lines)
    print(f"tianfeng: predict with it: `cluster: {{device: measured, throughput: {result['path']}}}` in the space, "
          f"or --profile {result['path']}", file=sys.stderr)
    return 0


def run_calibrate_command(args) -> int:
    if args.from_run is not None:
        return run_from_run(args)
    if args.throughput:
        return run_throughput(args)
    result = api.calibrate(args.study, storage=args.storage, top_k=args.top_k, n_random=args.random, seed=args.seed,
                           runs_dir=args.runs_dir, launcher=args.launcher, nodes=args.nodes,
                           gpus_per_node=args.gpus_per_node, device=args.device,
                           scheduler_options=_scheduler_options(args))
    result["report"] = str(api.report(result["study"], storage=args.storage))
    rho = result["spearman_rho"]
    if result["pending"]:
        emit(args, result, [f"calibration of {result['study']}: {result['pending']} of {len(result['pairs'])} full "
                            f"runs still training on {args.launcher}; run the same calibrate again to collect "
                            f"them (`tianfeng runs` shows their jobs)", f"report: {result['report']}"])
        return 0
    emit(args, result, [f"calibration of {result['study']}: Spearman's rho of proxy and full scores "
                        f"{'not computed' if rho is None else f'{rho:.3f}'} over {result['pairs_used']} promoted "
                        f"pair(s)", f"report: {result['report']}"])
    if result["spearman_rho"] is None:
        print(f"tianfeng: calibration: {result['pairs_used']} of {len(result['pairs'])} promoted runs gave a usable "
              f"score with a ranking (at least {MIN_PAIRS} are needed): Spearman's rho not computed", file=sys.stderr)
        return 1
    return 0
