"""The Python API: what `tianfeng search | promote | scale | report | train` do, callable from
notebooks and scripts with the same options, returning the Optuna study or the run's results.

    import tianfeng
    study = tianfeng.search("large_batch.yaml", trials=30)
    run = tianfeng.promote(study=study.study_name, fastest_to=80)
    tianfeng.report(study.study_name)

Errors are `tianfeng.trainers.config.ConfigError` (bad input: it names the file or option, the key and
what is allowed) or the environment's own exceptions; nothing here prints the summary tables the
commands print, except the Pareto front and the transfer rules logged to stderr.
"""

from __future__ import annotations

import logging
import math
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from tianfeng.cost.grid import wall_time_grid
from tianfeng.cost.grid_options import PlanOptions
from tianfeng.cost.step_time import DEVICES
from tianfeng.cost.walltime import check_memory, predict_wall_time
from tianfeng.defaults import DEFAULT_STORAGE, ObjectiveMode
from tianfeng.hpo.judge.front import fastest_to
from tianfeng.hpo.judge.scores import best_trial, pareto_front, score
from tianfeng.hpo.options import SearchInterrupted, SearchOptions
from tianfeng.hpo.plan import UNLIMITED_TRIALS, SearchPlan, plan_search, rung_epochs
from tianfeng.hpo.run.rows import study_row, trial_row
from tianfeng.hpo.sampling.registry import resolve_sampler
from tianfeng.hpo.space.materialize import build_config, sample_active
from tianfeng.hpo.space.read import (
    SearchSpace,
    corner_value,
    load_space,
    per_gpu_range,
    round_resolution,
)
from tianfeng.hpo.space.shipped import resolve_space, shipped_spaces
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.launch.local import run_here
from tianfeng.launch.scheduler import SchedulerOptions
from tianfeng.launch.scripts import LaunchPlan, check_fits, write_plan
from tianfeng.promotion.jobs import cancel_job, with_jobs
from tianfeng.promotion.options import PromoteOptions
from tianfeng.promotion.run_lock import with_live_status
from tianfeng.recipes import DEFAULT_RECIPE
from tianfeng.scaling.options import ScaleOptions
from tianfeng.scaling.sizes import training_set_size
from tianfeng.storage.ownership import check_report_of, default_report_path
from tianfeng.storage.runs import RunRecordStatus, RunStore
from tianfeng.storage.study_attrs import StudyKey
from tianfeng.trainers.config import ConfigError, load_config
from tianfeng.trainers.ports import free_port
from tianfeng.trainers.yaml_input import read_yaml

if TYPE_CHECKING:
    import pandas as pd

    from tianfeng.promotion.leaders import LeaderPromotion


def search(space: str | Path, options: SearchOptions | None = None, **changes: Any) -> optuna.Study:
    """Search `space` (a file, or a shipped space's bare name) with proxy runs; the study is kept
    in `options.storage` and returned. `options` (a `SearchOptions`) holds what `tianfeng search`
    takes as flags; keyword arguments change single options:
    `search("large_batch.yaml", trials=60, objective="pareto", gpus=128)`. Ctrl-C raises
    `SearchInterrupted` (a KeyboardInterrupt) once the cut trials are queued again. With
    `launcher="slurm"` the study is created, its workers submitted as a job array, and the study
    returned at once (the job in `study.user_attrs[StudyKey.WORKERS_JOB]`); the trials come as they run."""
    from tianfeng.hpo.run.runner import requeue_interrupted
    from tianfeng.terminal.interrupts import clear

    checked = (options or SearchOptions()).changed(**changes).checked()
    named: list[str] = []  # the study's name once the space has given it
    try:
        return _search(space, checked, named)
    except SearchInterrupted:
        raise
    except KeyboardInterrupt:
        clear()
        requeued = requeue_interrupted(checked.storage, named[0]) if named else None
        raise SearchInterrupted(named[0] if named else None, checked.storage, requeued) from None


