"""--wandb PROJECT: a study's trials and promoted runs as W&B runs, written in W&B's offline mode
(nothing sent anywhere) and read back from W&B's own transaction logs."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from tests.search.conftest import write_space
from tests.search.wandb_offline import offline_runs
from tianfeng.cli import main
from tianfeng.export.wandb import export_study, logged_attr


@pytest.fixture
def offline(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_ERROR_REPORTING": "false",
                        "WANDB_DIR": str(tmp_path), "WANDB_CACHE_DIR": str(tmp_path / "cache"),
                        "WANDB_CONFIG_DIR": str(tmp_path / "config"), "WANDB_API_KEY": ""}.items():
        monkeypatch.setenv(name, value)
    return tmp_path


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_search_and_promote_log_runs_with_config_history_and_scores(offline: Path, tiny_space: dict) -> None:
    storage = f"sqlite:///{offline / 'study.db'}"
    space = write_space(offline, tiny_space)
    flags = ["--study", "wb", "--storage", storage, "--wandb", "tf-test"]
    assert main(["search", "--space", str(space), "--trials", "3", "--sampler", "random", "--pruner", "none", "--promote", "none",
                 "--workers", "1", *flags]) == 0
    runs = offline_runs(offline)
    assert sorted(r.name for r in runs) == ["wb/trial-0", "wb/trial-1", "wb/trial-2"]
    study = optuna.load_study(study_name="wb", storage=storage)
    for run in runs:
        number = int(run.name.rsplit("-", 1)[1])
        trial = study.trials[number]
        assert run.group == "wb" and run.job_type == "trial" and "trial" in run.tags
        assert {k: run.config[k] for k in trial.params} == trial.params
        lines = _metrics(offline / "runs" / "wb" / f"trial-{number}")
        assert [(h["_step"], h["val_top1"]) for h in run.history] == \
            [(e["epoch"], pytest.approx(e["val_top1"])) for e in lines]
        assert run.summary["score"] == pytest.approx(trial.value) and run.exit_code == 0
    # a promotion adds its run; the trials already logged are not logged again
    assert main(["promote", "0", *flags]) == 0
    runs = offline_runs(offline)
    assert sorted(r.job_type for r in runs) == ["promote", "trial", "trial", "trial"]
    promoted = next(r for r in runs if r.job_type == "promote")
    assert promoted.config["tianfeng"]["trial"] == "0" and len(promoted.history) == 3  # the tiny space: 3 epochs
    recorded = optuna.storages.get_storage(storage).get_study_system_attrs(study._study_id)[logged_attr("tf-test")]
    assert len(recorded) == 4
    # logging the study again, with nothing new ended: no run is logged twice
    assert export_study("tf-test", optuna.load_study(study_name="wb", storage=storage), storage) == 0
    assert len(offline_runs(offline)) == 4
