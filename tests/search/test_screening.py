"""A screening rung (`stop_after_epochs`): each trial trains the full run's own schedule, stops
after its first epochs and is scored there, as that many epochs of the full run would score it;
with `--promote leader` each new leader is then trained whole, its full run continuing from
where its screen stopped."""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import torch
import yaml
from optuna.trial import TrialState

import tianfeng
from tests.search.conftest import write_space
from tianfeng.core.run_config import RunConfig, config_from_dict, with_changes
from tianfeng.hpo.judge.peers import PeerPruner
from tianfeng.hpo.judge.pruning import judging
from tianfeng.hpo.judge.scores import predicted_s
from tianfeng.hpo.judge.screen_check import (
    agreeing_length,
    check_screen,
    screen_length,
    screened_alike,
)
from tianfeng.hpo.results.summary import print_summary
from tianfeng.hpo.sampling.registry import make_sampler, resolve_sampler
from tianfeng.hpo.space.materialize import max_rung_epochs, sample_active
from tianfeng.hpo.space.read import load_space
from tianfeng.hpo.space.schema import corner_value
from tianfeng.hpo.spec import SearchSpec, with_objective
from tianfeng.promotion.leaders import full_run_curves, proxy_leader
from tianfeng.promotion.transfer import transfer
from tianfeng.storage.runs import RunRecordStatus, RunStore
from tianfeng.trainers.engine import train

FULL_EPOCHS = 3  # the tiny space's target run


def _screening_space(tiny_space: dict, epochs: int = 1) -> dict:
    tiny_space["fidelities"]["screen"] = {"stop_after_epochs": epochs}
    return tiny_space


def test_a_screening_rung_trains_at_most_its_epochs(tmp_path: Path, tiny_space: dict) -> None:
    space = load_space(write_space(tmp_path, _screening_space(tiny_space, 2)))
    assert space.fidelities["screen"].stop_after_epochs == 2
    assert max_rung_epochs(space, "screen") == 2 and max_rung_epochs(space, "target") == FULL_EPOCHS
    tiny_space["fidelities"]["screen"] = {"stop_after_epochs": 10}  # longer than the run: the whole run
    assert max_rung_epochs(load_space(write_space(tmp_path, tiny_space)), "screen") == FULL_EPOCHS


def test_the_auto_sampler_screens_at_random_and_searches_other_rungs_with_tpe(tmp_path: Path,
                                                                              tiny_space: dict) -> None:
    space = load_space(write_space(tmp_path, _screening_space(tiny_space)))
    assert resolve_sampler("auto", space, "screen") == "random"
    assert resolve_sampler("auto", space, "target") == "tpe"
    assert resolve_sampler("tpe", space, "screen") == "tpe" and resolve_sampler("qmc", space, "target") == "qmc"
    pareto = with_objective(space, "pareto", None, 50.0)  # pareto's sampler gives the metric its share of trials
    assert resolve_sampler("auto", pareto, "screen") == "tpe"
    # told a target, random too: on cifar5-dev TPE reached it about as soon
    to_target = with_objective(space, "time-to-target", 40.0, None)
    assert resolve_sampler("auto", to_target, "screen") == "random"
    assert resolve_sampler("auto", to_target, "target") == "tpe"
    # and judged at the screen's end, as for accuracy: no peer cuts a (lengthened) screen short
    screen_plan = SearchSpec.of(space_path=str(space.path), data=None, storage="sqlite://", study="s", sampler="auto",
                             pruner="asha", seed=0, trials=1, timeout_s=None, runs_dir=str(tmp_path), rung="screen")
    screened = judging(to_target, screen_plan.rung, screen_plan.options.pruner)
    assert isinstance(screened.pruner, optuna.pruners.NopPruner)
    assert screened.label == "none (screened trials are judged at the screen's end)"
    assert isinstance(judging(to_target, "proxy", screen_plan.options.pruner).pruner, PeerPruner)


