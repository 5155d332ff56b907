"""Trials on several DDP ranks of one node (`tianfeng search --gpus-per-trial G`): real gloo
processes under torchrun, their epochs judged as rank 0 writes them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import optuna
import pytest

from tests.conftest import make_config
from tests.search.conftest import TINY_SPACE, write_space
from tests.search.test_study import spec_for
from tianfeng.core.states import RunStatus
from tianfeng.hpo.running.budget import SearchFailed
from tianfeng.hpo.running.ranked_trial import LOG_NAME, RankedTrainer
from tianfeng.hpo.running.runner import run_search, worker_gpus
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.hpo.workers import resolve_workers
from tianfeng.trainers.engine import StopTraining, train

pytestmark = pytest.mark.slow
SUMMATION_NOISE = 2e-4  # as the DDP engine tests measured it


def _cfg(tmp_path: Path, name: str, epochs: int = 3):
    return make_config(tmp_path / name, phases=[{"epochs": epochs, "resolution": 8, "batch_size": 64}],
                       data={"augment": "none"}, noise_scale_every=0, distributed={"emulate_gpus": 4},
                       checkpoint={"every_epochs": 1})


def test_two_ranks_train_what_one_process_emulating_the_same_gpus_does(tmp_path: Path) -> None:
    """Bug caught: the ranks' epochs not read back (or one judged twice), the world not split, or
    BatchNorm over the rank's whole share instead of each emulated GPU's."""
    judged = []
    ranked = RankedTrainer(2, "cpu")(_cfg(tmp_path, "ranks"), judged.append)
    alone = train(_cfg(tmp_path, "alone"))
    assert ranked.status == RunStatus.COMPLETED and [m.epoch for m in judged] == [1, 2, 3]
    assert [m.world for m in ranked.epochs] == [2, 2, 2] and [m.world for m in alone.epochs] == [1, 1, 1]
    # 2 ranks x 2 emulated GPUs of 16 images normalise as 1 process x 4 does
    for r, a in zip(ranked.epochs, alone.epochs, strict=True):
        assert r.train_loss == pytest.approx(a.train_loss, rel=SUMMATION_NOISE)
        assert r.val_loss == pytest.approx(a.val_loss, rel=SUMMATION_NOISE)
    assert ranked.epochs[-1].train_loss < 0.95 * ranked.epochs[0].train_loss  # it trained
    assert (ranked.run_dir / LOG_NAME).exists()


def test_a_pruned_trial_stops_its_ranks_at_a_checkpoint_and_a_resume_judges_only_new_epochs(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "pruned", epochs=4)

    def prune_at_first(m) -> None:
        raise StopTraining(RunStatus.PRUNED, f"pruned at epoch {m.epoch}")

    pruned = RankedTrainer(2, "cpu")(cfg, prune_at_first)
    assert pruned.status == RunStatus.PRUNED and pruned.message == "pruned at epoch 1"
    assert 1 <= len(pruned.epochs) < 4 and (cfg.resolved_run_dir / "checkpoints" / "last.pt").exists()
    judged = []
    resumed = RankedTrainer(2, "cpu")(cfg, judged.append)  # a requeued trial continues from the checkpoint
    assert resumed.status == RunStatus.COMPLETED and [m.epoch for m in resumed.epochs] == [1, 2, 3, 4]
    assert [m.epoch for m in judged] == list(range(len(pruned.epochs) + 1, 5))


def test_ranks_that_fail_are_one_line_with_their_log(tmp_path: Path) -> None:
    cfg = make_config(tmp_path / "odd", phases=[{"epochs": 1, "resolution": 8, "batch_size": 63}])
    with pytest.raises(RuntimeError, match=r"the trial's 2 ranks failed \(exit 1\): .*batch_size") as info:
        RankedTrainer(2, "cpu")(cfg, lambda m: None)
    assert "\n" not in str(info.value)


def test_a_search_with_two_ranks_per_trial_records_each_epoch_judged(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    space = copy.deepcopy(TINY_SPACE)
    spec = spec_for(tmp_path, write_space(tmp_path, space), trials=2, study="ranks").changed(gpus_per_trial=2.0)
    study = run_search(spec, workers=1, resume=False)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert done, [t.user_attrs.get("message") for t in study.trials]
    for t in done:
        run_dir = Path(t.user_attrs["run_dir"])
        epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert {e["world"] for e in epochs} == {2} and (run_dir / LOG_NAME).exists()
        assert sorted(t.intermediate_values) == [e["epoch"] for e in epochs]  # each epoch judged once


def test_workers_and_their_gpus_count_a_trials_ranks() -> None:
    assert resolve_workers("auto", 10, gpus=8, per_trial=2)[0] == 4
    assert resolve_workers("auto", 10, gpus=0, cores=8, per_trial=4)[0] == 2
    assert worker_gpus(4, visible="0,1,2,3,4,5,6,7", per_worker=2) == ["0,1", "2,3", "4,5", "6,7"]
    assert worker_gpus(3, visible="0,1,2,3", per_worker=2) == ["0,1", "2,3", "0,1"]


def test_a_trial_whose_batch_the_ranks_cannot_split_fails_before_any_rank_starts(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = spec_for(tmp_path, write_space(tmp_path, copy.deepcopy(TINY_SPACE)), trials=1, study="odd",
                    failure_limit=1).changed(gpus_per_trial=3.0)
    with pytest.raises(SearchFailed):  # its one trial failed: the failure limit
        run_search(spec, workers=1, resume=False)
    study = optuna.load_study(study_name="odd", storage=spec.options.storage)
    (trial,) = study.trials
    assert trial.state == optuna.trial.TrialState.FAIL
    message = trial.user_attrs[TrialKey.ERROR]
    assert "on --gpus-per-trial 3: phases.0.batch_size: must be divisible by nodes x GPUs (1 x 3 = 3)" in message
    assert not list((tmp_path / "runs").rglob(LOG_NAME))  # no rank was started
