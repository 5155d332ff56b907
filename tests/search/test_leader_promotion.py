"""`tianfeng search --promote leader`: each new proxy leader trained at full fidelity while the
search waits, the search ending with its leader's full run; Ctrl-C in a promoted run and --resume."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

import tianfeng
from tests.search.conftest import write_space
from tianfeng.hpo.running.locked_storage import worker_id
from tianfeng.promotion.leaders import FIRST_AFTER, LeaderPromotion, full_run_estimate, proxy_leader
from tianfeng.storage.runs import RunRecordStatus, RunStore


def _trial(state: TrialState, value: float | None = None) -> optuna.trial.FrozenTrial:
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    return optuna.create_trial(state=state, value=value, params={"x": 0.5}, distributions=dist)


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_leader_is_the_best_complete_trial_once_three_are_complete(direction: str) -> None:
    study = optuna.create_study(direction=direction)
    study.set_user_attr("objective_mode", "accuracy")
    for state, value in ((TrialState.COMPLETE, 50.0), (TrialState.PRUNED, None), (TrialState.FAIL, None),
                         (TrialState.COMPLETE, 70.0)):
        study.add_trial(_trial(state, value))
    assert FIRST_AFTER == 3 and proxy_leader(study) is None  # two complete: pruned and failed do not count
    study.add_trial(_trial(TrialState.COMPLETE, 60.0))
    leader = proxy_leader(study)
    assert leader is not None and leader.value == (70.0 if direction == "maximize" else 50.0)


def _proxy_took(study: optuna.Study, score: float, took_s: float, epochs: int = 20, trained: int = 1, cores: int = 1,
                reported: bool = True) -> None:
    """A trial of a run of `epochs` epochs that trained `trained` of them in `took_s` seconds on
    `cores` threads, its scores reported to Optuna (accuracy) or kept as its curve (other objectives)."""
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    curve = {e: score for e in range(1, trained + 1)}
    attrs = {"score": score, "cores": cores, "config": {"phases": [{"epochs": epochs - 5}, {"epochs": 5}]}}
    trial = optuna.create_trial(value=score, params={"x": 0.5}, distributions=dist,
                                user_attrs=attrs if reported else {**attrs, "curve": {str(e): v for e, v in curve.items()}},
                                intermediate_values=curve if reported else {})
    trial.datetime_start = trial.datetime_complete - timedelta(seconds=took_s)
    study.add_trial(trial)


def test_a_trials_whole_run_is_estimated_from_its_time_per_epoch_scaled_to_the_full_runs_cores() -> None:
    study = optuna.create_study(direction="maximize")
    _proxy_took(study, 50.0, took_s=10.0, epochs=20, cores=1)
    _proxy_took(study, 50.0, took_s=10.0, epochs=20, cores=2)
    _proxy_took(study, 50.0, took_s=10.0, epochs=20, trained=20)  # a proxy trained whole: its own time
    _proxy_took(study, 50.0, took_s=10.0, epochs=20, reported=False)  # time-to-target: its curve says what it trained
    one_thread, two_threads, whole, curve_only = study.get_trials()
    assert full_run_estimate(one_thread, cores=2) == pytest.approx(100.0)  # 10 s x 20 epochs, on twice the threads
    assert full_run_estimate(two_threads, cores=2) == pytest.approx(200.0)
    assert full_run_estimate(one_thread, cores=1) == pytest.approx(200.0)
    assert full_run_estimate(whole, cores=1) == pytest.approx(10.0)
    assert full_run_estimate(curve_only, cores=1) == pytest.approx(200.0)
    assert full_run_estimate(_trial(TrialState.COMPLETE, 50.0), cores=2) is None  # no curve, no config


def _full_run(store: RunStore, tmp_path: Path, number: int, curve: list[float], took_s: float) -> None:
    run_id, _ = store.open_run(study="s", trial_number=number, config_hash=str(number), kind="promote",
                               run_dir=str(tmp_path / str(number)), config_yaml="", proxy_score=curve[0])
    epochs = [{"val_top1": v, "elapsed_s": took_s * (i + 1) / len(curve)} for i, v in enumerate(curve)]
    store.update(run_id, status=RunRecordStatus.COMPLETED, final_score=curve[-1], epochs=epochs)


def test_after_a_resume_balanced_waits_by_the_last_full_runs_recorded_time(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    study.set_user_attr("objective_mode", "accuracy")
    for score in (50.0, 45.0, 48.0, 60.0):
        _proxy_took(study, score, took_s=1.0)
    _full_run(RunStore(storage), tmp_path, 0, [50.0, 60.0, 70.0], took_s=300.0)  # trained before the resume
    now = [0.0]
    promotion = LeaderPromotion(storage, "s", tmp_path / "runs", clock=lambda: now[0], balanced=True, cores=1)
    assert promotion.promoted == {0} and promotion.last_took == pytest.approx(300.0)
    now[0] = 299.0  # trial 3 leads; its estimate (20 s) would let it go, the last full run's 300 s does not
    assert promotion(study) is None
    now[0] = 300.0
    assert promotion(study) is not None and promotion.promoted == {0, 3}


def _balanced(tmp_path: Path, balanced: bool = True) -> tuple[optuna.Study, LeaderPromotion, list[float], list[int]]:
    """An accuracy search of three recipes (trial 0 leads, its whole run estimated at 100 s on the
    2 cores), its clock at the search's start, its full runs taking 100 s of that clock."""
    storage = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    study.set_user_attr("objective_mode", "accuracy")
    for score in (50.0, 45.0, 48.0):
        _proxy_took(study, score, took_s=10.0)
    now, trained = [1000.0], []
    promotion = LeaderPromotion(storage, "s", tmp_path / "runs", clock=lambda: now[0], balanced=balanced, cores=2)

    def full_run(number: int) -> None:  # what a promotion leaves: its run record, 100 s later
        now[0] += 100.0
        trained.append(number)
        _full_run(promotion.store, tmp_path, number, [50.0, 60.0, 70.0, 75.0], took_s=100.0)

    promotion._promote = full_run
    return study, promotion, now, trained


