"""`tianfeng scale` end to end on a tiny real space: the stored curve, the warm start, the naive
baseline, the report section, resuming, and bad input."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.search.conftest import write_space
from tianfeng.core.errors import ConfigError
from tianfeng.scaling.options import parse_batch_sizes
from tianfeng.scaling.results import ScaleStore
from tianfeng.scaling.study import largest_within
from tianfeng.verbs.scale import parse_budget

REPO = Path(__file__).resolve().parents[2]


def scale(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tianfeng.cli", "scale", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


def test_scale_study_end_to_end(tmp_path: Path, tiny_space: dict) -> None:
    space = write_space(tmp_path, tiny_space)
    out = scale("--space", str(space), "--batch-sizes", "64,128", "--budget-per-batch", "7epochs",
                "--warm-start", "2", "--name", "curve", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    storage = f"sqlite:///{tmp_path / 'tianfeng.db'}"

    # the curve is stored, one point per batch size, with the smallest batch as its own naive
    points, settings = ScaleStore(storage).points("curve")
    assert [p.batch_size for p in points] == [64, 128]
    assert settings["epoch_budget"] == 7 and settings["batch_sizes"] == [64, 128]
    small, large = points
    assert small.naive_status == "reference" and small.naive_value == small.searched_value
    assert large.naive_status in ("completed", "diverged") and large.naive_study == "curve-b128-naive"
    assert small.steps_per_epoch == 1438 // 64 and large.steps_per_epoch == 1438 // 128

    b64 = optuna.load_study(study_name="curve-b64", storage=storage)
    b128 = optuna.load_study(study_name="curve-b128", storage=storage)
    for study, batch in ((b64, 64), (b128, 128)):
        trials = study.get_trials(deepcopy=False)
        # the epoch budget: a trial starts only if a full one (2 epochs) still fits in 7
        assert sum(max(t.intermediate_values, default=0) for t in trials) <= 7
        assert all(t.user_attrs["config"]["phases"][-1]["batch_size"] == batch for t in trials)
        assert all("batch_size" not in t.params for t in trials)
        best = max((t for t in trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: t.value)
        point = small if batch == 64 else large
        assert point.searched_value == best.value and point.searched_trial == best.number
        assert point.searched_recipe["phases"][-1][2] == batch
    assert small.searched_recipe["peak_lr"] == pytest.approx(
        small.searched_recipe["lr"] * 64 / 256)  # the tiny space's base scales linearly from 256

    # warm start: b128 begins with b64's best trials, same parameters, batch dropped
    ranked = sorted((t for t in b64.get_trials() if t.state == optuna.trial.TrialState.COMPLETE),
                    key=lambda t: t.value, reverse=True)
    warm = [t for t in b128.get_trials() if "warm_start" in t.user_attrs]
    assert [t.number for t in warm] == list(range(len(warm))) and 1 <= len(warm) <= 2
    assert warm[0].user_attrs["warm_start"] == f"b64 trial #{ranked[0].number}"
    assert warm[0].params == ranked[0].params
    assert large.warm_started == len(warm)

    # naive: b64's winner at batch 128 with linear LR scaling and nothing else changed
    naive = optuna.load_study(study_name="curve-b128-naive", storage=storage).get_trials()[-1]
    assert naive.params == ranked[0].params
    cfg = naive.user_attrs["config"]
    assert cfg["schedule"]["scaling_rule"] == "linear" and cfg["phases"][-1]["batch_size"] == 128
    assert large.naive_recipe["peak_lr"] == pytest.approx(2 * small.searched_recipe["peak_lr"])
    assert large.naive_value == naive.value
    # the first warm start is that same config (the tiny space scales linearly): copied, not retrained
    copied = [t for t in warm if "copied_from" in t.user_attrs]
    assert [t.number for t in copied] == [0] and copied[0].value == naive.value
    assert copied[0].intermediate_values == naive.intermediate_values
    assert copied[0].user_attrs["copied_from"] == f"curve-b128-naive trial #{naive.number}"
    assert copied[0].user_attrs["run_dir"] == naive.user_attrs["run_dir"]

    # printed table, headline and report section
    assert "best val_top1 against batch size" in out.stdout
    assert "largest batch within 1 of batch 64" in out.stdout
    report = tmp_path / "reports" / "curve.html"
    assert "report: reports/curve.html" in out.stdout and report.exists()
    html = report.read_text()
    assert "Best val_top1 against batch size" in html and "naive linear scaling" in html
    assert "winning peak LR" in html and "curve-b128" in html
    from tests.reporting.test_report import chromium

    dom = chromium("--window-size=1300,8000", "--dump-dom", report.as_uri(), profile=tmp_path / "chromium")
    assert dom.returncode == 0, dom.stderr[-2000:]
    for fig_id in ("scale-fig-0", "scale-fig-1"):  # both figures drew
        start = dom.stdout.index(f'id="{fig_id}"')
        assert "<svg" in dom.stdout[start:start + 20000], f"{fig_id} drew no SVG"

    # the same command again refuses to overwrite; --resume continues (the budget is spent)
    again = scale("--space", str(space), "--batch-sizes", "64,128", "--name", "curve", cwd=tmp_path)
    assert again.returncode == 2 and "already exist" in again.stderr and "--resume" in again.stderr
    resumed = scale("--space", str(space), "--batch-sizes", "64,128", "--budget-per-batch", "7epochs",
                    "--name", "curve", "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert len(optuna.load_study(study_name="curve-b64", storage=storage).get_trials()) == len(b64.get_trials())
    as_json = scale("--space", str(space), "--batch-sizes", "64,128", "--budget-per-batch", "7epochs",
                    "--name", "curve", "--resume", "--json", cwd=tmp_path)
    curve = json.loads(as_json.stdout)
    assert [(p["batch_size"], p["searched_value"]) for p in curve["points"]] == \
        [(p.batch_size, p.searched_value) for p in points]


@pytest.mark.parametrize(("args", "expected"), [
    (["--batch-sizes", "256,64"], "--batch-sizes: must be strictly increasing; got 256,64"),
    (["--batch-sizes", "64,64"], "--batch-sizes: must be strictly increasing"),
    (["--batch-sizes", "0,64"], "--batch-sizes: must all be positive"),
    (["--batch-sizes=-64,128"], "--batch-sizes: must all be positive"),
    (["--batch-sizes", "64,big"], "--batch-sizes: must be comma-separated integers"),
    (["--batch-sizes", "64"], "--batch-sizes: a curve needs at least two batch sizes"),
    (["--batch-sizes", "64,4096"], "--batch-sizes: 4096 is larger than the training set (1438 images of digits"),
    (["--batch-sizes", "64,128", "--budget-per-batch", "0trials"], "--budget-per-batch: allows no trial"),
    (["--batch-sizes", "64,128", "--budget-per-batch", "1epochs"],
     "--budget-per-batch: 1epochs allows no trial: one trial at rung proxy trains 2 epochs"),
    (["--batch-sizes", "64,128", "--budget-per-batch", "10"], "--budget-per-batch: must be a time (600s, 10m, 1h)"),
    (["--batch-sizes", "64,128", "--fidelity", "huge"], "--fidelity: must be one of proxy, target"),
])
def test_bad_scale_input(tmp_path: Path, tiny_space: dict, args: list[str], expected: str) -> None:
    out = scale("--space", str(write_space(tmp_path, tiny_space)), *args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().count("\n") == 0 and expected in out.stderr, out.stderr
    assert not (tmp_path / "tianfeng.db").exists()  # nothing started


def test_budget_and_batch_parsing() -> None:
    assert parse_budget("10m") == {"trials": None, "epochs": None, "timeout_s": 600.0}
    assert parse_budget("12trials")["trials"] == 12 and parse_budget("72 epochs")["epochs"] == 72
    assert parse_budget("1trial")["trials"] == 1
    with pytest.raises(ConfigError, match="must be whole"):
        parse_budget("2.5trials")
    assert parse_batch_sizes("64, 256,1024") == (64, 256, 1024)


def test_budget_is_described_as_given() -> None:
    from tianfeng.hpo.running.trial_log import budget_text
    from tianfeng.hpo.spec import UNLIMITED_TRIALS, SearchSpec

    plan = SearchSpec.of("s.yaml", study="st", rung="proxy", trials=UNLIMITED_TRIALS, timeout_s=2700.0)
    assert budget_text(plan) == "45 min"
    assert budget_text(plan.changed(trials=12, timeout_s=None)) == "12 trials"
    assert budget_text(plan.changed(epoch_budget=72, timeout_s=600.0)) == "72 epochs or 10 min"


def test_largest_batch_within_tolerance() -> None:
    from tianfeng.scaling.results import ScalePoint

    def point(batch: int, searched: float, naive: float | None) -> ScalePoint:
        return ScalePoint(batch, "s", searched, 0, {}, None, naive, "completed", {}, 1, 1, 0, 0, 1.0, 1.0, 0.0, 1, 1)

    points = [point(64, 80.0, 80.0), point(256, 79.5, 78.0), point(1024, 79.1, 60.0), point(2048, 75.0, None)]
    assert largest_within(points, 1.0, naive=False) == 1024
    assert largest_within(points, 1.0, naive=True) == 64
    assert largest_within(points, 5.0, naive=False) == 2048


def test_naive_copied_only_when_the_warm_start_trains_the_same_config(tmp_path: Path, tiny_space: dict) -> None:
    from tianfeng.core.run_config import config_to_dict
    from tianfeng.hpo.space.materialize import build_config
    from tianfeng.hpo.spec import SearchSpec, space_of
    from tianfeng.scaling.study import _reuse_naive

    def spec_for(space: dict) -> SearchSpec:
        path = write_space(tmp_path, space, name=f"{space['name']}.yaml")
        return SearchSpec.of(str(path), study="s-b128", rung="proxy", storage=f"sqlite:///{tmp_path / 'x.db'}",
                             pruner="median", trials=4, runs_dir=str(tmp_path / "runs"), batch_size=128,
                          warm_start=(("b64 trial #3", {"optimizer": "sgd", "base_lr": 0.3, "warmup_epochs": 0.5}),
                                      ("b64 trial #1", {"optimizer": "sgd", "base_lr": 1.2, "warmup_epochs": 0.0})))

    def naive_trial(plan: SearchSpec, params: dict) -> optuna.trial.FrozenTrial:
        naive_plan = dataclasses.replace(plan, set_overrides={"schedule.scaling_rule": "'linear'"})
        config = config_to_dict(build_config(space_of(naive_plan), params, "proxy", name="naive"))
        dists = {"optimizer": optuna.distributions.CategoricalDistribution(["sgd", "lars"]),
                 "base_lr": optuna.distributions.FloatDistribution(0.05, 5.0, log=True),
                 "warmup_epochs": optuna.distributions.FloatDistribution(0.0, 1.0, step=0.5)}
        return optuna.trial.create_trial(value=61.5, params=params, distributions=dists,
                                         intermediate_values={1: 40.0, 2: 61.5}, user_attrs={"config": config})

    linear = spec_for(tiny_space)
    naive = naive_trial(linear, dict(linear.warm_start[1][1]))
    reused = _reuse_naive(linear, naive, "s-b128-naive trial #0")
    assert [label for label, _ in reused.warm_start] == ["b64 trial #3"]
    (copy,) = reused.copied_trials
    assert copy.value == 61.5 and copy.intermediate_values == {1: 40.0, 2: 61.5}
    assert copy.user_attrs["warm_start"] == "b64 trial #1" and copy.user_attrs["copied_from"] == "s-b128-naive trial #0"

    # under a sqrt rule the warm start's LR differs from the naive (linear) baseline's: both train
    sqrt_space = {**tiny_space, "name": "sqrt", "base": {**tiny_space["base"],
                  "schedule": {"warmup_epochs": 0.5, "scaling_rule": "sqrt"}}}
    sqrt = spec_for(sqrt_space)
    assert _reuse_naive(sqrt, naive_trial(sqrt, dict(sqrt.warm_start[1][1])), "n") == sqrt
    # a naive run that did not complete is never copied
    failed = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params=naive.params,
                                       distributions=naive.distributions, user_attrs=naive.user_attrs)
    assert _reuse_naive(linear, failed, "n") == linear


def test_a_scale_study_says_how_much_is_left_after_each_batch_size() -> None:
    from types import SimpleNamespace

    from tianfeng.scaling.study import _eta

    done = [SimpleNamespace(wall_s=100.0), SimpleNamespace(wall_s=140.0)]
    assert _eta(done, 5) == "3 batch size(s) left, about 6.0 min to go"  # 3 x the mean of 120 s
    assert _eta(done, 2) == "every batch size done"
