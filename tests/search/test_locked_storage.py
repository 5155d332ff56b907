"""Local workers on one SQLite study never take the same enqueued trial (SQLite has no row locks,
so without the lock two processes could both move one WAITING trial to RUNNING)."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import optuna

from tianfeng.search.runner import open_storage

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
