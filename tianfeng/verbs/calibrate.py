"""`tianfeng calibrate`: how well the proxies rank recipes, or a cluster's measured throughput."""

from __future__ import annotations

import argparse
import dataclasses
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tianfeng.core.errors import ConfigError
from tianfeng.defaults import DEFAULT_STORAGE, STORAGE_HELP
from tianfeng.launch.job_options import SchedulerOptions
from tianfeng.options import SCHEDULER_FLAGS, option
from tianfeng.verbs import Verb
from tianfeng.verbs._flags import emit, options_from_flags


@dataclass(frozen=True)
class CalibrateOptions(SchedulerOptions):
    """The scheduler's flags are every submitting verb's (`SchedulerOptions`)."""
    FLAG_GROUPS: ClassVar[dict[str, tuple[str, ...]]] = {
        "which trials": ("study", "storage", "top_k", "random", "seed", "runs_dir", "nodes", "gpus_per_node",
                         "device"),
        "--throughput: measure step times": ("throughput", "space", "data", "resolutions", "batches", "threads",
                                             "processes", "output"),
        "--from-run: refine a profile": ("from_run", "profile"),
        "scheduler (with --launcher slurm or ray)": SCHEDULER_FLAGS,
    }
    study: str | None = option(None, "study name (default: the only study in the storage)")
    storage: str = option(DEFAULT_STORAGE, STORAGE_HELP, show_default=False)
    top_k: int = option(3, "best trials to promote")
    random: int = option(2, "further random complete trials")
    seed: int = option(0, "seed of the random trials' choice", show_default=False)
    runs_dir: Path = option(Path("runs"), "where promoted runs' directories go")
    throughput: bool = option(False, "instead: measure this machine's training step time for --space's "
                              "full-fidelity model per resolution and batch, and write the fit a cluster section "
                              "with `device: measured` reads")
    space: Path | None = option(None, "with --throughput: the search space")
    data: str | None = option(None, "with --throughput: replace the space's data source")
    resolutions: str | None = option(None, "with --throughput: e.g. 8,16,32 (default: those the space's full runs "
                                     "use)")
    batches: str | None = option(None, "with --throughput: per-process batches (default 32,128,512)")
    threads: int | None = option(None, "with --throughput: torch threads per process (default: all, or 1 with "
                                 "--processes)")
    processes: int = option(1, "with --throughput: time this many processes at once (emulated GPUs sharing the "
                            "machine, as `launch --device cpu` runs them) and fit gloo's allreduce links",
                            show_default=False)
    nodes: int | None = option(None, "with --throughput: measure on this many nodes of --processes each, and fit "
                               "the links between nodes too (default 1); with --launcher slurm|ray: each full "
                               "run's")
    gpus_per_node: int | None = option(None, "with --launcher slurm|ray (not --throughput): each full run's GPUs "
                                       "per node")
    device: str | None = option(None, "what the processes train on (default: this machine's GPU if it has one "
                                "with --throughput, cuda on a scheduler)", choices=("cuda", "cpu"))
    from_run: int | None = option(None, "instead: refine a throughput profile with promoted run RUN's measured step "
                                  "times (each phase's, less the exchange predicted exposed at its world)",
                                  metavar="RUN")
    profile: Path | None = option(None, "with --from-run: the profile to refine (default: the study's "
                                  "cluster.throughput; none: a new profile from the run alone)", metavar="FILE")
    output: Path | None = option(None, "with --throughput: where to write it (default $TIANFENG_CACHE/throughput/); "
                                 "with --from-run: default the profile refined", short="-o")


def calibrate(study: str | None = None, *, storage: str = DEFAULT_STORAGE, top_k: int = 3, n_random: int = 2,
              seed: int = 0, runs_dir: str | Path = "runs", nodes: int | None = None,
              gpus_per_node: int | None = None, device: str | None = None,
              scheduler: SchedulerOptions | None = None) -> dict:
    """How well the proxies rank recipes: promote the `top_k` best trials and `n_random` others to
    full fidelity and store Spearman's rho of proxy and full scores (None with fewer than the
    pairs it needs). Returns the pairs and rho. `scheduler.launcher` slurm or ray submits each full run to
    `nodes` x `gpus_per_node` and returns at once (`pending` counts the runs still training);
    calling it again collects them and computes rho. As `tianfeng calibrate`."""
    from tianfeng.promotion.calibration import calibrate as run_calibration
    from tianfeng.promotion.run import Launch

    for flag, value in (("--top-k", top_k), ("--random", n_random)):
        if value < 0:
            raise ConfigError(flag, "", f"must be >= 0, got {value}")
    job = scheduler or SchedulerOptions()
    job.check()
    launch = None
    if job.launcher != "local":
        if nodes is None or gpus_per_node is None:
            raise ConfigError("--launcher", "", f"{job.launcher} submits each full run: give --nodes and "
                              "--gpus-per-node")
        launch = Launch(nodes, gpus_per_node, device or "cuda", options=job)
    return run_calibration(storage, study, top_k=top_k, n_random=n_random, seed=seed, runs_dir=Path(runs_dir),
                           launch=launch)