def test_balanced_a_leaders_full_run_waits_until_the_proxies_have_run_as_long_as_its_full_runs_will_train(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    study, promotion, now, trained = _balanced(tmp_path)
    now[0] += 99.0  # searched 99 s; trial 0's whole run is estimated at 100 s
    with caplog.at_level("INFO", logger="tianfeng.promote"):
        assert promotion(study) is None and promotion(study) is None and promotion.promoted == set()
    assert sum("trial 0 leads; its full run waits" in r.message for r in caplog.records) == 1  # logged once
    now[0] += 1.0
    work = promotion(study)
    assert work is not None and promotion.promoted == {0}
    work()
    assert trained == [0]
    _proxy_took(study, 60.0, took_s=10.0)  # trial 3 takes the lead
    now[0] += 99.0  # searched 199 s in all: full runs took 100 s and the next one is to take 100 s more
    assert promotion(study) is None
    now[0] += 1.0
    assert promotion(study) is not None and promotion.promoted == {0, 3}


def test_unbalanced_the_leader_is_trained_at_once(tmp_path: Path) -> None:
    study, promotion, _, _ = _balanced(tmp_path, balanced=False)
    assert promotion(study) is not None and promotion.promoted == {0}


def test_balanced_the_leader_still_waiting_when_the_search_ends_is_trained_then(tmp_path: Path) -> None:
    study, promotion, now, trained = _balanced(tmp_path)
    assert promotion(study) is None
    promotion.finish(study)
    assert trained == [0] and promotion.promoted == {0}
    promotion.finish(study)  # nothing left to train
    assert trained == [0]


def _leaders_in_order(trials: list[optuna.trial.FrozenTrial]) -> list[int]:
    """Each trial that took the lead, in the order the trials ended, once three were complete."""
    leaders, complete = [], []
    for t in sorted((t for t in trials if t.datetime_complete), key=lambda t: (t.datetime_complete, t.number)):
        if t.state == TrialState.COMPLETE:
            complete.append(t)
        if len(complete) >= FIRST_AFTER:
            best = max(complete, key=lambda c: (c.value, -c.number))  # a tie: the first
            if not leaders or leaders[-1] != best.number:
                leaders.append(best.number)
    return leaders


def _utc(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)  # run records keep milliseconds


def _second(when: datetime) -> datetime:
    """A trial's time in UTC, to the millisecond as the run records keep theirs."""
    return when.astimezone(UTC).replace(microsecond=when.microsecond // 1000 * 1000)


def _search(tmp_path: Path, tiny_space: dict, workers: int, trials: int) -> tuple[optuna.Study, list[dict]]:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = tianfeng.search(write_space(tmp_path, tiny_space), storage=storage, study="lead", sampler="random",
                            pruner="none", trials=trials, workers=workers, seed=3, runs_dir=tmp_path / "runs",
                            promote="leader", progress=False)
    return study, RunStore(storage).runs("lead")


@pytest.mark.slow
def test_one_worker_promotes_every_new_leader_once_and_ends_with_the_best_trials_full_run(
        tmp_path: Path, tiny_space: dict) -> None:
    study, runs = _search(tmp_path, tiny_space, workers=1, trials=7)
    trials = study.get_trials()
    assert [r["trial_number"] for r in runs] == _leaders_in_order(trials)
    assert runs[-1]["trial_number"] == study.best_trial.number
    assert all(r["kind"] == "promote" and r["status"] == RunRecordStatus.COMPLETED and r["final_score"] is not None
               for r in runs)
    for run in runs:  # the search waits: no trial runs while a promoted run trains
        start, end = _utc(run["created"]), _utc(run["updated"])
        assert not [t.number for t in trials
                    if start < _second(t.datetime_start) < end or start < _second(t.datetime_complete) < end]


@pytest.mark.slow
def test_other_workers_start_no_trial_while_a_promoted_run_trains(tmp_path: Path, tiny_space: dict) -> None:
    tiny_space["fidelities"]["target"] = {"epochs": 8}  # a promoted run long enough to see the others wait
    study, runs = _search(tmp_path, tiny_space, workers=2, trials=8)
    trials = study.get_trials()
    assert runs and runs[-1]["trial_number"] == study.best_trial.number
    history = _leaders_in_order(trials)
    promoted = [r["trial_number"] for r in runs]
    assert all(n in history for n in promoted)  # each promoted trial led, in the order they led
    assert promoted == sorted(promoted, key=history.index)
    workers = {t.user_attrs["worker"] for t in trials}
    assert len(workers) == 2 and worker_id() in workers  # this process and one spawned worker
    for run in runs:
        start, end = _utc(run["created"]), _utc(run["updated"])
        assert not [t.number for t in trials if start < _second(t.datetime_start) < end]


@pytest.mark.slow
def test_a_balanced_search_holds_its_first_full_run_back_and_ends_with_its_leaders_full_run(
        tmp_path: Path, tiny_space: dict, caplog: pytest.LogCaptureFixture) -> None:
    # one-epoch proxies of a 12-epoch run, timed from their own runs: the first leader's full run
    # is estimated at its proxy's time, so it waits for at least one more proxy
    tiny_space["base"]["phases"][0]["epochs"] = 12
    tiny_space["fidelities"]["proxy"] = {"epochs": 1, "width_scale": 0.5}
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    with caplog.at_level("INFO", logger="tianfeng.promote"):
        study = tianfeng.search(write_space(tmp_path, tiny_space), storage=storage, study="balanced", fidelity="proxy",
                                sampler="random", pruner="none", trials=6, workers=1, seed=2,
                                runs_dir=tmp_path / "runs", promote="balanced", progress=False)
    assert "leads; its full run waits until the search has run proxies" in caplog.text
    runs = RunStore(storage).runs("balanced")
    assert runs and all(r["kind"] == "promote" and r["status"] == RunRecordStatus.COMPLETED for r in runs)
    first_run = _utc(runs[0]["created"])  # the first leader (after 3 proxies) waited for more proxies
    assert sum(_second(t.datetime_complete) <= first_run for t in study.get_trials()) > FIRST_AFTER
    # the leader still waiting when the trials ran out was trained then: nothing is left to promote
    assert LeaderPromotion(storage, "balanced", tmp_path / "runs")(study) is None


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tianfeng.cli", "search", *args]


@pytest.mark.alone
@pytest.mark.slow
def test_ctrl_c_in_a_promoted_run_then_resume_continues_it_from_its_checkpoint(tmp_path: Path,
                                                                              tiny_space: dict) -> None:
    tiny_space["fidelities"]["target"] = {"epochs": 12}
    tiny_space["base"]["checkpoint"] = {"every_steps": 2}
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    common = ["--space", str(write_space(tmp_path, tiny_space)), "--storage", storage, "--study", "cut",
              "--sampler", "random", "--pruner", "none", "--trials", "4", "--runs-dir", str(tmp_path / "runs"),
              "--workers", "1", "--promote", "leader"]
    proc = subprocess.Popen(_cli(*common), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    deadline, cut = time.time() + 240, None
    while time.time() < deadline and cut is None and proc.poll() is None:
        time.sleep(0.2)
        try:
            runs = RunStore(storage).runs("cut")
        except Exception:  # noqa: BLE001 - the database is not made yet
            continue
        # a run well before its end: one that has finished (a poll can miss a short run while
        # the database is busy) or is in its last epoch would complete before the signal lands
        early = [r for r in runs if r["status"] == RunRecordStatus.RUNNING and len(r["epochs"]) <= 6
                 and (Path(r["run_dir"]) / "checkpoints" / "last.pt").exists()]
        if early:
            proc.send_signal(signal.SIGINT)
            cut = early[0]
    assert cut is not None, proc.communicate()[1].decode()[-2000:]
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert "--promote leader --resume" in err.decode()
    assert next(r for r in RunStore(storage).runs("cut") if r["id"] == cut["id"])["status"] == RunRecordStatus.INTERRUPTED
    resumed = datetime.now(UTC).replace(microsecond=0)
    out = subprocess.run(_cli(*common, "--resume"), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    runs = RunStore(storage).runs("cut")
    again = next(r for r in runs if r["trial_number"] == cut["trial_number"])
    assert again["id"] == cut["id"] and again["status"] == RunRecordStatus.COMPLETED  # the same run, finished
    # the search was waiting for it: the resume finishes it before it starts a trial
    started = [t for t in optuna.load_study(study_name="cut", storage=storage).get_trials()
               if t.datetime_start and _second(t.datetime_start) >= resumed]
    assert all(_second(t.datetime_start) >= _utc(again["updated"]) for t in started), \
        ([t.number for t in started], again["updated"])
    assert f"resuming trial {cut['trial_number']} of cut as run {cut['id']}" in out.stderr
    assert len(again["epochs"]) == 12
    assert f"full-fidelity run of #{cut['trial_number']}: val_top1" in out.stdout


def _configs(tmp_path: Path, tiny_space: dict, values: dict) -> tuple:
    from tianfeng.hpo.space.materialize import build_config
    from tianfeng.hpo.space.read import load_space

    space = load_space(write_space(tmp_path, tiny_space))
    return space, build_config(space, values, "proxy"), build_config(space, values, "target")


VALUES = {"optimizer": "sgd", "base_lr": 0.4, "warmup_epochs": 0.5, "batch_size": 128, "momentum": 0.9}


def test_a_full_runs_time_over_its_proxys_is_the_middle_of_their_steps_and_flops_ratios(tmp_path: Path,
                                                                                      tiny_space: dict) -> None:
    import dataclasses
    import math

    from tianfeng.promotion.full_run_time import full_run_ratio

    _, proxy, full = _configs(tmp_path, tiny_space, VALUES)
    assert full_run_ratio(full, full) == pytest.approx(1.0)
    fewer = dataclasses.replace(full, phases=[dataclasses.replace(p, epochs=1) for p in full.phases])
    assert full_run_ratio(fewer, full) == pytest.approx(3.0)  # a third of the epochs: a third of both
    # half the resolution: as many steps, about a quarter of the FLOPs, so about twice the time
    smaller = dataclasses.replace(full, phases=[dataclasses.replace(p, resolution=p.resolution // 2)
                                                for p in full.phases])
    assert 1.5 < full_run_ratio(smaller, full) < math.sqrt(8)
    # the tiny space's proxy: 2 of 3 epochs at half the width, so more than 1.5 and less than the FLOPs' ratio
    assert 1.5 < full_run_ratio(proxy, full) < 6.0


def test_a_proxy_trials_full_run_is_estimated_by_its_own_time_scaled_to_the_target_rungs_config(
        tmp_path: Path, tiny_space: dict) -> None:
    from tianfeng.core.run_config import config_to_dict
    from tianfeng.promotion.full_run_time import full_run_ratio

    space, proxy, full = _configs(tmp_path, tiny_space, VALUES)
    study = optuna.create_study(direction="maximize")
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    trial = optuna.create_trial(value=50.0, params={"x": 0.5}, distributions=dist,
                                intermediate_values={1: 40.0, 2: 50.0},
                                user_attrs={"score": 50.0, "cores": 1, "fidelity": "proxy", "values": VALUES,
                                            "config": config_to_dict(proxy)})
    trial.datetime_start = trial.datetime_complete - timedelta(seconds=8.0)
    study.add_trial(trial)
    ran = study.trials[0]
    assert full_run_estimate(ran, cores=1) == pytest.approx(8.0)  # without the space: its own run
    assert full_run_estimate(ran, cores=1, space=space) == pytest.approx(8.0 * full_run_ratio(proxy, full))
    assert full_run_estimate(ran, cores=2, space=space) == pytest.approx(4.0 * full_run_ratio(proxy, full))


def test_a_trial_whose_values_the_space_no_longer_builds_is_estimated_by_its_own_run(
        tmp_path: Path, tiny_space: dict, caplog: pytest.LogCaptureFixture) -> None:
    from tianfeng.core.run_config import config_to_dict

    space, proxy, _ = _configs(tmp_path, tiny_space, VALUES)
    study = optuna.create_study(direction="maximize")
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    trial = optuna.create_trial(value=50.0, params={"x": 0.5}, distributions=dist, intermediate_values={1: 50.0},
                                user_attrs={"score": 50.0, "cores": 1, "fidelity": "proxy",
                                            "values": {**VALUES, "optimizer": "adagrad"}, "config": config_to_dict(proxy)})
    trial.datetime_start = trial.datetime_complete - timedelta(seconds=4.0)
    study.add_trial(trial)
    with caplog.at_level("WARNING", logger="tianfeng.promote"):
        assert full_run_estimate(study.trials[0], cores=1, space=space) == pytest.approx(8.0)  # 4 s for 1 of its 2 epochs
    assert "its full run is not estimated from its config" in caplog.text