def search_dry_run(space: str | Path, options: SearchOptions | None = None, **changes: Any) -> dict:
    """What `search` would run, checked as `search` checks before its first trial (the space,
    every option against it, the plan; with a launcher, each value of the batch script), touching
    neither the storage nor the scheduler: the study, its objective, rung, sampler, pruner,
    budget and workers, and with a launcher the job array's `script`."""
    from tianfeng.hpo.judge.pruning import judging

    o = (options or SearchOptions()).changed(**changes).checked()
    plan, loaded = plan_search(space, o)
    out = {"study": plan.study, "storage": o.storage, "space": str(plan.space_path),
           "objective": loaded.objective.mode, "metric": loaded.objective.metric, "fidelity": plan.rung,
           "sampler": plan.sampler, "pruner": judging(loaded, plan.rung, o.pruner).label, "trials": o.trials,
           "timeout_s": o.timeout_s, "workers": o.workers, "backend": o.backend, "launcher": o.launcher,
           "promote": o.promote, "resume": o.resume}
    if o.launcher != "local":
        from tianfeng.hpo.run.submitted import array_script

        out["script"] = array_script(plan, int(o.workers), plan.runs_root.resolve() / plan.study / o.launcher,
                                     check_only=True)
    return out


def _search(space: str | Path, o: SearchOptions, named: list[str]) -> optuna.Study:
    from tianfeng.hpo.run.dashboard import publish_curves as publish_curves_for
    from tianfeng.hpo.run.runner import run_search

    plan, loaded = plan_search(space, o)  # the space, read once in this process
    named.append(plan.study)
    if o.launcher != "local":
        from tianfeng.hpo.run.study import open_study
        from tianfeng.hpo.run.submitted import check_workers_submission, submit_workers

        check_workers_submission(plan)  # before the study is created
        study_obj = open_study(plan, loaded, resume=o.resume, heartbeat=False)
        try:
            submit_workers(plan, study_obj)
        except BaseException:
            if not o.resume:  # sbatch refused what every check passed: the command can be run again as it was
                optuna.delete_study(study_name=plan.study, storage=plan.options.storage)
            raise
        return study_obj
    if o.backend == "ray":
        from tianfeng.hpo.run.ray_backend import RayOptions, run_ray_search

        cpus = 1.0 if o.cpus_per_trial is None else o.cpus_per_trial
        run_ray_search(plan, RayOptions(address=o.ray_address, cpus_per_trial=cpus, gpus_per_trial=o.gpus_per_trial),
                       resume=o.resume)
    else:
        promotion = _leader_promotion(plan, loaded)
        study_obj = run_search(plan, o.workers, resume=o.resume, space=loaded, progress=o.progress,
                               between_trials=promotion)
        if promotion is not None:
            promotion.finish(study_obj)
    study_obj = optuna.load_study(study_name=plan.study, storage=o.storage)
    publish_curves_for(study_obj)  # for optuna-dashboard, when installed
    _track(o.mlflow, o.wandb, study_obj, o.storage)
    return study_obj


def _track(mlflow: str | None, wandb: str | None, study: optuna.Study, storage: str) -> None:
    """`--mlflow URI` and `--wandb PROJECT`: the study's runs not logged yet."""
    if mlflow:
        from tianfeng.export import mlflow as tracker

        tracker.export_study(mlflow, study, storage)
    if wandb:
        from tianfeng.export import wandb as tracker

        tracker.export_study(wandb, study, storage)


def _leader_promotion(plan: SearchPlan, space: SearchSpace) -> LeaderPromotion | None:
    """`--promote leader` or `balanced`: the work between trials, or None."""
    if plan.options.promote == "none":
        return None
    from tianfeng.promotion.leaders import LeaderPromotion

    return LeaderPromotion(plan.options.storage, plan.study, plan.runs_root,
                           screen_epochs=space.fidelities[plan.rung].stop_after_epochs, metric=space.objective.metric,
                           balanced=plan.options.promote == "balanced")