def measure_throughput(space: str | Path, *, resolutions: Sequence[int] | None = None,
                       batches: Sequence[int] = (32, 128, 512), processes: int = 1, threads: int | None = None,
                       data: str | None = None, output: str | Path | None = None, nodes: int = 1,
                       device: str | None = None, scheduler: SchedulerOptions | None = None) -> dict:
    """Measure and fit the step time of the space's full-fidelity model (default resolutions:
    those its full runs use, and half and 3/4 of the largest), `processes` at once per node as
    GPUs; with several processes the allreduce links inside a node, and with `nodes` > 1 those
    between nodes: `scheduler.launcher` local runs them here as emulated nodes, slurm as one job on real
    nodes. `device`: cuda or cpu (default: this machine's GPU if it has one; cuda on Slurm).
    Written as JSON that a space's `cluster: {device: measured, throughput: ...}` reads. Returns
    the measurement with its `path`. As `tianfeng calibrate --throughput`."""
    import functools

    import torch

    from tianfeng.cost.measure import Grid, measure_here, write_throughput
    from tianfeng.hpo.space.materialize import build_config, sample_active
    from tianfeng.hpo.space.read import corner_value, load_space, round_resolution
    from tianfeng.hpo.space.shipped import resolve_space
    from tianfeng.trainers.data.sources import default_cache_dir, open_source

    if threads is not None and threads < 1:
        raise ConfigError("--threads", "", f"must be >= 1, got {threads}")
    if processes < 1:
        raise ConfigError("--processes", "", f"must be >= 1, got {processes}")
    if nodes < 1:
        raise ConfigError("--nodes", "", f"must be >= 1, got {nodes}")
    if device not in (None, "cuda", "cpu"):
        raise ConfigError("--device", "", f"must be one of cuda, cpu; got {device!r}")
    job = scheduler or SchedulerOptions()
    job.check()
    launcher = job.launcher
    loaded = load_space(resolve_space(space), data=data)
    targets = [build_config(loaded, sample_active(loaded, functools.partial(corner_value, low=low)), "target")
               for low in (True, False)]
    if not resolutions:
        used = {p.resolution for t in targets for p in t.phases}
        resolutions = sorted(used | {round_resolution(max(used) * f) for f in (0.5, 0.75)})
    cfg = targets[0]
    d = cfg.data
    source = open_source(d.source, synthetic_images=d.synthetic_images, synthetic_classes=d.synthetic_classes)
    grid = Grid(cfg, tuple(resolutions), tuple(batches), source.channels, source.num_classes)
    path = Path(output) if output else default_cache_dir() / "throughput" / f"{loaded.name}-{socket.gethostname()}.json"
    if processes == 1 and nodes == 1 and launcher == "local":
        result = measure_here(grid, threads, torch.device(device) if device else None)
        write_throughput(result, path)
    else:
        from tianfeng.cost.throughput_job import measure_launched

        kind = device or ("cuda" if launcher == "slurm" or (nodes == 1 and torch.cuda.is_available()) else "cpu")
        # as `launch --device cpu` runs each rank (OMP_NUM_THREADS=1)
        result = measure_launched(grid, path, processes=processes, nodes=nodes, launcher=launcher, device=kind,
                                  threads=threads or 1, options=job)
    return {**result, "path": str(path)}


