"""Running a batch-scaling study: for each batch size in increasing order, the naive baseline (the
smallest batch's winner with linear LR scaling and nothing else changed), then a search
warm-started from the previous size's best trials; each point is stored as soon as it is known."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from tianfeng.core.errors import ConfigError
from tianfeng.core.lr_schedule import peak_lr
from tianfeng.core.run_config import config_from_dict, config_to_dict
from tianfeng.cost.walltime import format_seconds
from tianfeng.hpo.judge.outcomes import Outcome
from tianfeng.hpo.running.runner import derived_seed, run_search
from tianfeng.hpo.space.materialize import build_config
from tianfeng.hpo.space.pinned import batch_parameter
from tianfeng.hpo.spec import SearchSpec, rung_epochs, space_of
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.scaling.results import ScalePoint, ScaleStore
from tianfeng.storage.study_attrs import StudyKey

log = logging.getLogger("tianfeng.scale")

NAIVE_RULE = {"schedule.scaling_rule": "'linear'"}


@dataclass(frozen=True)
class ScalePlan:
    search: SearchSpec  # the template of every batch size's search (study and batch filled in)
    name: str
    batch_sizes: tuple[int, ...]
    workers: int = 1
    warm_start_k: int = 3
    tolerance: float = 1.0  # "within 1 point" of the smallest batch, in the metric's units


def search_study(name: str, batch: int) -> str:
    return f"{name}-b{batch}"


def naive_study(name: str, batch: int) -> str:
    return f"{name}-b{batch}-naive"


def study_names(plan: ScalePlan) -> list[str]:
    names = [search_study(plan.name, b) for b in plan.batch_sizes]
    return names + [naive_study(plan.name, b) for b in plan.batch_sizes[1:]]


def _ranked(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None]
    return sorted(done, key=lambda t: t.value, reverse=study.direction.name == "MAXIMIZE")


def recipe(trial: optuna.trial.FrozenTrial | None) -> dict[str, Any]:
    """The recipe a trial ran, in the terms large-batch papers use."""
    if trial is None or "config" not in trial.user_attrs:
        return {}
    cfg = config_from_dict(trial.user_attrs[TrialKey.CONFIG], f"trial {trial.number}")
    out: dict[str, Any] = {
        "trial": trial.number, "optimizer": cfg.optimizer.name, "lr": cfg.optimizer.lr,
        "peak_lr": peak_lr(cfg), "scaling_rule": cfg.schedule.scaling_rule,
        "warmup_epochs": cfg.schedule.warmup_epochs, "warmup_shape": cfg.schedule.warmup_shape,
        "weight_decay": cfg.optimizer.weight_decay, "label_smoothing": cfg.optimizer.label_smoothing,
        "phases": [[p.epochs, p.resolution, p.batch_size] for p in cfg.phases], "params": dict(trial.params)}
    if cfg.optimizer.name == "lars":
        out["trust_coefficient"] = cfg.optimizer.lars.trust_coefficient
    for key in (TrialKey.PRIOR, TrialKey.WARM_START):
        if key in trial.user_attrs:
            out[key] = trial.user_attrs[key]
    return out


def _warm_start(previous: optuna.Study | None, pinned: str | None, k: int) -> tuple[tuple[str, dict], ...]:
    """The previous batch size's best `k` trials, its batch parameter dropped: the LR parameter is
    per reference batch, so the run's LR follows the space's scaling rule to the new batch."""
    if previous is None or k < 1:
        return ()
    seen: set[str] = set()
    out = []
    batch = previous.user_attrs.get(StudyKey.BATCH_SIZE)
    for t in _ranked(previous):
        params = {n: v for n, v in t.params.items() if n != pinned}
        key = repr(sorted(params.items()))
        if key not in seen:
            seen.add(key)
            out.append((f"b{batch} trial #{t.number}", params))
        if len(out) == k:
            break
    return tuple(out)


def _durations(trials: list[optuna.trial.FrozenTrial]) -> tuple[float, float]:
    def took(t: optuna.trial.FrozenTrial) -> float:
        if t.datetime_complete and t.datetime_start:
            return (t.datetime_complete - t.datetime_start).total_seconds()
        return 0.0

    return (sum(took(t) for t in trials), sum(took(t) for t in trials if t.state == TrialState.PRUNED))


def run_scale(plan: ScalePlan, *, resume: bool, steps_per_epoch: dict[int, int]) -> list[ScalePoint]:
    storage = plan.search.options.storage
    existing = set(optuna.get_all_study_names(storage)) & set(study_names(plan))
    if existing and not resume:
        raise ConfigError("--name", plan.name, f"studies {', '.join(sorted(existing))} already exist in "
                          f"{storage}; pass --resume to continue them or choose another --name")
    space = space_of(plan.search)
    pinned = batch_parameter(space)
    store = ScaleStore(storage)
    settings = {"space": plan.search.space_path, "data": plan.search.options.data or space.base.data.source,
                "rung": plan.search.rung, "metric": space.objective.metric,
                "direction": space.objective.direction, "batch_sizes": list(plan.batch_sizes),
                "trials_per_batch": plan.search.options.trials, "timeout_s": plan.search.options.timeout_s,
                "epoch_budget": plan.search.epoch_budget, "tolerance": plan.tolerance,
                "sampler": plan.search.sampler, "pruner": plan.search.options.pruner, "storage": storage}
    points: list[ScalePoint] = []
    previous: optuna.Study | None = None
    reference: optuna.trial.FrozenTrial | None = None
    for batch in plan.batch_sizes:
        started = time.perf_counter()
        name = search_study(plan.name, batch)
        warm = _warm_start(previous, pinned, plan.warm_start_k)
        naive_name, naive_trial, naive_state = None, None, "reference"
        if reference is not None:
            naive_name = naive_study(plan.name, batch)
            naive_trial = _run_naive(plan, batch, reference, pinned, naive_name, resume=naive_name in existing)
            naive_state = (naive_trial.user_attrs.get(TrialKey.STATUS, naive_trial.state.name.lower())
                           if naive_trial.state != TrialState.COMPLETE else Outcome.COMPLETED)
        # each batch size's sampler gets its own seed: the same seed would replay the previous
        # study's random start-up trials, which the warm start already summarises (a hash, not
        # seed + index, which would give --seed 1's second batch --seed 2's first batch's draws)
        index = plan.batch_sizes.index(batch)
        seed = plan.search.options.seed
        search = plan.search.changed(study=name, batch_size=batch, warm_start=warm,
                                     seed=derived_seed(seed, index) if index else seed,
                                     study_attrs={StudyKey.SCALE: plan.name, StudyKey.BATCH_SIZE: batch, StudyKey.ROLE: "search"})
        if naive_trial is not None and name not in existing:
            search = _reuse_naive(search, naive_trial, f"{naive_name} trial #{naive_trial.number}")
        log.info("batch %d (%d of %d): searching study %s%s", batch, len(points) + 1, len(plan.batch_sizes), name,
                 f", warm-started from {', '.join(w[0] for w in warm)}" if warm else "")
        searched(search, plan.workers, resume=name in existing)
        study = optuna.load_study(study_name=name, storage=storage)
        ranked = _ranked(study)
        best = ranked[0] if ranked else None
        if reference is None:
            if best is None:
                raise RuntimeError(f"no trial completed at the smallest batch {batch} (study {name}): "
                                   "nothing to scale from; raise the budget")
            reference = best
        trials = study.get_trials(deepcopy=False)
        trial_s, pruned_s = _durations(trials)
        point = ScalePoint(
            batch_size=batch, study=name, searched_value=best.value if best else None,
            searched_trial=best.number if best else None, searched_recipe=recipe(best),
            naive_study=naive_name,
            naive_value=(best.value if best else None) if naive_name is None else naive_trial.value,
            naive_status=naive_state, naive_recipe=recipe(best if naive_name is None else naive_trial),
            trials=len(trials), complete=sum(t.state == TrialState.COMPLETE for t in trials),
            pruned=sum(t.state == TrialState.PRUNED for t in trials),
            warm_started=sum(TrialKey.WARM_START in t.user_attrs for t in trials),
            wall_s=time.perf_counter() - started, trial_s=trial_s, pruned_s=pruned_s,
            steps_per_epoch=steps_per_epoch.get(batch, 0), epochs_per_trial=rung_epochs(space, plan.search.rung),
            noise_scale=(best.user_attrs.get(TrialKey.FINAL) or {}).get("noise_scale") if best else None)
        store.save(plan.name, point, settings)
        points.append(point)
        previous = study
        log.info("batch %d done in %s; %s", batch, format_seconds(point.wall_s), _eta(points, len(plan.batch_sizes)))
    return points


def searched(search: SearchSpec, workers: int, *, resume: bool) -> None:
    """Run one search of the scale study: here, or (`--launcher slurm`) as a job array of
    `workers` tasks, waited for. A resumed search whose array still runs is waited for, not
    submitted again."""
    if search.options.launcher == "local":
        run_search(search, workers, resume=resume)
        return
    from tianfeng.hpo.results.follow import follow
    from tianfeng.hpo.running.study import open_study
    from tianfeng.hpo.running.submitted import check_workers_submission, submit_workers
    from tianfeng.launch.launchers import scheduler

    search = search.changed(workers=workers)
    check_workers_submission(search)
    study = open_study(search, space_of(search), resume=resume, heartbeat=False)
    job = study.user_attrs.get(StudyKey.WORKERS_JOB)
    if job is None or scheduler(job["launcher"]).state(job["job"]).ended:
        submit_workers(search, study)
    else:
        log.info("study %s: its workers' %s job %s still runs: waiting for it", search.study, job["launcher"],
                 job["job"])
    storage = search.options.storage
    for snap in follow(lambda: optuna.load_study(study_name=search.study, storage=storage), FOLLOW_S):
        log.info("study %s: %s trials, best %s (workers' job %s)", search.study, snap["trials"],
                 "none" if snap["best_value"] is None else f"{snap['best_value']:.4g}", snap["workers_job"])


FOLLOW_S = 5.0  # seconds between looks at a submitted search


def _eta(points: list[ScalePoint], total: int) -> str:
    """How much of the scale study is left, by the batch sizes done so far (each gets the same
    budget, so their mean time is the estimate)."""
    left = total - len(points)
    if left == 0:
        return "every batch size done"
    mean = sum(p.wall_s for p in points) / len(points)
    return f"{left} batch size(s) left, about {format_seconds(left * mean)} to go"


def _run_naive(plan: ScalePlan, batch: int, reference: optuna.trial.FrozenTrial, pinned: str | None,
               name: str, *, resume: bool) -> optuna.trial.FrozenTrial:
    """The smallest batch's winner at `batch` with linear LR scaling and nothing else changed."""
    params = {n: v for n, v in reference.params.items() if n != pinned}
    naive = plan.search.changed(
        study=name, batch_size=batch, sampler="random", pruner="none", trials=1,
        timeout_s=None, epoch_budget=None, priors=False, set_overrides=NAIVE_RULE,
        warm_start=((f"naive: b{plan.batch_sizes[0]} trial #{reference.number}, linear LR scaling", params),),
        study_attrs={StudyKey.SCALE: plan.name, StudyKey.BATCH_SIZE: batch, StudyKey.ROLE: "naive"})
    log.info("batch %d: naive baseline (batch %d winner, linear LR scaling) in study %s",
             batch, plan.batch_sizes[0], name)
    searched(naive, 1, resume=resume)
    return optuna.load_study(study_name=name, storage=plan.search.options.storage).get_trials(deepcopy=False)[-1]


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in ("name", "run_dir")}