def promote(trial: int | None = None, options: PromoteOptions | None = None, **changes: Any) -> dict:
    """Run trial `trial`'s recipe (or, with `fastest_to`, the Pareto-front trial with the least
    predicted time whose proxy metric reaches it) at full fidelity; returns the run's record
    (status, full-fidelity score, run directory, predicted time). `options` (a `PromoteOptions`)
    holds what `tianfeng promote` takes as flags; keyword arguments change single options:
    `promote(7, study="large_batch", batch_size=4096)`."""
    from tianfeng.promotion.run import Launch, load_study
    from tianfeng.promotion.run import promote as run_promotion

    o = (options or PromoteOptions()).changed(**changes).checked(trial)
    if o.fastest_to is not None:
        loaded = load_study(o.storage, o.study)
        pick = fastest_trial(loaded, o.fastest_to)
        logging.getLogger("tianfeng.promote").info(
            "trial %d: the fastest front trial with %s >= %g (%.4g, full run predicted %.0f s)", pick.number,
            loaded.user_attrs.get(StudyKey.METRIC, "value"), o.fastest_to, score(pick), pick.user_attrs[TrialKey.PREDICTED]["seconds"])
        trial = pick.number
    launch = Launch(o.nodes, o.gpus_per_node, o.device, o.master_addr, o.launcher, o.scheduler_options(),
                    min_nodes=o.min_nodes or 0, requeue_at_limit=o.requeue_at_limit) if o.nodes else None
    out = run_promotion(o.storage, o.study, trial, batch_size=o.batch_size, overrides=list(o.overrides),
                        runs_dir=Path(o.runs_dir), dry_run=o.dry_run, launch=launch)
    if (o.mlflow or o.wandb) and not o.dry_run and out["status"] not in (RunRecordStatus.PLANNED,
                                                                          RunRecordStatus.SUBMITTED):
        _track(o.mlflow, o.wandb, load_study(o.storage, out["study"]), o.storage)
    return out


def load(study: str | None = None, *, storage: str = DEFAULT_STORAGE) -> optuna.Study:
    """A study of `storage`; with `study` None, its only study (ConfigError naming the studies
    when there are several or none)."""
    from tianfeng.promotion.run import load_study

    return load_study(storage, study)


def studies(storage: str = DEFAULT_STORAGE) -> list[dict]:
    """A row per study of `storage`: name, objective, trials, best value and trial, creation time.
    As `tianfeng status` without a study."""

    return [study_row(s) for s in optuna.get_all_study_summaries(storage, include_best_trial=True)]


def trials(study: str | None = None, *, storage: str = DEFAULT_STORAGE) -> list[dict]:
    """A row per trial of a study: state, value, predicted full run, epochs reported, prior and
    parameters. As `tianfeng status STUDY`."""

    return [trial_row(t) for t in load(study, storage=storage).get_trials(deepcopy=False)]


def front(study: str | None = None, *, storage: str = DEFAULT_STORAGE) -> list[optuna.trial.FrozenTrial]:
    """The feasible Pareto front of a pareto study: proxy metric against predicted full-run time."""

    return pareto_front(load(study, storage=storage))


def runs(study: str | None = None, *, storage: str = DEFAULT_STORAGE) -> list[dict]:
    """The promoted runs recorded in `storage` (of one study, or all): status, epochs, proxy and
    full scores, run directory, and for a submitted run its scheduler job (`job`: launcher, job
    id, state, reason). As `tianfeng runs`: a run recorded as running whose process is gone (its
    run directory is here and nobody holds its training lock) is listed as interrupted, and a
    submitted run whose job ended is collected first. `time_check`: where the run's time went,
    measured from its epochs, beside its trial's predicted full run (scaled to the epochs so far)."""
    from tianfeng.promotion.measured import with_time_checks

    return with_time_checks(storage, _run_rows(study, storage))


def _run_rows(study: str | None, storage: str) -> list[dict]:
    """The promoted runs with their live state and jobs, without the time checks (which read
    every study): what following a run polls."""
    from tianfeng.promotion.run import refresh_submitted

    refresh_submitted(storage, study)  # runs a scheduler trains: their state now, collected when done
    store = RunStore(storage)
    return with_jobs(store, [with_live_status(r) for r in store.runs(study)])


