"""A whole search, promotion and report driven from Python alone: no subprocess, no argparse."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import torch  # noqa: F401  before the test forbids subprocesses: importing torch runs ldconfig once

import tianfeng
from tests.search.conftest import write_space


def test_search_promote_report_from_python(tmp_path: Path, tiny_space: dict, monkeypatch) -> None:
    import subprocess

    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"a subprocess was started: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    monkeypatch.chdir(tmp_path)
    storage = f"sqlite:///{tmp_path / 'api.db'}"
    study = tianfeng.search(write_space(tmp_path, tiny_space), study="api", storage=storage, trials=3,
                            sampler="random", pruner="none", runs_dir=tmp_path / "runs")
    assert isinstance(study, optuna.Study) and len(study.get_trials()) == 3
    best = max((t for t in study.get_trials() if t.value is not None), key=lambda t: t.value)
    run = tianfeng.promote(best.number, study="api", storage=storage, runs_dir=tmp_path / "runs")
    assert run["status"] == "completed" and run["trial"] == best.number and run["full_val_top1"] is not None
    from tianfeng import api

    # what `status` and `runs` print, from Python: the same trials and the promoted run
    assert [r["study"] for r in api.studies(storage)] == ["api"]
    rows = api.trials("api", storage=storage)
    assert [r["trial"] for r in rows] == [t.number for t in study.get_trials()]
    assert [r["value"] for r in rows] == [t.value for t in study.get_trials()]
    [promoted] = api.runs("api", storage=storage)
    assert promoted["trial_number"] == best.number and promoted["status"] == "completed"
    assert api.load(storage=storage).study_name == "api"  # the only study
    # what `export` writes: a row per trial, the promoted trial's full-run score beside it
    table, text = api.export(storage=storage, output=tmp_path / "trials.json", format="json")
    assert text is None and table.attrs["study"] == "api" and list(table["number"]) == [t.number for t in study.get_trials()]
    assert json.loads((tmp_path / "trials.json").read_text())[best.number]["number"] == best.number
    assert table.set_index("number").loc[best.number, "promoted_score"] == promoted["final_score"]
    report = tianfeng.report("api", storage=storage)
    assert report.exists() and "api" in report.read_text()
    result = tianfeng.train(overrides=[f"run_dir={tmp_path / 'train'}", "phases.0.epochs=1", "precision.mode=fp32"])
    assert result.status == "completed" and len(result.epochs) == 1


def test_api_verbs_stay_functions_once_every_subpackage_is_imported() -> None:
    """Importing every subpackage leaves each API verb a function (no subpackage shares a verb's name)."""
    import tianfeng.hpo.space.read  # noqa: F401
    import tianfeng.reporting.build  # noqa: F401
    import tianfeng.scaling.study  # noqa: F401
    from tianfeng import api

    assert all(callable(getattr(tianfeng, name)) for name in ("search", "scale", "report", "promote", "train"))
    assert tianfeng.promote is api.promote and tianfeng.train is api.train


@pytest.mark.parametrize(("trial", "changes", "message"), [
    (None, {}, "trial: give a trial number or --fastest-to LEVEL (one of them)"),
    (3, {"fastest_to": 80.0}, "trial: give a trial number or --fastest-to LEVEL (one of them)"),
    (3, {"batch_size": 0}, "--batch-size: must be >= 1, got 0"),
    (3, {"nodes": 2}, "--nodes: give --nodes and --gpus-per-node together"),
    (3, {"nodes": 2, "gpus_per_node": 2, "device": "tpu"}, "--device: tpu: allowed: cuda, cpu"),
    (3, {"batchsize": 64}, "promote: batchsize: unknown option; did you mean batch_size?"),
])
def test_promote_options_are_checked_before_any_study_is_opened(tmp_path: Path, trial, changes, message) -> None:
    from tianfeng.core.errors import ConfigError

    missing = f"sqlite:///{tmp_path / 'never.db'}"
    with pytest.raises(ConfigError) as caught:
        tianfeng.promote(trial, storage=missing, **changes)
    assert str(caught.value) == message
    assert not (tmp_path / "never.db").exists()


@pytest.mark.parametrize(("changes", "message"), [
    ({"batch_sizes": [64, 128]}, "--budget-per-batch: give one budget per batch size (> 0): trials, seconds or epochs"),
    ({"batch_sizes": [128, 64], "trials_per_batch": 4}, "--batch-sizes: must be at least two increasing positive sizes; got [128, 64]"),
    ({"batch_sizes": [64, 128], "trials_per_batch": 4, "warm_start": -1}, "--warm-start: must be >= 0, got -1"),
    ({"batch_sizes": [64, 128], "trials_per_batch": 4, "tolerance": float("nan")},
     "--tolerance: must be a finite number >= 0 (points of the metric), got nan"),
    ({"batch_sizes": [64, 128], "trials_per_batch": 4, "pruner": "median!"},
     "--pruner: must be one of " + ", ".join(__import__("tianfeng.defaults").defaults.PRUNER_NAMES) + "; got 'median!'"),
])
def test_scale_options_are_checked_before_the_space_is_read(tmp_path: Path, changes, message) -> None:
    from tianfeng.core.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        tianfeng.scale(tmp_path / "no-such-space.yaml", storage=f"sqlite:///{tmp_path / 'never.db'}", **changes)
    assert str(caught.value) == message
    assert not (tmp_path / "never.db").exists()


@pytest.mark.parametrize(("changes", "message"), [
    ({"gpus": 0}, "--gpus: must be >= 1, got 0"),
    ({"gpus": 12}, "--gpus: must be a multiple of --gpus-per-node (8); got 12"),
    ({"overlap": 1.5}, "--overlap: must be between 0 and 1, got 1.5"),
    ({"gpu_images_per_s": float("inf")}, "--gpu-images-per-s: must be > 0, got inf"),
    ({"inter_latency_us": -1.0}, "--inter-latency-us: must be >= 0, got -1"),
    ({"preset": "p100"}, "--preset: must be one of v100, a100, h100; got 'p100'"),
    ({"loader": "pil"}, "--loader: must be one of dali, cache, torch; got 'pil'"),
    ({"gpu_per_node": 4}, "plan: gpu_per_node: unknown option; did you mean gpus_per_node?"),
])
def test_plan_options_are_checked_before_the_config_is_read(tmp_path: Path, changes, message) -> None:
    """tianfeng.plan holds the command's checks: a Python caller gets the same one line."""
    from tianfeng import api
    from tianfeng.core.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        api.plan(tmp_path / "no-such-config.yaml", **changes)
    assert str(caught.value) == message


def test_plan_from_python_matches_the_command(tmp_path: Path, capsys) -> None:
    import json

    from tianfeng import api
    from tianfeng.cli import main
    from tianfeng.cost.grid_options import PlanOptions

    config = tmp_path / "r50.yaml"
    config.write_text("model: {name: resnet50}\nphases: [{epochs: 2, resolution: 128, batch_size: 1024}]\n")
    grid = api.plan(config, PlanOptions(gpus=32, preset="a100"), inter_gbps=100.0)
    assert main(["plan", "--config", str(config), "--gpus", "32", "--preset", "a100", "--inter-gbps", "100",
                 "--json"]) == 0
    assert grid.rows == json.loads(capsys.readouterr().out)
    assert grid.cluster.gpus == 32 and grid.cluster.links().inter.gbit_s == 100.0
