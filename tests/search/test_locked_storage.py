"""Local workers on one SQLite study never take the same enqueued trial (SQLite has no row locks,
so without the lock two processes could both move one WAITING trial to RUNNING), and together
start exactly the trial budget, on SQLite and on PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import signal
import threading
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
    from tianfeng.hpo.running.budget import Budget
    from tianfeng.hpo.running.locked_storage import BudgetReached

    storage = open_storage(url, heartbeat_s=None)
    storage.limit("budget", Budget(BUDGET).may_start)
    study = optuna.load_study(study_name="budget", storage=storage)
    start.wait()
    try:
        while True:  # every worker asks as fast as it can: the budget is all that stops them
            trial = study.ask()
            study.tell(trial, 0.0)
    except BudgetReached:
        return


def _start_exactly_the_budget(url: str) -> None:
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


def test_workers_on_one_sqlite_study_start_exactly_the_budget(tmp_path: Path) -> None:
    _start_exactly_the_budget(f"sqlite:///{tmp_path / 'budget.db'}")


def _two_count_at_once(url: str) -> list[optuna.trial.FrozenTrial]:
    """Two workers (threads, each with its own storage and connections) start a trial of a
    budget of one at once: each, when it counts, waits for the other to count too, which only a
    lock shared by both keeps out. Returns the study's trials."""
    from tianfeng.hpo.running.budget import Budget
    from tianfeng.hpo.running.locked_storage import BudgetReached

    optuna.create_study(study_name="one", storage=open_storage(url, heartbeat_s=None))
    counting = [threading.Event(), threading.Event()]

    def worker(me: int) -> None:
        storage = open_storage(url, heartbeat_s=None)

        def may_start(trials, number) -> bool:
            counting[me].set()
            counting[1 - me].wait(timeout=3)
            return Budget(1).may_start(trials, number)

        storage.limit("one", may_start)
        study = optuna.load_study(study_name="one", storage=storage)
        with contextlib.suppress(BudgetReached):
            study.tell(study.ask(), 0.0)

    threads = [threading.Thread(target=worker, args=(me,)) for me in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return optuna.load_study(study_name="one", storage=url).get_trials()


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_two_workers_counting_the_budget_at_once_start_one_trial_between_them(database: str, tmp_path: Path) -> None:
    """Bug: workers on many nodes share a PostgreSQL study, where no file lock reaches: two
    counting the budget at once each started a trial (a search of 4 trials ran 5)."""
    from tests.postgres import postgres_server

    if database == "sqlite":
        trials = _two_count_at_once(f"sqlite:///{tmp_path / 'one.db'}")
    else:
        with postgres_server() as url:
            trials = _two_count_at_once(url)
    assert [t.state for t in trials] == [TrialState.COMPLETE]


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
