"""`tianfeng search --backend ray`: a real local Ray cluster runs the trials, Ray's ASHA stops
losers, and every trial lands in the same Optuna study as with the local backend."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.search.conftest import write_space

pytestmark = pytest.mark.alone  # Ray sizes its local cluster by the machine's cores


def tianfeng(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tianfeng.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


@pytest.mark.slow
def test_ray_backend_end_to_end(tmp_path: Path, tiny_space: dict) -> None:
    space = write_space(tmp_path, tiny_space)
    out = tianfeng("search", "--space", str(space), "--backend", "ray", "--trials", "5",
                   "--cpus-per-trial", "1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    # the CPUs Ray found, and one trial per CPU at --cpus-per-trial 1
    found = re.search(r"on Ray \((\d+) CPUs, 0 GPUs; up to (\d+) trials at once\)", out.stderr)
    assert found and int(found.group(1)) == int(found.group(2)) >= 1, out.stderr[-2000:]
    assert "study tiny: 5 trials (" in out.stdout

    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path / 'tianfeng.db'}")
    trials = study.get_trials()
    assert len(trials) == 5 and all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
    assert trials[0].user_attrs["prior"] == "goyal" and trials[0].params["base_lr"] == 0.4
    for t in trials:
        assert t.user_attrs["backend"] == "ray" and t.user_attrs["fidelity"] == "proxy"
        assert t.user_attrs["worker"].startswith(socket.gethostname() + ":") and t.user_attrs["cores"] == 1
        run_dir = Path(t.user_attrs["run_dir"])
        # the engine ran on a Ray worker and wrote its run where the driver said
        assert run_dir.is_absolute() and (run_dir / "metrics.jsonl").exists()
        epochs = (run_dir / "metrics.jsonl").read_text().splitlines()
        assert t.intermediate_values and max(t.intermediate_values) == len(epochs)
        if t.state == TrialState.COMPLETE:
            assert max(t.intermediate_values) == 2 and t.value == t.intermediate_values[2]
            assert t.user_attrs["status"] == "completed" and t.user_attrs["final"]["epoch"] == 2
        else:
            assert max(t.intermediate_values) < 2 and t.user_attrs["status"] == "pruned"
    assert (tmp_path / "reports" / "tiny.html").exists()

    # promote does not care which backend ran the trial
    best = study.best_trial.number
    promoted = tianfeng("promote", str(best), "--study", "tiny", "--dry-run", cwd=tmp_path)
    assert promoted.returncode == 0, promoted.stderr
    assert "batch_size" in promoted.stdout


def test_ray_backend_refuses_resources_the_cluster_lacks(tmp_path: Path, tiny_space: dict) -> None:
    out = tianfeng("search", "--space", str(write_space(tmp_path, tiny_space)), "--backend", "ray",
                   "--gpus-per-trial", "1", cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "--gpus-per-trial: a trial asks for 1 GPUs but the Ray cluster (local) has 0" in out.stderr
    assert not (tmp_path / "tianfeng.db").exists()


def test_a_trial_that_trained_all_its_epochs_is_complete_whatever_its_length(tmp_path: Path, tiny_space: dict) -> None:
    """Trials of one study train different epochs (here half of a searched 2 or 6): one that
    reached its own last epoch completes, even when another trial's proxy is longer."""
    from tianfeng.hpo.running.ray_backend import RayOptions, StudySearcher
    from tianfeng.hpo.running.study import open_study
    from tianfeng.hpo.spec import SearchSpec, space_of

    tiny_space["parameters"]["epochs"] = {"type": "categorical", "choices": [2, 6]}
    tiny_space["phases"] = {**tiny_space["phases"], "epochs": "epochs"}
    tiny_space["fidelities"] = {"proxy": {"epoch_fraction": 0.5}, "target": {}}
    tiny_space["priors"] = [{"name": "short", "params": {"optimizer": "sgd", "base_lr": 0.4, "batch_size": 64,
                                                         "warmup_epochs": 0.0, "epochs": 2}}]
    spec = SearchSpec.of(space_path=str(write_space(tmp_path, tiny_space)), data=None,
                      storage=f"sqlite:///{tmp_path / 's.db'}", study="r", sampler="random", pruner="none", seed=0,
                      trials=2, timeout_s=None, runs_dir=str(tmp_path / "runs"), rung="proxy")
    space = space_of(spec)
    study = open_study(spec, space, resume=False)
    searcher = StudySearcher(study, space, spec, RayOptions())
    config = searcher.suggest("ray-0")
    assert config["run_config"]["phases"][0]["epochs"] == 1  # the prior: half of 2 epochs
    searcher.on_trial_result("ray-0", {"status": "running", "epoch": 1, "val_top1": 55.0})
    searcher.on_trial_complete("ray-0", {"status": "completed", "epoch": 1, "val_top1": 55.0})
    trial = study.get_trials()[0]
    assert trial.state == TrialState.COMPLETE and trial.value == 55.0


def test_ctrl_c_while_a_finished_trial_is_written_lets_the_write_end_then_stops(
        tmp_path: Path, tiny_space: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The searcher forgets a trial before it tells the study; a Ctrl-C in between left the trial
    RUNNING in the study, where neither the end of the search nor a resume would find it."""
    import os
    import signal

    import tianfeng.hpo.running.ray_backend as ray_backend
    from tianfeng.hpo.running.study import open_study
    from tianfeng.hpo.spec import SearchSpec, space_of
    from tianfeng.terminal import interrupts

    spec = SearchSpec.of(space_path=str(write_space(tmp_path, tiny_space)), data=None,
                      storage=f"sqlite:///{tmp_path / 's.db'}", study="r", sampler="random", pruner="none", seed=0,
                      trials=2, timeout_s=None, runs_dir=str(tmp_path / "runs"), rung="proxy")
    space = space_of(spec)
    study = open_study(spec, space, resume=False)
    searcher = ray_backend.StudySearcher(study, space, spec, ray_backend.RayOptions())
    searcher.suggest("ray-0")
    for epoch, score in ((1, 48.0), (2, 61.0)):
        searcher.on_trial_result("ray-0", {"status": "running", "epoch": epoch, "val_top1": score})
    original = ray_backend.record_final

    def ctrl_c_midway(*args, **kwargs) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # a real signal, in the middle of the trial's writes
        original(*args, **kwargs)

    monkeypatch.setattr(ray_backend, "record_final", ctrl_c_midway)
    try:
        with pytest.raises(KeyboardInterrupt):
            searcher.on_trial_complete("ray-0", {"status": "completed", "epoch": 2, "val_top1": 61.0})
    finally:
        interrupts.clear()  # handled: the later tests of this process must not see it again
    [trial] = study.get_trials()
    assert trial.state == TrialState.COMPLETE and trial.value == 61.0
    assert searcher.close_unfinished() == []
