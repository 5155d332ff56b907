"""Real studies on the tiny space: every sampler and pruner, priors, NaN trials, workers, retries."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.search.conftest import write_space
from tianfeng.core.cores import usable_cores
from tianfeng.hpo.running.runner import run_search
from tianfeng.hpo.sampling.registry import PRUNERS, SAMPLERS
from tianfeng.hpo.spec import SearchSpec


def spec_for(tmp_path: Path, space_file: Path, **changes) -> SearchSpec:
    values = dict(space_path=str(space_file), data=None, storage=f"sqlite:///{tmp_path / 'study.db'}",
                  study="s", sampler="random", pruner="none", seed=0, trials=3, timeout_s=None,
                  runs_dir=str(tmp_path / "runs"), rung="proxy")
    values.update(changes)
    return SearchSpec.of(**values)


def trials_of(spec: SearchSpec) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=spec.study, storage=spec.options.storage).get_trials()


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_each_sampler_runs_a_study(tmp_path: Path, tiny_space_file: Path, sampler: str) -> None:
    spec = spec_for(tmp_path, tiny_space_file, sampler=sampler, trials=3)
    run_search(spec, workers=1, resume=False)
    trials = trials_of(spec)
    assert len(trials) == 3 and all(t.state == TrialState.COMPLETE for t in trials)
    if sampler != "grid":  # the grid sampler covers the space itself; priors are not enqueued
        assert trials[0].user_attrs["prior"] == "goyal" and trials[0].params["base_lr"] == 0.4
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 3  # three different points
    assert all(t.intermediate_values.keys() == {1, 2} for t in trials)


@pytest.mark.parametrize("pruner", sorted(PRUNERS))
def test_each_pruner_stops_recipes_that_cannot_win(tmp_path: Path, tiny_space: dict, pruner: str) -> None:
    """Four good recipes first, then four that barely learn (LARS at a tiny LR and trust ratio,
    ~10% where the good ones reach ~90%): every pruner but none must stop at least one of the
    bad ones before its last epoch (a pruner that never prunes fails here), and none stops all
    the good ones."""
    tiny_space["fidelities"]["proxy"]["epochs"] = 6
    good = [{"optimizer": "sgd", "base_lr": lr, "batch_size": 64, "warmup_epochs": 0.5} for lr in (0.4, 0.6, 0.8, 1.0)]
    bad = [{"optimizer": "lars", "base_lr": 0.05, "trust_coefficient": tc, "batch_size": 128, "warmup_epochs": 1.0}
           for tc in (0.001, 0.0012, 0.0014, 0.0016)]
    tiny_space["priors"] = [{"name": f"good-{i}", "params": p} for i, p in enumerate(good)] + [
        {"name": f"bad-{i}", "params": p} for i, p in enumerate(bad)]
    spec = spec_for(tmp_path, write_space(tmp_path, tiny_space), pruner=pruner, trials=8)
    run_search(spec, workers=1, resume=False)
    trials = trials_of(spec)
    assert len(trials) == 8 and not any(t.state == TrialState.FAIL for t in trials)
    stopped = {t.user_attrs["prior"] for t in trials
               if t.state == TrialState.PRUNED and t.user_attrs.get("status") == "pruned"}
    for t in trials:
        if t.state == TrialState.PRUNED:  # a pruned trial stopped before its last epoch
            assert max(t.intermediate_values) < 6
    if pruner == "none":
        assert not stopped
    else:
        assert stopped & {f"bad-{i}" for i in range(4)}, stopped
        assert not {f"good-{i}" for i in range(4)} <= stopped


def test_nan_trial_is_pruned_and_the_study_goes_on(tmp_path: Path, tiny_space: dict) -> None:
    tiny_space["parameters"]["base_lr"]["high"] = 1e9
    tiny_space["priors"] = [{"name": "explode", "params": {"optimizer": "sgd", "base_lr": 1e9, "batch_size": 64},
                            "partial": True}]
    space_file = write_space(tmp_path, tiny_space)
    spec = spec_for(tmp_path, space_file, trials=3)
    run_search(spec, workers=1, resume=False)
    trials = trials_of(spec)
    assert trials[0].state == TrialState.PRUNED and trials[0].user_attrs["status"] == "diverged"
    assert len(trials) == 3 and sum(t.state == TrialState.COMPLETE for t in trials) >= 1


def test_existing_study_needs_resume_and_resume_extends_budget(tmp_path: Path, tiny_space_file: Path) -> None:
    from tianfeng.core.errors import ConfigError

    spec = spec_for(tmp_path, tiny_space_file, trials=2)
    run_search(spec, workers=1, resume=False)
    with pytest.raises(ConfigError, match="already exists"):
        run_search(spec, workers=1, resume=False)
    run_search(spec_for(tmp_path, tiny_space_file, trials=4), workers=1, resume=True)
    assert len(trials_of(spec)) == 4


@pytest.mark.alone
@pytest.mark.slow
def test_four_workers_share_a_sqlite_study(tmp_path: Path, tiny_space_file: Path) -> None:
    spec = spec_for(tmp_path, tiny_space_file, trials=8)
    run_search(spec, workers=4, resume=False)
    trials = trials_of(spec)
    states = [t.state for t in trials]
    assert states.count(TrialState.COMPLETE) >= 8 and TrialState.FAIL not in states, states
    assert len({t.number for t in trials}) == len(trials)
    # each worker process records itself (the report's timeline has a row per worker) and its cores
    assert len({t.user_attrs["worker"] for t in trials}) >= 2
    # the cores this process may use split over 4 workers, at least one each
    assert all(t.user_attrs["cores"] == max(1, usable_cores() // 4) for t in trials)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tianfeng.cli", "search", *args]


@pytest.mark.alone
@pytest.mark.slow
def test_killed_worker_loses_no_trial_and_the_stale_trial_is_retried(tmp_path: Path, tiny_space: dict) -> None:
    tiny_space["fidelities"]["proxy"] = {"epochs": 6}  # long enough to be killed mid-trial
    tiny_space["base"]["checkpoint"] = {"every_steps": 2}
    space_file = write_space(tmp_path, tiny_space)
    db = f"sqlite:///{tmp_path / 'study.db'}"
    common = ["--space", str(space_file), "--storage", db, "--study", "k", "--sampler", "random",
              "--pruner", "none", "--trials", "4", "--runs-dir", str(tmp_path / "runs"),
              "--heartbeat-s", "1", "--grace-s", "3", "--workers", "1"]  # the search process is the worker
    proc = subprocess.Popen(_cli(*common), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy(),
                            cwd=tmp_path)
    deadline = time.time() + 180
    victim = None
    while time.time() < deadline and victim is None:
        time.sleep(0.2)
        try:
            trials = optuna.load_study(study_name="k", storage=db).get_trials()
        except (KeyError, ValueError, optuna.exceptions.StorageInternalError):
            continue
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        running = [t for t in trials if t.state == TrialState.RUNNING]
        if done and running and (Path(running[0].user_attrs.get("run_dir", "/nonexistent")) / "checkpoints" / "last.pt").exists():
            victim = running[0]
            proc.send_signal(signal.SIGKILL)
    assert victim is not None, "no trial was seen running with a checkpoint"
    proc.wait(timeout=30)
    completed_before = {t.number: t.value for t in optuna.load_study(study_name="k", storage=db).get_trials()
                        if t.state == TrialState.COMPLETE}
    time.sleep(4)  # past the grace period: the victim's heartbeat is stale
    out = subprocess.run(_cli(*common, "--resume"), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    trials = optuna.load_study(study_name="k", storage=db).get_trials()
    by_number = {t.number: t for t in trials}
    for number, value in completed_before.items():  # nothing completed was lost or changed
        assert by_number[number].state == TrialState.COMPLETE and by_number[number].value == value
    assert by_number[victim.number].state == TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == victim.number]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert retries[0].params == victim.params
    assert retries[0].user_attrs["run_dir"] == victim.user_attrs["run_dir"]  # resumed its checkpoint


@pytest.mark.alone
@pytest.mark.slow
def test_four_workers_share_a_postgresql_study(tiny_space_file: Path, tmp_path: Path) -> None:
    from tests.postgres import postgres_server

    with postgres_server() as url:
        spec = spec_for(tmp_path, tiny_space_file, trials=8, storage=url, study="pg")
        run_search(spec, workers=4, resume=False)
        trials = trials_of(spec)
        states = [t.state for t in trials]
        assert states.count(TrialState.COMPLETE) >= 8 and TrialState.FAIL not in states, states
        assert len({t.number for t in trials}) == len(trials)
        assert all(t.user_attrs.get("run_dir") for t in trials)


@pytest.mark.alone
@pytest.mark.slow
def test_ctrl_c_saves_everything_and_resume_continues_the_cut_trial(tmp_path: Path, tiny_space: dict) -> None:
    tiny_space["fidelities"]["proxy"] = {"epochs": 6}
    tiny_space["base"]["checkpoint"] = {"every_steps": 2}
    space_file = write_space(tmp_path, tiny_space)
    db = f"sqlite:///{tmp_path / 'study.db'}"
    common = ["--space", str(space_file), "--storage", db, "--study", "c", "--sampler", "random",
              "--pruner", "none", "--trials", "3", "--runs-dir", str(tmp_path / "runs"), "--workers", "1"]
    proc = subprocess.Popen(_cli(*common), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy(),
                            cwd=tmp_path)
    deadline, sent = time.time() + 180, False
    while time.time() < deadline and not sent:
        time.sleep(0.2)
        try:
            trials = optuna.load_study(study_name="c", storage=db).get_trials()
        except (KeyError, ValueError):
            continue
        running = [t for t in trials if t.state == TrialState.RUNNING]
        if running and (Path(running[0].user_attrs.get("run_dir", "/nonexistent")) / "checkpoints" / "last.pt").exists():
            proc.send_signal(signal.SIGINT)
            sent = True
    assert sent
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert "will continue from their checkpoints" in err.decode() and "--resume" in err.decode()
    waiting = [t for t in optuna.load_study(study_name="c", storage=db).get_trials() if t.state == TrialState.WAITING]
    assert len(waiting) == 1
    out = subprocess.run(_cli(*common, "--resume"), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    trials = optuna.load_study(study_name="c", storage=db).get_trials()
    resumed = next(t for t in trials if t.system_attrs.get("failed_trial") is not None)
    assert resumed.state == TrialState.COMPLETE
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 3


def test_priors_beyond_the_budget_wait_for_a_larger_one_instead_of_the_queue(
        tmp_path: Path, tiny_space: dict, caplog: pytest.LogCaptureFixture) -> None:
    tiny_space["priors"] = [{"name": f"p{i}", "params": {"optimizer": "sgd", "base_lr": lr, "batch_size": 64,
                                                                "warmup_epochs": 0.5}}
                            for i, lr in enumerate((0.3, 0.4, 0.5))]
    spec = spec_for(tmp_path, write_space(tmp_path, tiny_space), trials=1)
    with caplog.at_level("INFO", logger="tianfeng"):
        run_search(spec, workers=1, resume=False)
    trials = trials_of(spec)
    assert [t.state for t in trials] == [TrialState.COMPLETE]  # nothing left waiting for good
    assert trials[0].user_attrs["prior"] == "p0"
    assert "no room for the published recipe(s) p1, p2" in caplog.text
    spec = spec_for(tmp_path, write_space(tmp_path, tiny_space), trials=3)
    run_search(spec, workers=1, resume=True)
    trials = trials_of(spec)
    assert [t.user_attrs.get("prior") for t in trials] == ["p0", "p1", "p2"]
    assert all(t.state == TrialState.COMPLETE for t in trials)


def test_a_trial_cut_while_it_is_being_prepared_is_queued_again_with_its_parameters(
        tmp_path: Path, tiny_space_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tianfeng.hpo.running.objective as objective_module
    from tianfeng.hpo.running.objective import ProxyObjective
    from tianfeng.hpo.running.runner import requeue_interrupted
    from tianfeng.hpo.spec import space_of

    spec = spec_for(tmp_path, tiny_space_file)
    space = space_of(spec)

    def cut(*args, **kwargs):  # Ctrl-C landing after sampling, before the run starts
        raise KeyboardInterrupt

    monkeypatch.setattr(objective_module, "build_config", cut)
    study = optuna.create_study(study_name=spec.study, storage=spec.options.storage)
    with pytest.raises(KeyboardInterrupt):
        study.optimize(ProxyObjective(space, spec.study, Path(spec.runs_root), spec.rung), n_trials=1)
    [failed] = study.get_trials()
    assert failed.state == TrialState.FAIL and failed.user_attrs["status"] == "interrupted"
    assert requeue_interrupted(spec.options.storage, spec.study) == [failed.number]
    queued = [t for t in study.get_trials() if t.state == TrialState.WAITING]
    assert len(queued) == 1 and queued[0].params == failed.params


def test_a_trial_cut_after_training_while_its_results_are_written_is_queued_again_and_not_retrained(
        tmp_path: Path, tiny_space_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C after the engine returned but before the objective did: the trial used to fail with
    the engine's status ("complete"), so it was neither requeued nor scored, and its run was lost."""
    import tianfeng.hpo.running.objective as objective_module
    from tianfeng.trainers.checkpoint import load as load_checkpoint

    spec = spec_for(tmp_path, tiny_space_file, trials=1)

    def cut(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(objective_module, "record_final", cut)
    with pytest.raises(KeyboardInterrupt):
        run_search(spec, workers=1, resume=False)
    [cut_trial, queued] = trials_of(spec)
    assert cut_trial.state == TrialState.FAIL and cut_trial.user_attrs["status"] == "interrupted"
    assert queued.state == TrialState.WAITING and queued.system_attrs["failed_trial"] == cut_trial.number
    checkpoints = Path(cut_trial.user_attrs["run_dir"]) / "checkpoints"
    trained = load_checkpoint(checkpoints)["position"]

    monkeypatch.undo()
    run_search(spec, workers=1, resume=True)
    retry = trials_of(spec)[1]
    assert retry.state == TrialState.COMPLETE and retry.params == cut_trial.params
    assert retry.user_attrs["run_dir"] == cut_trial.user_attrs["run_dir"]
    assert load_checkpoint(checkpoints)["position"] == trained  # it went on from the end: nothing retrained
    assert retry.value == retry.user_attrs["score"]


def test_a_trial_cut_while_optuna_asks_for_it_is_queued_again_and_the_resume_spends_the_whole_budget(
        tmp_path: Path, tiny_space_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C after Optuna has started the trial in the database but before the objective (and the
    trial's heartbeat) runs: without the worker's mark the trial stayed RUNNING for ever, and
    every resume counted it against the budget. Here the cut trial is the first prior, popped from
    the queue: its continuation must keep the prior's values."""
    from optuna.samplers import RandomSampler

    spec = spec_for(tmp_path, tiny_space_file, trials=2)
    original = RandomSampler.before_trial

    def cut(self, study, trial) -> None:  # Trial.__init__ calls this right after the trial starts
        raise KeyboardInterrupt

    monkeypatch.setattr(RandomSampler, "before_trial", cut)
    with pytest.raises(KeyboardInterrupt):
        run_search(spec, workers=1, resume=False)
    [cut_trial, *queued] = trials_of(spec)
    assert cut_trial.state == TrialState.FAIL and cut_trial.user_attrs["status"] == "interrupted"
    assert cut_trial.params == {}  # it was cut before it sampled anything
    assert [t.state for t in queued] == [TrialState.WAITING]
    assert queued[0].system_attrs["failed_trial"] == cut_trial.number
    assert queued[0].system_attrs["fixed_params"]["base_lr"] == 0.4  # the goyal prior's

    monkeypatch.setattr(RandomSampler, "before_trial", original)
    run_search(spec, workers=1, resume=True)
    trials = trials_of(spec)
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 2
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert trials[1].user_attrs["prior"] == "goyal" and trials[1].params["base_lr"] == 0.4


@pytest.mark.parametrize(("mode", "pruner", "name"), [("accuracy", "asha", "asha"), ("pareto", "asha", "peers"),
                                                      ("accuracy", "none", "none")])
def test_the_study_records_the_pruner_by_the_name_its_start_line_gives(tmp_path: Path, tiny_space: dict,
                                                                      mode: str, pruner: str, name: str) -> None:
    """A pareto study is judged by its peers whatever --pruner says: the report must not say asha."""
    from tianfeng.hpo.judge.pruning import judging
    from tianfeng.hpo.running.study import open_study
    from tianfeng.hpo.spec import space_of
    from tianfeng.storage.study_attrs import StudyKey

    tiny_space["objective"]["mode"] = mode
    spec = spec_for(tmp_path, write_space(tmp_path, tiny_space), pruner=pruner)
    space = space_of(spec)
    study = open_study(spec, space, resume=False)
    assert study.user_attrs[StudyKey.PRUNER] == name
    assert judging(space, spec.rung, pruner).label.startswith(name)
