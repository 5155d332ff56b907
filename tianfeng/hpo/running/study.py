"""A study made or reopened for a search: its storage, sampler and pruner, the attributes that
record what was searched, and the published priors queued as its first trials."""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path

import optuna
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

from tianfeng.core.errors import ConfigError
from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.judge.pruning import judging
from tianfeng.hpo.results.dashboard import metric_names
from tianfeng.hpo.running.budget import RETRIES, counted, pending
from tianfeng.hpo.running.locked_storage import rdb_storage
from tianfeng.hpo.sampling.registry import make_sampler
from tianfeng.hpo.space.read import SearchSpace, per_gpu_range
from tianfeng.hpo.space.stored import store_space_text
from tianfeng.hpo.spec import SearchSpec
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.storage.ownership import check_folder, claim_folder, new_uid, study_owner
from tianfeng.storage.study_attrs import StudyKey
from tianfeng.storage.url import engine_options
from tianfeng.terminal.interrupts import (
    deferred_interrupt,
)

log = logging.getLogger("tianfeng.search")


SPACE_FORMAT = 2


def open_storage(url: str, heartbeat_s: int | None = 10, grace_s: int = 60) -> RDBStorage:
    """Optuna's RDB storage with heartbeats: a trial whose worker died goes stale after `grace_s`
    and is queued again with the same parameters (up to twice), resuming its checkpoint.
    `heartbeat_s=None` for ask-and-tell drivers (the Ray backend), which Optuna cannot heartbeat."""
    engine_kwargs = engine_options(url)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if heartbeat_s is None:
        return rdb_storage(url, engine_kwargs=engine_kwargs)
    return rdb_storage(url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_s,
                      grace_period=grace_s,
                      heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
                          max_retry=RETRIES, inherit_intermediate_values=True))


def directions(space: SearchSpace) -> list[str]:
    """Optuna's directions: the metric's; (metric, predicted time); or the predicted time."""
    mode = space.objective.mode
    if mode == ObjectiveMode.PARETO:
        return [space.objective.direction, "minimize"]
    return ["minimize"] if mode == ObjectiveMode.TIME_TO_TARGET else [space.objective.direction]




def open_study(spec: SearchSpec, space: SearchSpace, *, resume: bool, heartbeat: bool = True,
               seed: int | None = None) -> optuna.Study:
    """The spec's study, created whole (Ctrl-C waits for it) or loaded to be resumed."""
    with deferred_interrupt():
        return _open_study(spec, space, resume=resume, heartbeat=heartbeat, seed=seed)