def _reuse_naive(search: SearchSpec, naive: optuna.trial.FrozenTrial, naive_study_label: str) -> SearchSpec:
    """A warm-start entry that would train exactly the naive baseline's config (the previous
    batch's winner under a linear scaling rule) is not trained again: the naive trial is copied
    into the new study (where it counts as one of the budget's trials), so the sampler learns
    from it without the study training it a second time."""
    if naive.state != TrialState.COMPLETE or "config" not in naive.user_attrs:
        return search
    space = space_of(search)
    target = _comparable(naive.user_attrs[TrialKey.CONFIG])
    for i, (label, params) in enumerate(search.warm_start):
        if _comparable(config_to_dict(build_config(space, params, search.rung))) != target:
            continue
        copy = optuna.trial.create_trial(
            state=TrialState.COMPLETE, value=naive.value, params=naive.params, distributions=naive.distributions,
            intermediate_values=naive.intermediate_values,
            user_attrs={**naive.user_attrs, TrialKey.WARM_START: label, TrialKey.COPIED_FROM: naive_study_label})
        log.info("warm start %s is the naive baseline: its result (%.4g) is copied, not trained again",
                 label, naive.value)
        return dataclasses.replace(search, warm_start=search.warm_start[:i] + search.warm_start[i + 1:],
                                   copied_trials=(*search.copied_trials, copy))
    return search


def largest_within(points: list[ScalePoint], tolerance: float, *, naive: bool, maximize: bool = True) -> int | None:
    """The largest batch whose value stays within `tolerance` of the smallest batch's searched value."""
    if not points or points[0].searched_value is None:
        return None
    ref = points[0].searched_value
    best = None
    for p in points:
        value = p.naive_value if naive else p.searched_value
        if value is not None and (value >= ref - tolerance if maximize else value <= ref + tolerance):
            best = p.batch_size
    return best