def test_tpe_screening_for_a_target_every_screen_misses_follows_the_screens_not_the_predicted_time(
        tmp_path: Path, tiny_space: dict) -> None:
    """A time-to-target trial's value is its predicted time, its metric a constraint. Screens all
    fall short of a full run's target; TPE must then rank them by their shortfall (the screen's
    score), not by their predicted time, which here is least for the worst screens."""
    space = with_objective(load_space(write_space(tmp_path, _screening_space(tiny_space))), "time-to-target",
                           75.0, None)
    sampler = make_sampler("tpe", space, seed=3)  # --sampler tpe
    study = optuna.create_study(direction="minimize", sampler=sampler)

    def screened(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        trial.set_constraint("target", 75.0 - (40.0 + 20.0 * x))  # every screen misses 75
        return 50.0 + 50.0 * x  # the best screens are the slowest recipes

    study.optimize(screened, n_trials=40)
    learned = [t.params["x"] for t in study.trials[-20:]]
    assert sum(learned) / len(learned) > 0.65, learned  # random's mean is 0.5; following the time, below


def test_promotion_shows_the_epochs_a_screened_trial_did_not_train(tmp_path: Path, tiny_space: dict) -> None:
    space = load_space(write_space(tmp_path, _screening_space(tiny_space)))
    values = sample_active(space, functools.partial(corner_value, low=True))
    full, changes = transfer(space, values, "screen")
    assert full.total_epochs == FULL_EPOCHS
    assert [(c.proxy, c.full) for c in changes if c.key == "epochs trained"] == [(1, FULL_EPOCHS)]
    assert not [c for c in transfer(space, values, "proxy")[1] if c.key == "epochs trained"]
    # a trial screened after the study's screen lengthened shows the epochs it trained
    lengthened = transfer(space, values, "screen", screened=2)[1]
    assert [(c.proxy, c.full) for c in lengthened if c.key == "epochs trained"] == [(2, FULL_EPOCHS)]
    assert "after epoch 2" in next(c.rule for c in lengthened if c.key == "epochs trained")


@pytest.mark.parametrize("bad", [0, 1.5, "one"])
def test_a_bad_stop_after_epochs_is_one_line_naming_the_key(tmp_path: Path, tiny_space: dict, bad) -> None:
    tiny_space["fidelities"]["screen"] = {"stop_after_epochs": bad}
    path = write_space(tmp_path, tiny_space)
    out = subprocess.run([sys.executable, "-m", "tianfeng.cli", "search", "--space", str(path), "--fidelity", "screen"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert str(path) in out.stderr and "fidelities.screen.stop_after_epochs" in out.stderr
    assert out.stderr.strip().count("\n") == 0
    assert not (tmp_path / "tianfeng.db").exists()


def whole_run(run_dir: Path) -> RunConfig:
    """A screened trial's run config without its stop: the full run it screened."""
    cfg = config_from_dict(yaml.safe_load((run_dir / "config.yaml").read_text()))
    return with_changes(cfg, engine=dataclasses.replace(cfg.engine, stop_after_epochs=0))


@pytest.mark.slow
def test_screened_trials_score_the_full_runs_first_epoch_and_leaders_train_whole(
        tmp_path: Path, tiny_space: dict, caplog: pytest.LogCaptureFixture) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    with caplog.at_level("INFO", logger="tianfeng"):
        study = tianfeng.search(write_space(tmp_path, _screening_space(tiny_space)), storage=storage,
                                study="screen", fidelity="screen", trials=5, workers=1, seed=1,
                                runs_dir=tmp_path / "runs", promote="leader", progress=False)
    assert study.user_attrs["sampler"] == "random"  # the default sampler, auto, on a screening rung
    # the start line names what judges the trials: no pruner cuts a screen short
    assert "sampler random, pruner none (screened trials are judged at the screen's end)" in caplog.text
    trials = study.get_trials()
    assert len(trials) == 5 and all(t.state == TrialState.COMPLETE for t in trials)
    for t in trials:
        run_dir = Path(t.user_attrs["run_dir"])
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        result = json.loads((run_dir / "result.json").read_text())
        # the full run's schedule (not compressed into one epoch), stopped after its first epoch,
        # which the engine is told, so that its choices (compile auto) count that epoch only
        assert sum(p["epochs"] for p in config["phases"]) == FULL_EPOCHS
        assert config["engine"]["stop_after_epochs"] == 1
        assert result["status"] == "stopped" and result["epochs_completed"] == 1
        assert list(t.intermediate_values) == [1] and t.value == t.intermediate_values[1]
        assert t.user_attrs["status"] == "stopped" and t.user_attrs["fidelity"] == "screen"

    # an independent oracle: the same run trained whole, read at its first epoch
    first = trials[0]
    cfg = whole_run(Path(first.user_attrs["run_dir"]))
    assert not cfg.checkpoint.dir  # so the oracle cannot resume the trial's checkpoint
    threads = torch.get_num_threads()
    torch.set_num_threads(int(first.user_attrs["cores"]))  # the trial's threads: the same float sums on any CPU
    try:
        whole = train(with_changes(cfg, run_dir=str(tmp_path / "oracle")))
    finally:
        torch.set_num_threads(threads)
    assert len(whole.epochs) == FULL_EPOCHS
    assert whole.epochs[0].val_top1 == pytest.approx(first.value, abs=1e-9)

    runs = RunStore(storage).runs("screen")
    assert runs and all(r["kind"] == "promote" and r["status"] == RunRecordStatus.COMPLETED for r in runs)
    assert runs[-1]["trial_number"] == study.best_trial.number  # the search ends with its leader's full run
    by_number = {t.number: t for t in trials}
    for r in runs:
        assert json.loads((Path(r["run_dir"]) / "result.json").read_text())["epochs_completed"] == FULL_EPOCHS
        # each leader's full run continued its screen: epoch 1 is the screen's own record (its
        # clock included), not a second training of it
        screened = json.loads((Path(by_number[r["trial_number"]].user_attrs["run_dir"]) / "metrics.jsonl")
                              .read_text().splitlines()[0])
        assert len(r["epochs"]) == FULL_EPOCHS and r["epochs"][0] == screened

    # and continuing is the same run: the leader's config trained whole from scratch, epoch by epoch
    leader = by_number[runs[-1]["trial_number"]]
    cfg = whole_run(Path(leader.user_attrs["run_dir"]))
    torch.set_num_threads(int(leader.user_attrs["cores"]))  # the search ran both at these threads
    try:
        from_scratch = train(with_changes(cfg, run_dir=str(tmp_path / "scratch")))
    finally:
        torch.set_num_threads(threads)
    for ours, oracle in zip(runs[-1]["epochs"], from_scratch.epochs, strict=True):
        assert ours["val_top1"] == pytest.approx(oracle.val_top1, abs=1e-9)
        assert ours["train_loss"] == pytest.approx(oracle.train_loss, rel=1e-6)


def test_the_ray_backend_completes_a_screened_trial_at_its_last_screened_epoch(
        tmp_path: Path, tiny_space: dict) -> None:
    from tianfeng.hpo.running.ray_backend import RayOptions, StudySearcher
    from tianfeng.hpo.running.study import open_study
    from tianfeng.hpo.spec import SearchSpec, space_of

    spec = SearchSpec.of(space_path=str(write_space(tmp_path, _screening_space(tiny_space))), data=None,
                      storage=f"sqlite:///{tmp_path / 's.db'}", study="r", sampler="random", pruner="asha", seed=0,
                      trials=2, timeout_s=None, runs_dir=str(tmp_path / "runs"), rung="screen")
    space = space_of(spec)
    study = open_study(spec, space, resume=False)
    searcher = StudySearcher(study, space, spec, RayOptions())
    config = searcher.suggest("ray-0")
    assert config["last_epoch"] == 1 and sum(p["epochs"] for p in config["run_config"]["phases"]) == FULL_EPOCHS
    assert config["run_config"]["engine"]["stop_after_epochs"] == 1
    searcher.on_trial_result("ray-0", {"status": "running", "epoch": 1, "val_top1": 55.0})
    searcher.on_trial_complete("ray-0", {"status": "running", "epoch": 1, "val_top1": 55.0})
    trial = study.get_trials()[0]
    assert trial.state == TrialState.COMPLETE and trial.value == 55.0
    assert optuna.load_study(study_name="r", storage=spec.options.storage).best_trial.number == trial.number


# a starts slowly and ends best; b starts fast; c is never best
A, B, C = [10, 20, 30, 40, 50, 60, 70, 80, 90, 95], [30, 40, 45, 46, 47, 48, 49, 50, 51, 52], [5] * 10


def test_the_screen_lengthens_to_the_first_length_that_ranks_the_full_runs_as_their_ends() -> None:
    assert agreeing_length([A, B, C], 1, maximize=True) == 9  # b leads after 1 and 3 epochs, a after 9
    assert agreeing_length([A, B, C], 3, maximize=True) == 9
    assert agreeing_length([A, C], 1, maximize=True) == 1  # a leads from the start: nothing to lengthen
    assert agreeing_length([[-v for v in A], [-v for v in B]], 1, maximize=False) == 9  # a loss, minimised
    late = B[:8] + [91, 52]  # b leads until epoch 9 and still ends below a: the longest length tried
    assert agreeing_length([A, late], 1, maximize=True) == 9
    short = [5, 99]  # a two-epoch full run counts with its last value after that
    assert agreeing_length([A, short], 1, maximize=True) == 3


def test_a_study_screens_longer_once_its_full_runs_disagree_and_leaders_come_from_the_longer_screen(
        tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    assert check_screen(study, [A], 1) == 1 and screen_length(study, 1) == 1  # one full run says nothing
    # b leads after 1 and 3 epochs, a after 9: one step (x3) for each full run that disagrees
    assert check_screen(study, [A, B], 1) == 3 and screen_length(study, 1) == 3
    assert check_screen(study, [A, B], 1) == 9 and screen_length(study, 1) == 9
    assert check_screen(study, [A, B], 1) == 9  # they agree at 9
    assert check_screen(study, [A, C], 1) == 9  # never shorter again
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    for value, length in ((90.0, 1), (60.0, 9), (50.0, 9), (70.0, 1), (40.0, 9)):
        study.add_trial(optuna.create_trial(value=value, params={"x": 0.5}, distributions=dist,
                                            user_attrs={"screened_epochs": length}))
    assert proxy_leader(study, screen_epochs=1).value == 60.0  # the best of the three screened for 9 epochs
    assert [t.value for t in screened_alike(study.get_trials(), 1)] == [90.0, 70.0]


def test_a_full_run_that_collapsed_says_nothing_about_the_screens_ranking(tmp_path: Path) -> None:
    """A full run the engine ended as collapsed (status diverged) led its screen and ends at
    chance: counted, it would lengthen the screen and drag the forecast's gain slope below zero."""
    storage = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    store = RunStore(storage)
    collapsed = [52.6, 57.6, 29.6, 19.1, 18.8, 17.5]
    for number, (status, curve) in enumerate([(RunRecordStatus.COMPLETED, A), (RunRecordStatus.DIVERGED, collapsed),
                                              (RunRecordStatus.COMPLETED, C)]):
        run_id, _ = store.open_run(study="s", trial_number=number, config_hash=str(number), kind="promote",
                                   run_dir=str(tmp_path / str(number)), config_yaml="", proxy_score=curve[0])
        store.update(run_id, status=status, final_score=curve[-1], epochs=[{"val_top1": v} for v in curve])
    assert [n for n, _ in full_run_curves(store, "s", "val_top1")] == [0, 2]
    curves = [c for _, c in full_run_curves(store, "s", "val_top1")]
    assert check_screen(study, curves, 1) == 1 and "screen_epochs" not in study.user_attrs
    assert check_screen(study, [A, collapsed], 1) == 3  # counted, it would have lengthened the screen


@pytest.mark.slow
def test_trials_train_as_long_as_the_studys_screen_is_now(tmp_path: Path, tiny_space: dict) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    search = functools.partial(tianfeng.search, write_space(tmp_path, _screening_space(tiny_space)), storage=storage,
                               study="longer", fidelity="screen", sampler="random", workers=1, seed=1,
                               runs_dir=tmp_path / "runs", progress=False)
    study = search(trials=2)
    study.set_user_attr("screen_epochs", 2)  # as check_screen leaves it after a disagreement
    trials = search(trials=4, resume=True).get_trials()
    assert [t.user_attrs["screened_epochs"] for t in trials] == [1, 1, 2, 2]
    assert [list(t.intermediate_values) for t in trials] == [[1], [1], [1, 2], [1, 2]]
    for t in trials[2:]:
        assert json.loads((Path(t.user_attrs["run_dir"]) / "result.json").read_text())["epochs_completed"] == 2
        assert t.value == t.intermediate_values[2] and t.user_attrs["status"] == "stopped"
        assert yaml.safe_load((Path(t.user_attrs["run_dir"]) / "config.yaml").read_text())["engine"] == {
            **yaml.safe_load((Path(trials[0].user_attrs["run_dir"]) / "config.yaml").read_text())["engine"],
            "stop_after_epochs": 2}


@pytest.mark.slow
def test_a_time_to_target_screen_trains_whole_only_recipes_faster_than_one_that_reached_the_target(
        tmp_path: Path, tiny_space: dict, capsys: pytest.CaptureFixture) -> None:
    storage, target = f"sqlite:///{tmp_path / 'study.db'}", 40.0
    space = _screening_space(tiny_space)  # recipes of 2 to 8 epochs, LRs that learn in a few
    space["parameters"] |= {"epochs": {"type": "int", "low": 2, "high": 8},
                            "base_lr": {"type": "float", "low": 0.3, "high": 3.0, "log": True}}
    space["phases"]["epochs"] = "epochs"
    study = tianfeng.search(write_space(tmp_path, space), storage=storage, study="ttt", fidelity="screen",
                            objective="time-to-target", target=target, trials=10, workers=1, seed=2,
                            runs_dir=tmp_path / "runs", promote="leader", progress=False)
    by_number = {t.number: t for t in study.trials}
    runs = RunStore(storage).runs("ttt")
    numbers = [r["trial_number"] for r in runs]
    assert len(numbers) >= 3 and len(set(numbers)) == len(numbers)
    fastest = float("inf")
    for r in runs:  # in the order they were trained
        seconds = predicted_s(by_number[r["trial_number"]])
        assert seconds < fastest  # nothing slower than a recipe that already reached the target
        if r["final_score"] >= target:
            fastest = seconds
    assert fastest < float("inf")
    # the summary answers the study's question: the fastest recipe whose full run reached the target
    answer = min((n for n, r in zip(numbers, runs, strict=True) if r["final_score"] >= target),
                 key=lambda n: predicted_s(by_number[n]))
    print_summary(study, storage)
    assert f"fastest full run reaching the target: #{answer}  full run predicted" in capsys.readouterr().out