def follow(run: int, *, storage: str = DEFAULT_STORAGE, interval_s: float = 2.0):
    """Follow run `run` until it ends: yields ("state", run) when its state changes, ("epoch",
    metrics) for each new epoch, then ("ended", run). As `tianfeng runs --follow RUN`."""
    from tianfeng.promotion.follow import follow as follow_run

    return follow_run(run, lambda: _run_rows(None, storage), interval_s)


def cancel(run: int, *, storage: str = DEFAULT_STORAGE) -> dict:
    """Cancel a submitted run's scheduler job and return the run as `runs` then lists it (its
    job cancelled; collected as interrupted, or completed if it finished first). As `tianfeng
    runs --cancel RUN`."""
    cancel_job(RunStore(storage), run)
    return next(r for r in runs(storage=storage) if r["id"] == run)


def spaces() -> list[dict]:
    """The shipped search spaces (use a name as `search(name)`): name, description, number of
    parameters, objective, the cluster and per-GPU batches it searches for (or why it cannot be
    loaded here), and the file. As `tianfeng spaces`."""

    rows = []
    for path in shipped_spaces():
        raw = read_yaml(path)
        try:
            space = load_space(path)
            cluster = "; ".join(x for x in (space.cluster.describe(), per_gpu_range(space)) if x)
        except ConfigError as exc:
            cluster = f"cannot load here: {exc.message}"
        rows.append({"name": path.name, "description": str(raw.get("description", "")),
                     "parameters": len(raw.get("parameters") or {}),
                     "objective": (raw.get("objective") or {}).get("mode", ObjectiveMode.ACCURACY.value),
                     "cluster": cluster, "file": str(path)})
    return rows


def export(study: str | None = None, *, storage: str = DEFAULT_STORAGE, output: str | Path | None = None,
           format: str = "csv") -> tuple[pd.DataFrame, str | None]:
    """A study's trials as a table (one row per trial: parameters, objective values, state,
    outcome, predicted full run, promotion result) written to `output` as `format` (csv, parquet
    or json); with no `output`, the text is returned for printing (parquet needs a file). As
    `tianfeng export`. Returns (the table, its study's name in `table.attrs["study"]`; the text
    or None)."""
    from tianfeng.export.table import trials_table, write_table
    from tianfeng.promotion.run import load_study

    chosen = load_study(storage, study, flag="--study")
    table = trials_table(chosen, storage)
    table.attrs["study"] = chosen.study_name
    return table, write_table(table, None if output is None else Path(output), format)


def publish_curves(study: str | None = None, *, storage: str = DEFAULT_STORAGE) -> list[str]:
    """Save every trial's per-epoch curves where optuna-dashboard draws them, for one study or
    (`study` None) all of `storage`'s; returns the studies done. Needs optuna-dashboard."""
    from tianfeng.hpo.run.dashboard import publish_curves as publish
    from tianfeng.promotion.run import load_study

    chosen = [load_study(storage, study, flag="--study")] if study else \
        [optuna.load_study(study_name=name, storage=storage) for name in optuna.get_all_study_names(storage)]
    for one in chosen:
        if not publish(one):
            raise ConfigError("dashboard", "", "needs optuna-dashboard: pip install 'tianfeng[dashboard]'")
    return [one.study_name for one in chosen]


def calibrate(study: str | None = None, *, storage: str = DEFAULT_STORAGE, top_k: int = 3, n_random: int = 2,
              seed: int = 0, runs_dir: str | Path = "runs", launcher: str = "local", nodes: int | None = None,
              gpus_per_node: int | None = None, device: str | None = None,
              scheduler_options: SchedulerOptions | None = None) -> dict:
    """How well the proxies rank recipes: promote the `top_k` best trials and `n_random` others to
    full fidelity and store Spearman's rho of proxy and full scores (None with fewer than the
    pairs it needs). Returns the pairs and rho. `launcher` slurm or ray submits each full run to
    `nodes` x `gpus_per_node` and returns at once (`pending` counts the runs still training);
    calling it again collects them and computes rho. As `tianfeng calibrate`."""
    from tianfeng.launch.submit_options import LAUNCHERS
    from tianfeng.promotion.calibration import calibrate as run_calibration
    from tianfeng.promotion.run import Launch

    for flag, value in (("--top-k", top_k), ("--random", n_random)):
        if value < 0:
            raise ConfigError(flag, "", f"must be >= 0, got {value}")
    if launcher not in LAUNCHERS:
        raise ConfigError("--launcher", "", f"must be one of {', '.join(LAUNCHERS)}; got {launcher!r}")
    launch = None
    if launcher != "local":
        if nodes is None or gpus_per_node is None:
            raise ConfigError("--launcher", "", f"{launcher} submits each full run: give --nodes and --gpus-per-node")
        launch = Launch(nodes, gpus_per_node, device or "cuda", launcher=launcher,
                        options=scheduler_options or SchedulerOptions())
    return run_calibration(storage, study, top_k=top_k, n_random=n_random, seed=seed, runs_dir=Path(runs_dir),
                           launch=launch)