def calibrate_from_run(run: int, *, storage: str = DEFAULT_STORAGE, profile: str | Path | None = None,
                       output: str | Path | None = None) -> dict:
    """Refine a throughput profile with promoted run `run`'s measured step times (each phase's,
    less the exchange the model predicts was exposed at the run's world): `profile` (default:
    its study's `cluster.throughput`, else a new profile from the run alone, its links left to
    the tables), written to `output` (default: the profile itself, or
    $TIANFENG_CACHE/throughput/<study>-run<N>.json). Returns the points, the fits and each
    point's predicted compute before and after. As `tianfeng calibrate --from-run`."""
    import optuna
    import yaml

    from tianfeng.core.run_config import config_from_dict
    from tianfeng.cost.cluster import read_throughput
    from tianfeng.cost.measure import write_throughput
    from tianfeng.promotion.run import study_space
    from tianfeng.promotion.run_profile import predicted_compute_s, refined_profile
    from tianfeng.storage.runs import RunStore
    from tianfeng.trainers.data.sources import default_cache_dir, open_source

    rows = {r["id"]: r for r in RunStore(storage).runs()}
    if run not in rows:
        raise ConfigError("--from-run", str(run), f"no such run in {storage}; it holds: "
                          f"{', '.join(map(str, sorted(rows))) or 'none'}")
    row = rows[run]
    cfg = config_from_dict(yaml.safe_load(row["config_yaml"]), f"run {run}")
    cluster = study_space(optuna.load_study(study_name=row["study"], storage=storage)).cluster
    if profile is not None and str(profile).lower() == "none":  # a new profile from the run alone
        profile = None
    elif profile is None and cluster.device == "measured":
        profile = cluster.throughput
    base = read_throughput(str(profile), "--profile", "") if profile is not None else None
    if base is not None:
        in_channels, classes = base["in_channels"], base["classes"]
    else:
        d = cfg.data
        source = open_source(d.source, synthetic_images=d.synthetic_images, synthetic_classes=d.synthetic_classes)
        in_channels, classes = source.channels, source.num_classes
    refined, points = refined_profile(base, row, cfg, cluster, in_channels=in_channels, classes=classes)
    before = cluster if base is None else dataclasses.replace(cluster, device="measured", throughput=str(profile))
    before_s = [predicted_compute_s(cfg, p, before, in_channels=in_channels, classes=classes) for p in points]
    path = Path(output) if output else Path(profile) if profile else (
        default_cache_dir() / "throughput" / f"{row['study']}-run{run}.json")
    write_throughput(refined, path)
    after = dataclasses.replace(cluster, device="measured", throughput=str(path))
    shown = [{**p, "before_s": b, "after_s": predicted_compute_s(cfg, p, after, in_channels=in_channels,
                                                                 classes=classes)}
             for p, b in zip(points, before_s, strict=True)]
    return {"path": str(path), "run": run, "study": row["study"], "refined": str(profile) if profile else None,
            "points": shown, "fits": refined["fits"]}


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


def _scheduler(args: argparse.Namespace) -> SchedulerOptions:
    return options_from_flags(args, SchedulerOptions)


def _throughput(args: argparse.Namespace) -> int:
    """Measure and fit the step time for the space's full-fidelity model, and the links."""
    if args.space is None:
        raise ConfigError("--throughput", "", "needs --space: the model and precision to measure")
    if args.gpus_per_node is not None:
        raise ConfigError("--gpus-per-node", "", "is a calibration run's: with --throughput give --processes (per node)")
    result = measure_throughput(args.space, resolutions=_sizes("--resolutions", args.resolutions, 4),
                                batches=_sizes("--batches", args.batches, 1) or (32, 128, 512),
                                processes=args.processes, threads=args.threads, data=args.data, output=args.output,
                                nodes=args.nodes or 1, device=args.device, scheduler=_scheduler(args))
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


def _from_run(args: argparse.Namespace) -> int:
    """Refine a profile with a promoted run's measured step times."""
    if args.throughput:
        raise ConfigError("--from-run", "", "goes without --throughput (it reads a run, not a new measurement)")
    result = calibrate_from_run(args.from_run, storage=args.storage, profile=args.profile, output=args.output)
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


def command(args: argparse.Namespace) -> int:
    from tianfeng.promotion.calibration import MIN_PAIRS
    from tianfeng.verbs.report import report

    if args.from_run is not None:
        return _from_run(args)
    if args.throughput:
        return _throughput(args)
    result = calibrate(args.study, storage=args.storage, top_k=args.top_k, n_random=args.random, seed=args.seed,
                       runs_dir=args.runs_dir, nodes=args.nodes, gpus_per_node=args.gpus_per_node, device=args.device,
                       scheduler=_scheduler(args))
    result["report"] = str(report(result["study"], storage=args.storage))
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


VERB = Verb(
    "calibrate", "measure how well the proxies rank recipes",
    "Promote the top-k and some random complete trials to full fidelity and store the Spearman rank correlation "
    "between their proxy and full scores in the study.",
    command,
    (("tianfeng calibrate --study large_batch --top-k 3 --random 2", "how well proxies rank recipes"),
     ("tianfeng calibrate --throughput --space large_batch.yaml -o cluster.json",
      "measure this machine's step times")),
    options=(CalibrateOptions,), json=True, storage="writes", loads=("optuna", "torch"))
