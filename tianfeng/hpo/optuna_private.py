"""Every reach past Optuna's public API, in one room, each with why it is needed; the test beside
it (tests/search/test_optuna_private.py) fails when an Optuna release moves one of them.

- A study's storage and id: study system attributes (the stored space file) and a trial's state
  written from outside its worker (a dead worker's trial marked interrupted) have no public API.
- A trial's storage id: the storage's setters take it, the public trial object hides it; and a
  running trial as the FrozenTrial a pruner is given (Optuna builds it only inside
  `Trial.should_prune`, which refuses two-objective studies).
- `RDBStorage._create_new_trial`: the one method Optuna's cache calls for every new trial, which
  the locked storage wraps to mark a trial with its worker as it starts.
- The trials with a heartbeat, and the storage's grace period: Optuna reads them only to fail
  the stale ones; a worker watching the others' trials needs to know which can go stale (a
  trial whose worker died before its first heartbeat never does), and how long a first
  heartbeat may take."""

from __future__ import annotations

import optuna
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import FrozenTrial, TrialState

CREATE_NEW_TRIAL = "_create_new_trial"  # RDBStorage's, overridden by locked_storage.MarkingStorage


def storage_of(study: optuna.Study) -> BaseStorage:
    return study._storage


def study_id(study: optuna.Study) -> int:
    return study._study_id


def trial_id(trial: FrozenTrial | optuna.Trial) -> int:
    return trial._trial_id


def frozen_trial(trial: optuna.Trial) -> FrozenTrial:
    """The running `trial` as its storage holds it now."""
    return storage_of(trial.study).get_trial(trial_id(trial))


def rdb_backend(study: optuna.Study) -> RDBStorage | None:
    """The RDB storage under Optuna's cache, or None for another kind."""
    storage = storage_of(study)
    storage = getattr(storage, "_backend", storage)
    return storage if isinstance(storage, RDBStorage) else None


def heartbeating_trials(study: optuna.Study) -> set[int]:
    """The numbers of the study's running trials that have a heartbeat."""
    from optuna.storages._rdb import models

    storage = rdb_backend(study)
    if storage is None:
        return set()
    session = storage.scoped_session()
    try:
        rows = (session.query(models.TrialModel.number).join(models.TrialHeartbeatModel)
                .filter(models.TrialModel.study_id == study_id(study),
                        models.TrialModel.state == TrialState.RUNNING).all())
        return {number for (number,) in rows}
    finally:
        session.close()


def grace_period_s(study: optuna.Study) -> float:
    """How long a trial's heartbeat may be missed before it counts as stale (Optuna's rule:
    the grace period given, else two heartbeat intervals); 0 without heartbeats."""
    storage = rdb_backend(study)
    if storage is None or storage.heartbeat_interval is None:
        return 0.0
    return float(storage.grace_period if storage.grace_period is not None else 2 * storage.heartbeat_interval)