def measure_throughput(space: str | Path, *, resolutions: Sequence[int] | None = None,
                       batches: Sequence[int] = (32, 128, 512), processes: int = 1, threads: int | None = None,
                       data: str | None = None, output: str | Path | None = None, nodes: int = 1,
                       launcher: str = "local", device: str | None = None,
                       scheduler_options: SchedulerOptions | None = None) -> dict:
    """Measure and fit the step time of the space's full-fidelity model (default resolutions:
    those its full runs use, and half and 3/4 of the largest), `processes` at once per node as
    GPUs; with several processes the allreduce links inside a node, and with `nodes` > 1 those
    between nodes: `launcher` local runs them here as emulated nodes, slurm as one job on real
    nodes. `device`: cuda or cpu (default: this machine's GPU if it has one; cuda on Slurm).
    Written as JSON that a space's `cluster: {device: measured, throughput: ...}` reads. Returns
    the measurement with its `path`. As `tianfeng calibrate --throughput`."""
    import functools

    import torch

    from tianfeng.cost.measure import Grid, measure_here, write_throughput
    from tianfeng.trainers.data.sources import default_cache_dir, open_source

    if threads is not None and threads < 1:
        raise ConfigError("--threads", "", f"must be >= 1, got {threads}")
    if processes < 1:
        raise ConfigError("--processes", "", f"must be >= 1, got {processes}")
    if nodes < 1:
        raise ConfigError("--nodes", "", f"must be >= 1, got {nodes}")
    if device not in (None, "cuda", "cpu"):
        raise ConfigError("--device", "", f"must be one of cuda, cpu; got {device!r}")
    if launcher != "slurm" and scheduler_options not in (None, SchedulerOptions()):
        raise ConfigError("--partition", "", "and the other scheduler options go with --launcher slurm")
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
        from tianfeng.launch.throughput_job import measure_launched

        kind = device or ("cuda" if launcher == "slurm" or (nodes == 1 and torch.cuda.is_available()) else "cpu")
        # as `launch --device cpu` runs each rank (OMP_NUM_THREADS=1)
        result = measure_launched(grid, path, processes=processes, nodes=nodes, launcher=launcher, device=kind,
                                  threads=threads or 1, options=scheduler_options)
    return {**result, "path": str(path)}


def calibrate_from_run(run: int, *, storage: str = DEFAULT_STORAGE, profile: str | Path | None = None,
                       output: str | Path | None = None) -> dict:
    """Refine a throughput profile with promoted run `run`'s measured step times (each phase's,
    less the exchange the model predicts was exposed at the run's world): `profile` (default:
    its study's `cluster.throughput`, else a new profile from the run alone, its links left to
    the tables), written to `output` (default: the profile itself, or
    $TIANFENG_CACHE/throughput/<study>-run<N>.json). Returns the points, the fits and each
    point's predicted compute before and after. As `tianfeng calibrate --from-run`."""
    import dataclasses

    import yaml

    from tianfeng.cost.cluster import read_throughput
    from tianfeng.cost.measure import write_throughput
    from tianfeng.promotion.run import study_space
    from tianfeng.promotion.run_profile import predicted_compute_s, refined_profile
    from tianfeng.trainers.config import config_from_dict
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


