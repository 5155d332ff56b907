"""The Population Based Training method of benchmarks/search/time_to_target.py: its explore step, a
take-over that the engine resumes with the new settings, and a real population on digits."""

from __future__ import annotations

import random
from pathlib import Path

import optuna
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]

from pbt import FACTORS, explore, run_pbt, take_over  # noqa: E402

from tianfeng.core.errors import ConfigError  # noqa: E402
from tianfeng.core.run_config import stopping_after  # noqa: E402
from tianfeng.core.states import RunStatus  # noqa: E402
from tianfeng.hpo.running.study import open_study  # noqa: E402
from tianfeng.hpo.space.materialize import build_config  # noqa: E402
from tianfeng.hpo.spec import SearchSpec, space_of  # noqa: E402
from tianfeng.trainers import checkpoint  # noqa: E402
from tianfeng.trainers.engine import train  # noqa: E402

SPACE = REPO / "search_spaces" / "large_batch.yaml"
LARS = {"optimizer": "lars", "base_lr": 0.5, "trust_coefficient": 0.01, "weight_decay": 1e-4, "warmup_epochs": 0.5,
        "warmup_shape": "linear", "per_gpu_batch": 16, "epochs": 6, "label_smoothing": 0.0, "decay": "cosine",
        "stages": 1}


def _spec(tmp_path: Path) -> SearchSpec:
    return SearchSpec.of(objective="accuracy", space_path=str(SPACE), data=None, storage=f"sqlite:///{tmp_path}/pbt.db",
                      study="pbt", sampler="random", pruner="none", seed=0, trials=1000, timeout_s=None,
                      runs_dir=str(tmp_path / "runs"), rung="target", priors=False)


def test_explore_moves_each_continuous_setting_by_a_fifth_within_its_range_and_nothing_else() -> None:
    space = space_of(_spec(Path("unused")))
    rng = random.Random(0)
    smoothing = set()
    for _ in range(200):
        moved = explore(LARS, space, rng)
        for name in ("base_lr", "trust_coefficient", "weight_decay"):
            assert moved[name] / LARS[name] == pytest.approx(FACTORS[0]) or \
                moved[name] / LARS[name] == pytest.approx(FACTORS[1])
        assert {k: v for k, v in moved.items() if k not in ("base_lr", "trust_coefficient", "weight_decay",
                                                            "label_smoothing")} == \
            {k: v for k, v in LARS.items() if k not in ("base_lr", "trust_coefficient", "weight_decay",
                                                        "label_smoothing")}
        smoothing.add(moved["label_smoothing"])
    assert smoothing == {0.0, 0.1}  # redrawn from its choices now and then
    at_top = explore({**LARS, "base_lr": 10.0}, space, random.Random(1))
    assert at_top["base_lr"] <= 10.0  # the range's high end holds


@pytest.mark.slow
def test_a_member_that_takes_over_resumes_the_donors_run_with_its_own_settings(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    space = space_of(_spec(tmp_path))
    donor = build_config(space, LARS, "target", name="donor", run_dir=str(tmp_path / "donor"))
    assert train(stopping_after(donor, 2), lambda m: None).status == RunStatus.STOPPED
    moved = {**LARS, "base_lr": 0.4, "weight_decay": 2e-4, "trust_coefficient": 0.012}
    member = build_config(space, moved, "target", name="member", run_dir=str(tmp_path / "member"))
    (tmp_path / "member" / "checkpoints").mkdir(parents=True)
    for path in (tmp_path / "donor" / "checkpoints").iterdir():  # the copy alone: the engine refuses it
        (tmp_path / "member" / "checkpoints" / path.name).write_bytes(path.read_bytes())
    with pytest.raises(ConfigError, match="different run"):
        train(stopping_after(member, 3), lambda m: None)
    take_over(donor, member)
    result = train(stopping_after(member, 3), lambda m: None)
    donor_epochs = checkpoint.load(tmp_path / "donor" / "checkpoints")["position"]["history"]
    assert result.status == RunStatus.STOPPED and len(result.epochs) == 3  # two of the donor's, one of its own
    assert [e.val_top1 for e in result.epochs[:2]] == [e["val_top1"] for e in donor_epochs]
    groups = checkpoint.load(tmp_path / "member" / "checkpoints")["optimizer"]["param_groups"]
    decayed = [g for g in groups if g["weight_decay"] > 0]
    assert decayed and all(g["weight_decay"] == 2e-4 and g["trust_coefficient"] == 0.012 for g in decayed)
    # the member's own LR schedule: the donor's third epoch ends at 0.5 / 0.4 of the member's LR
    donor_third = train(stopping_after(donor, 3), lambda m: None).epochs[2]
    assert result.epochs[2].lr / donor_third.lr == pytest.approx(0.4 / 0.5, rel=1e-6)


@pytest.mark.slow
def test_a_population_trains_takes_over_and_reports_its_members_once_whole(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    spec = _spec(tmp_path)
    space = space_of(spec)
    study = open_study(spec, space, resume=False, heartbeat=False)
    study.sampler = optuna.samplers.RandomSampler(seed=3)
    run_pbt(study, space, tmp_path / "runs", population=2, interval=3, epochs=6, quantile=0.5, populations=1)
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 2 and all(t.params["epochs"] == 6 for t in trials)
    taken = [t for t in trials if "pbt" in t.user_attrs]
    assert len(taken) == 1  # the worse after epoch 3 took over the better
    [event] = taken[0].user_attrs["pbt"]
    other = next(t for t in trials if t is not taken[0])
    assert event["epoch"] == 3 and event["from"] == other.number
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert done and all(0.0 < t.value <= 100.0 for t in done)
