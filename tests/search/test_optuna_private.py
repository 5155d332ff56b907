"""The reaches past Optuna's public API, checked against the installed Optuna: a release that
renames or moves one fails here, not in a user's search."""

from __future__ import annotations

import inspect

import optuna
import pytest
from optuna.storages import RDBStorage

from tianfeng.hpo.optuna_private import (
    CREATE_NEW_TRIAL,
    frozen_trial,
    grace_period_s,
    heartbeating_trials,
    storage_of,
    study_id,
    trial_id,
)
from tianfeng.hpo.running.locked_storage import MarkingStorage


def test_the_study_and_trial_ids_are_the_storages_own(tmp_path) -> None:
    storage = RDBStorage(f"sqlite:///{tmp_path / 'p.db'}")
    study = optuna.create_study(study_name="p", storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    assert study_id(study) == storage.get_study_id_from_name("p")
    assert isinstance(storage_of(study), optuna.storages.BaseStorage)
    for trial in study.get_trials():
        assert storage.get_trial(trial_id(trial)).number == trial.number
    storage_of(study).set_study_system_attr(study_id(study), "k", "v")
    assert storage.get_study_system_attrs(study_id(study))["k"] == "v"


def test_the_method_the_locked_storage_wraps_is_still_rdbstorages() -> None:
    original = getattr(RDBStorage, CREATE_NEW_TRIAL)
    assert list(inspect.signature(original).parameters) == ["self", "study_id", "template_trial"]
    assert getattr(MarkingStorage, CREATE_NEW_TRIAL) is not original  # the override is the one called
    source = inspect.getsource(RDBStorage.create_new_trial)
    assert CREATE_NEW_TRIAL in source  # the public method still goes through it


def test_a_running_trial_reads_back_as_the_frozen_trial_a_pruner_is_given(tmp_path) -> None:
    """The peer rule asks a two-objective study's pruner itself, with the trial as its storage
    holds it: the attribute just set must be there."""
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'f.db'}", directions=["maximize", "minimize"])
    study.ask()  # another running trial first: the one asked about must be read, not any
    trial = study.ask()
    trial.set_user_attr("rung_values", {"0.333": 1.0})
    frozen = frozen_trial(trial)
    assert isinstance(frozen, optuna.trial.FrozenTrial) and frozen.number == trial.number
    assert frozen.state == optuna.trial.TrialState.RUNNING and frozen.user_attrs["rung_values"] == {"0.333": 1.0}


def test_the_trials_with_a_heartbeat_are_read_through_optunas_cache(tmp_path) -> None:
    from tianfeng.hpo.running.study import open_storage

    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'h.db'}", heartbeat_s=1, grace_s=2))
    study.ask()  # running, no heartbeat
    beating, finished = study.ask(), study.ask()
    for trial in (beating, finished):
        storage_of(study).record_heartbeat(trial_id(trial))
    study.tell(finished, 1.0)
    assert heartbeating_trials(study) == {beating.number}


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # heartbeats, since Optuna 2.9
def test_the_grace_period_is_read_as_optuna_judges_staleness(tmp_path) -> None:
    """Bug caught: a watcher that waits for a first heartbeat longer or shorter than Optuna's
    own rule (the grace given, else two intervals; none without heartbeats)."""
    given = optuna.create_study(storage=RDBStorage(f"sqlite:///{tmp_path / 'g.db'}", heartbeat_interval=1,
                                                   grace_period=7))
    doubled = optuna.create_study(storage=RDBStorage(f"sqlite:///{tmp_path / 'd.db'}", heartbeat_interval=3))
    plain = optuna.create_study(storage=RDBStorage(f"sqlite:///{tmp_path / 'n.db'}"))
    assert (grace_period_s(given), grace_period_s(doubled), grace_period_s(plain)) == (7.0, 6.0, 0.0)