def fastest_trial(study: optuna.Study, level: float) -> optuna.trial.FrozenTrial:
    """The front trial with the least predicted time whose proxy metric reaches `level`."""

    if not math.isfinite(level):
        raise ConfigError("--fastest-to", "", f"must be a finite number, got {level}")
    pick = fastest_to(study, level)
    if pick is None:
        top = best_trial(study)
        best = f"; the best front trial reaches {score(top):.4g} (#{top.number})" if top else ""
        raise ConfigError("--fastest-to", "", f"no complete trial of study {study.study_name} reaches "
                          f"{study.user_attrs.get(StudyKey.METRIC, 'the metric')} {level:g}{best}")
    return pick


def plan_scale(space: str | Path, batch_sizes: Sequence[int] | None = None, options: ScaleOptions | None = None,
               **changes: Any):
    """The checked plan of a scale study: (ScalePlan, steps per epoch by batch size, the space).
    `options` (a `ScaleOptions`) holds what `tianfeng scale` takes as flags; `batch_sizes` and
    keyword arguments change single options."""
    from tianfeng.scaling.study import ScalePlan

    if batch_sizes is not None:
        changes["batch_sizes"] = batch_sizes
    o = (options or ScaleOptions()).changed(**changes).checked()
    sizes = o.batch_sizes
    path = resolve_space(space)
    loaded = load_space(path, data=o.data)
    rung = o.fidelity or loaded.search_fidelity
    if rung not in loaded.fidelities:
        raise ConfigError("--fidelity", "", f"must be one of {', '.join(loaded.fidelities)}; got {rung!r}")
    size, described = training_set_size(loaded, rung)
    too_big = [b for b in sizes if b > size]
    if too_big:
        raise ConfigError("--batch-sizes", "", f"{too_big[0]} is larger than the training set ({size} images of {described})")
    trial_epochs = rung_epochs(loaded, rung)
    if o.epochs_per_batch is not None and o.epochs_per_batch < trial_epochs:
        raise ConfigError("--budget-per-batch", "", f"{o.epochs_per_batch}epochs allows no trial: one trial at rung "
                          f"{rung} trains {trial_epochs} epochs")
    study = o.name or f"{loaded.name}-scale"
    search_plan = SearchPlan.of(path, study=study, rung=rung, sampler=resolve_sampler(o.sampler, loaded, rung),
                                data=o.data, storage=o.storage, pruner=o.pruner, seed=o.seed,
                                trials=o.trials_per_batch or UNLIMITED_TRIALS, timeout_s=o.timeout_s_per_batch,
                                epoch_budget=o.epochs_per_batch, runs_dir=o.runs_dir, verbose=o.verbose,
                                launcher=o.launcher, partition=o.partition, account=o.account, time=o.time,
                                scheduler_args=o.scheduler_args)
    plan = ScalePlan(search=search_plan, name=study, batch_sizes=sizes, workers=o.workers, warm_start_k=o.warm_start,
                     tolerance=o.tolerance)
    return plan, {b: size // b for b in sizes}, loaded


def scale(space: str | Path, batch_sizes: Sequence[int] | None = None, options: ScaleOptions | None = None, *,
          resume: bool = False, mlflow: str | None = None, output: str | Path | None = None, **changes: Any) -> list:
    """Best accuracy against batch size: a search per batch size, warm-started from the previous
    size's best, beside the naive linear-scaling baseline. Give one budget per batch size
    (trials_per_batch, timeout_s_per_batch or epochs_per_batch); the other options are
    `ScaleOptions`'. Returns the curve's points. As `tianfeng scale` (which also writes the
    report: `scale_report`)."""
    plan, steps, _ = plan_scale(space, batch_sizes, options, **changes)
    return run_scale_plan(plan, steps, resume=resume, mlflow=mlflow, output=output)


def run_scale_plan(plan, steps_per_epoch: dict[int, int], *, resume: bool = False, mlflow: str | None = None,
                   output: str | Path | None = None) -> list:
    """Run a scale study planned by `plan_scale`; refuses, before any trial, a report path that
    belongs to another study (`output`, default reports/<name>.html)."""
    from tianfeng.scaling.study import run_scale, search_study

    storage = plan.search.options.storage
    check_report_of(storage, search_study(plan.name, plan.batch_sizes[0]),
                    Path(output) if output else default_report_path(plan.name))
    points = run_scale(plan, resume=resume, steps_per_epoch=steps_per_epoch)
    if mlflow:
        export_scale(mlflow, storage, plan.name, plan.batch_sizes)
    return points


def scale_report(name: str, *, storage: str = DEFAULT_STORAGE, output: str | Path | None = None) -> Path:
    """Write a scale study's HTML report (default reports/<name>.html) and return its path."""
    from tianfeng.reporting.scale_study import build_scale_report

    return build_scale_report(storage, name, Path(output) if output else None)


def export_scale(uri: str, storage: str, name: str, batch_sizes: Sequence[int]) -> None:
    """Each batch size's study of a scale run as its own MLflow experiment."""
    from tianfeng.export.mlflow import export_study
    from tianfeng.scaling.study import search_study

    names = set(optuna.get_all_study_names(storage))
    for batch in batch_sizes:
        if search_study(name, batch) in names:
            export_study(uri, optuna.load_study(study_name=search_study(name, batch), storage=storage), storage)


def report(study: str, *, storage: str = DEFAULT_STORAGE) -> Path:
    """Write the study's HTML report (reports/<study>.html) and return its path."""
    from tianfeng.reporting.build import build_report

    path = build_report(storage, study)
    logging.getLogger("tianfeng").info("report written to %s", path)
    return path


def train(config: str | Path | None = None, overrides: Sequence[str] = (),
          callback: Callable[[Any], None] | None = None):
    """Train one run with the bundled engine: `config` a run-config file (default: the embedded
    digits recipe), `overrides` as `--set KEY=VALUE`, `callback` called with each epoch's metrics.
    Returns the engine's RunResult."""
    from tianfeng.trainers.engine import train as run_engine

    return run_engine(load_config(config or DEFAULT_RECIPE, list(overrides)), callback)


def predict(config: str | Path | None = None, overrides: Sequence[str] = (), *, gpus: int, gpus_per_node: int = 8,
            device: str = "v100", train_images: int = 1_281_167, val_images: int = 50_000, classes: int = 1000,
            startup: bool = True, **cluster: Any):
    """The predicted wall time of a run config on a cluster, part by part (start-up, compute,
    exchange, data waits, evaluation, checkpoints): the model the search scores recipes with and
    `tianfeng plan` prints. `cluster` takes the other keys of a space's `cluster:` section
    (exchange, loader, cpu_cores_per_gpu, memory_gib, ...). Raises ConfigError when a phase's
    per-GPU batch does not fit the GPU's memory. Returns a `tianfeng.cost.walltime.WallTime`."""
    from tianfeng.cost.cluster import ClusterSpec, checked

    cfg = load_config(config, overrides)
    try:
        spec = checked(ClusterSpec(gpus=gpus, gpus_per_node=gpus_per_node, device=device, **cluster), "predict",
                       prefix="")
    except TypeError as exc:
        raise ConfigError("predict", "", f"{exc}; the cluster keys are those of a space's cluster: section") from None
    check_memory(cfg, spec, in_channels=3, classes=classes, source=str(config or "the default config"))
    return predict_wall_time(cfg, spec, train_images=train_images, val_images=val_images, classes=classes,
                             startup=startup)


def launch_plan(config: str | Path, *, nodes: int, gpus_per_node: int, device: str = "cuda",
                master_addr: str = "127.0.0.1", port: int | None = None, via: str = "torchrun",
                address: str | None = None, max_restarts: int = 0, min_nodes: int = 0):
    """The checked launch plan of a run config on `nodes` x `gpus_per_node` processes: per-node
    torchrun commands, a Slurm script and a Ray job (a `tianfeng.launch.scripts.LaunchPlan`). A CPU
    plan on this machine gets a free rendezvous port; others 29500 unless `port` is given.
    `max_restarts`: how often every rank restarts from the last checkpoint after a failure;
    `min_nodes`: an elastic launch that goes on with as few nodes (torchrun's --nnodes MIN:MAX)."""
    return _launch_plan(config, nodes, gpus_per_node, device, master_addr, port, via, address, max_restarts,
                        min_nodes)[0]


def _launch_plan(config, nodes, gpus_per_node, device, master_addr, port, via, address, max_restarts=0,
                 min_nodes=0):
    """(the plan, its run config, whether it runs on this machine)."""

    cfg = load_config(config)
    check_fits(cfg, nodes, gpus_per_node, str(config), min_nodes)
    if address and via != "ray":
        raise ConfigError("--address", "", "is for --via ray (torchrun meets at --master-addr)")
    if min_nodes and via == "ray":
        raise ConfigError("--min-nodes", "", "is torchrun's elastic launch: not with --via ray (Ray Train "
                                             "restarts its workers at the same size: --max-restarts)")
    local = device == "cpu" and master_addr == "127.0.0.1"
    plan = LaunchPlan(config_path=str(config), run_name=cfg.name, nodes=nodes, per_node=gpus_per_node, device=device,
                      master_addr=master_addr, port=port or (free_port() if local else 29500),
                      max_restarts=max_restarts, min_nodes=min_nodes)
    return plan, cfg, local


def launch(config: str | Path, *, nodes: int, gpus_per_node: int, device: str = "cuda",
           master_addr: str = "127.0.0.1", port: int | None = None, via: str = "torchrun",
           address: str | None = None, max_restarts: int = 0, out: str | Path | None = None,
           min_nodes: int = 0) -> dict:
    """Write a run's launch plan (default into <run_dir>/launch) and, where it can run from here,
    run it: a CPU plan on this machine as emulated nodes of gloo processes (torchrun, or Ray Train
    with `via="ray"`), or any plan on the Ray cluster at `address`. Returns the files written and,
    when it ran, the exit code (torchrun) or the run's final metrics (Ray). As `tianfeng launch`."""

    plan, cfg, local = _launch_plan(config, nodes, gpus_per_node, device, master_addr, port, via, address,
                                    max_restarts, min_nodes)
    run_dir = cfg.resolved_run_dir
    out_dir = Path(out) if out else run_dir / "launch"
    done: dict[str, Any] = {"files": [str(p) for p in write_plan(plan, out_dir)], "plan_dir": str(out_dir),
                            "run_dir": str(run_dir), "exit_code": None, "metrics": None}
    if via == "ray" and (address or local):
        from tianfeng.launch.ray_train import run_with_ray_train

        done["metrics"] = run_with_ray_train(plan, run_dir, address)
    elif local:
        done["exit_code"] = run_here(plan)
    return done


def plan(config: str | Path, options: PlanOptions | None = None, **changes: Any):
    """A run config's predicted wall time at 1, 8, 16, ... up to `gpus` GPUs for flat, hierarchical
    and compressed exchange, part by part, and whether each per-GPU batch fits the GPU. `options`
    (a `PlanOptions`) holds what `tianfeng plan` takes as flags; keyword arguments change single
    options: `plan("run.yaml", gpus=128, preset="a100")`. Returns a
    `tianfeng.cost.grid.WallTimeGrid`. As `tianfeng plan`."""

    o = (options or PlanOptions()).changed(**changes).checked()
    cfg = load_config(config)
    images_per_s = o.gpu_images_per_s
    if o.compute_ms is not None:  # the model's throughput at 256 per GPU, from one step's time (it wins)
        half = DEVICES[o.preset].half_batch
        image_s = o.compute_ms / 1000 / (half + math.ceil(cfg.phases[-1].batch_size / o.gpus))
        images_per_s = 256 / ((half + 256) * image_s)
    classes, in_channels = o.classes, 3
    if o.profile:  # a profile of this very model measured it on its data: its head and input
        from tianfeng.cost.cluster import read_throughput
        from tianfeng.trainers.config import config_to_dict

        measured = read_throughput(o.profile, "--profile", "")
        if measured.get("model") == config_to_dict(cfg)["model"]:
            classes, in_channels = measured["classes"], measured["in_channels"]
    return wall_time_grid(cfg, o.cluster(images_per_s), train_images=o.train_images, val_images=o.val_images,
                          classes=classes, source=str(config), in_channels=in_channels)

