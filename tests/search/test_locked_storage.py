"""Local workers on one SQLite study never take the same enqueued trial (SQLite has no row locks,
so without the lock two processes could both move one WAITING trial to RUNNING), and together
start exactly the trial budget."""

from __future__ import annotations

import json
import multiprocessing
import signal
from pathlib import Path

import optuna
import pytest
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from tianfeng.hpo.running.locked_storage import interrupts_through_optuna
from tianfeng.hpo.running.study import open_storage
from tianfeng.terminal import interrupts

ENQUEUED = 60
WORKERS = 4


def _take_all(url: str, out: str, start: multiprocessing.Event) -> None:
    storage = open_storage(url, heartbeat_s=None)
    study = optuna.load_study(study_name="race", storage=storage)
    start.wait()
    taken = []
    while True:
        trial = study.ask()
        fixed = storage.get_trial_system_attrs(trial._trial_id).get("fixed_params", {})
        if "x" not in fixed:  # the queue is empty: a fresh trial
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            break
        taken.append(fixed["x"])
        study.tell(trial, 0.0)
    Path(out).write_text(json.dumps(taken))


def test_every_enqueued_trial_is_taken_by_exactly_one_worker(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'race.db'}"
    study = optuna.create_study(study_name="race", storage=open_storage(url, heartbeat_s=None))
    for x in range(ENQUEUED):
        study.enqueue_trial({"x": x})
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    outs = [tmp_path / f"taken-{i}.json" for i in range(WORKERS)]
    procs = [ctx.Process(target=_take_all, args=(url, str(out), start)) for out in outs]
    for p in procs:
        p.start()
    start.set()  # all ask at once
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    taken = [x for out in outs for x in json.loads(out.read_text())]
    assert sorted(taken) == list(range(ENQUEUED))  # each once: none twice, none lost


BUDGET = 10


def _run_until_budget(url: str, start: multiprocessing.Event) -> None:
    from tianfeng.hpo.running.budget import counted
    from tianfeng.hpo.running.locked_storage import BudgetReached

    storage = open_storage(url, heartbeat_s=None)
    storage.limit("budget", lambda trials: len(counted(trials)) >= BUDGET)
    study = optuna.load_study(study_name="budget", storage=storage)
    start.wait()
    try:
        while True:  # every worker asks as fast as it can: the budget is all that stops them
            trial = study.ask()
            study.tell(trial, 0.0)
    except BudgetReached:
        return


def test_workers_on_one_sqlite_study_start_exactly_the_budget(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'budget.db'}"
    study = optuna.create_study(study_name="budget", storage=open_storage(url, heartbeat_s=None))
    for x in range(3):  # enqueued trials count like fresh ones
        study.enqueue_trial({"x": x})
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_run_until_budget, args=(url, start)) for _ in range(WORKERS)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    trials = study.get_trials()
    assert sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials) == BUDGET
    assert not [t for t in trials if t.state == optuna.trial.TrialState.WAITING]


def test_a_ctrl_c_while_a_trial_end_is_written_keeps_the_trial_and_reaches_the_caller(
        tmp_path: Path, monkeypatch) -> None:
    """The storage holds Ctrl-C back until a trial's end is written and then raises it inside
    Optuna's trial loop, which turned it into an UnboundLocalError of its own."""
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 's.db'}", heartbeat_s=None))
    write = RDBStorage.set_trial_state_values

    def ctrl_c_during_the_write(self, trial_id, state, values=None):
        if state == TrialState.COMPLETE:
            signal.raise_signal(signal.SIGINT)
        return write(self, trial_id, state, values)

    monkeypatch.setattr(RDBStorage, "set_trial_state_values", ctrl_c_during_the_write)
    try:
        with pytest.raises(KeyboardInterrupt), interrupts_through_optuna():
            study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=3)
    finally:
        interrupts.clear()
    assert [t.state for t in study.get_trials()] == [TrialState.COMPLETE]
    assert study.get_trials()[0].value == study.get_trials()[0].params["x"]
