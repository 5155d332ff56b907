"""A worker whose budget is spent watches the other workers' trials until they end."""

from __future__ import annotations

import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tianfeng.hpo.running.stale_trials import watch_until_others_end
from tianfeng.hpo.running.study import open_storage


def _study(tmp_path: Path) -> optuna.Study:
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}", heartbeat_s=1, grace_s=2)
    return optuna.create_study(study_name="s", storage=storage)


def _running_trial(study: optuna.Study, worker: str) -> optuna.trial.FrozenTrial:
    trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    trial.set_user_attr("worker", worker)
    study._storage.record_heartbeat(trial._trial_id)  # its worker's one heartbeat, then it dies
    return study.trials[trial.number]


def test_a_dead_workers_trial_is_failed_queued_again_and_run_by_the_watcher(tmp_path: Path) -> None:
    """Bug caught: a stale trial never failed once no worker starts a trial (it stays RUNNING and
    the watcher never returns), or failed but not queued again with its parameters."""
    study = _study(tmp_path)
    dead = _running_trial(study, "elsewhere:1")
    ran: list[dict] = []

    def run_queued() -> None:
        study.optimize(lambda t: ran.append(t.params) or t.params["x"], n_trials=1)

    start = time.monotonic()
    watch_until_others_end(study, run_queued, deadline=start + 60, poll_s=0.2)
    assert time.monotonic() - start < 30  # returned because the trial ended, not at the deadline
    trials = study.get_trials()
    assert trials[dead.number].state == TrialState.FAIL
    retry = next(t for t in trials if t.system_attrs.get("failed_trial") == dead.number)
    assert retry.state == TrialState.COMPLETE and ran == [dead.params]


def test_a_live_workers_trial_is_waited_for_and_a_trial_without_a_heartbeat_only_for_the_grace(
        tmp_path: Path) -> None:
    """Bug caught: the watcher leaving while another worker's trial still runs (a trial it would
    have to continue if that worker died), or waiting for ever for a RUNNING trial that has no
    heartbeat (its worker died before the first: it never goes stale)."""
    study = _study(tmp_path)
    study.ask()  # RUNNING, never a heartbeat: waited for no longer than the grace period (2 s)
    live = _running_trial(study, "elsewhere:2")
    polls: list[int] = []

    def idle(s: optuna.Study) -> None:
        polls.append(1)
        s._storage.record_heartbeat(live._trial_id)
        if len(polls) == 5:
            s.tell(live.number, 0.5)

    start = time.monotonic()
    watch_until_others_end(study, lambda: None, deadline=start + 60, idle=idle, poll_s=0.2)
    assert len(polls) >= 5 and time.monotonic() - start < 30
    assert study.get_trials()[live.number].state == TrialState.COMPLETE


def test_a_trial_another_worker_just_took_from_the_queue_is_waited_for(tmp_path: Path) -> None:
    """Bug caught: the watcher leaving in the moment between another worker taking a queued
    retry (RUNNING) and that trial's first heartbeat, so no worker watches the retry (seen on
    Slurm: a task's worker printed its summary with the retry still running)."""
    study = _study(tmp_path)
    taken = study.ask()  # as another worker takes a queued trial: RUNNING, its heartbeat not yet begun
    polls: list[int] = []

    def idle(s: optuna.Study) -> None:
        polls.append(1)
        if len(polls) == 3:  # its heartbeat begins, later it ends
            s._storage.record_heartbeat(taken._trial_id)
        if len(polls) == 6:
            s.tell(taken.number, 0.5)

    watch_until_others_end(study, lambda: None, deadline=time.monotonic() + 60, idle=idle, poll_s=0.2)
    assert len(polls) == 6
    assert study.get_trials()[taken.number].state == TrialState.COMPLETE