def _open_study(spec: SearchSpec, space: SearchSpace, *, resume: bool, heartbeat: bool,
                seed: int | None) -> optuna.Study:
    storage = open_storage(spec.options.storage, spec.options.heartbeat_s if heartbeat else None, spec.options.grace_s)
    exists = spec.study in optuna.get_all_study_names(storage)
    if exists and not resume:
        raise ConfigError("--study", spec.study, f"already exists in {spec.options.storage}; pass --resume to "
                          "continue it or choose another --study name")
    if not exists and resume:
        raise ConfigError("--study", spec.study, f"no such study in {spec.options.storage} to resume")
    if space.objective.mode == ObjectiveMode.PARETO and spec.sampler == "cmaes":
        raise ConfigError("--sampler", "cmaes", "optimises one objective; with objective pareto use tpe, "
                          "random, qmc or grid")
    folder = Path(spec.runs_root) / spec.study
    if exists:
        stored = optuna.load_study(study_name=spec.study, storage=storage)
        was = stored.user_attrs.get(StudyKey.OBJECTIVE_MODE, ObjectiveMode.ACCURACY)
        if was != space.objective.mode:
            raise ConfigError("--objective", space.objective.mode, f"study {spec.study} was created with "
                              f"objective {was}; resume it with --objective {was}")
        owner = study_owner(stored, spec.options.storage)
        claim_folder(folder, owner)
    else:  # before the study exists, so a refusal leaves nothing behind
        check_folder(folder, None)
    judged = judging(space, spec.rung, spec.options.pruner)
    study = optuna.create_study(study_name=spec.study, storage=storage, load_if_exists=True,
                                directions=directions(space),
                                sampler=make_sampler(spec.sampler, space, spec.options.seed if seed is None else seed, spec.options.seed),
                                pruner=judged.pruner)
    if not exists:
        with warnings.catch_warnings():  # experimental since Optuna 3.2, and what the dashboard reads
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(metric_names(space.objective.mode, space.objective.metric))
        store_space_text(study, Path(space.path).read_text())
        attrs = {StudyKey.KIND: "search", StudyKey.SPACE_PATH: space.path,
                 StudyKey.OBJECTIVE_MODE: space.objective.mode, StudyKey.DIRECTION: space.objective.direction,
                 StudyKey.TARGET: space.objective.target, StudyKey.MIN_ACCURACY: space.objective.min_accuracy,
                 StudyKey.CLUSTER: space.cluster.describe(), StudyKey.PER_GPU_BATCH: per_gpu_range(space),
                 StudyKey.GPUS: space.cluster.gpus, StudyKey.GPUS_PER_NODE: space.cluster.gpus_per_node,
                 StudyKey.PROFILE: str(Path(spec.options.profile).resolve()) if spec.options.profile else None,
                 StudyKey.DATA: spec.options.data or space.base.data.source, StudyKey.RUNG: spec.rung,
                 StudyKey.SAMPLER: spec.sampler, StudyKey.PRUNER: judged.name,
                 StudyKey.METRIC: space.objective.metric, StudyKey.RUNS_ROOT: str(spec.runs_root),
                 StudyKey.CREATED: time.strftime("%Y-%m-%d %H:%M:%S"), StudyKey.SPACE_FORMAT: SPACE_FORMAT,
                 StudyKey.UID: new_uid(), **spec.study_attrs}
        for key, value in attrs.items():
            study.set_user_attr(key, value)
        claim_folder(folder, study_owner(study, spec.options.storage))
        for trial in spec.copied_trials:
            study.add_trial(trial)
        for label, params in spec.warm_start:
            study.enqueue_trial(params, user_attrs={TrialKey.WARM_START: label})
        if spec.sampler == "grid" and space.priors:
            log.info("grid sampler: the priors are not enqueued (the grid covers the space itself)")
    if spec.sampler != "grid":
        enqueue_priors(study, space, spec)
    study.set_user_attr(StudyKey.TRIAL_BUDGET, spec.options.trials)  # this start's budget: what `status --follow` waits for
    return study


def enqueue_priors(study: optuna.Study, space: SearchSpace, spec: SearchSpec) -> None:
    """Queue the space's published recipes as the next trials, as many as the budget has room
    for; on a resume with a larger budget, the ones that did not fit before."""
    trials = study.get_trials(deepcopy=False)
    # a prior the warm start already holds (same values for every key the prior names) is dropped
    warm = [params for _, params in spec.warm_start] + [t.params for t in spec.copied_trials]
    queued = {t.user_attrs.get(TrialKey.PRIOR) for t in trials}
    priors = [p for p in space.priors if p.name not in queued
              and not any(all(w.get(k) == v for k, v in p.params.items()) for w in warm)]
    if not priors:
        return
    room = max(0, spec.options.trials - len(counted(trials)) - len(pending(trials)))
    fits, left = priors[:room], priors[room:]
    for prior in fits:
        study.enqueue_trial(prior.params, user_attrs={TrialKey.PRIOR: prior.name})
    if fits:
        log.info("enqueued %d published recipes as the first trials: %s", len(fits), ", ".join(p.name for p in fits))
    if left:
        log.info("the budget of %d trials has no room for the published recipe(s) %s; a --resume with a larger "
                 "--trials runs them", spec.options.trials, ", ".join(p.name for p in left))
