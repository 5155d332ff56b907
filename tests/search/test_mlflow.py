"""--mlflow URI: a study's trials and promoted runs in a local MLflow store (sqlite, no server),
read back with MLflow's own client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.search.conftest import write_space
from tianfeng.cli import main


def test_search_and_promote_log_runs_with_params_and_epoch_metrics(tmp_path: Path, tiny_space: dict,
                                                                   monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    space = write_space(tmp_path, tiny_space)
    flags = ["--study", "ml", "--storage", storage, "--mlflow", uri, "--workers", "1"]
    assert main(["search", "--space", str(space), "--trials", "3", "--sampler", "random", "--pruner", "none", "--promote", "none",
                 *flags]) == 0
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("ml")
    runs = client.search_runs([experiment.experiment_id])
    trials = {r.data.tags["tianfeng.id"]: r for r in runs if r.data.tags["tianfeng.kind"] == "trial"}
    assert set(trials) == {"0", "1", "2"}
    for number, run in trials.items():
        config = json.loads(json.dumps(run.data.params))
        assert {"optimizer", "base_lr", "batch_size"} <= set(config)
        lines = [json.loads(line) for line in
                 (tmp_path / "runs" / "ml" / f"trial-{number}" / "metrics.jsonl").read_text().splitlines()]
        history = client.get_metric_history(run.info.run_id, "val_top1")
        assert [(m.step, m.value) for m in history] == [(e["epoch"], pytest.approx(e["val_top1"])) for e in lines]
        assert run.data.metrics["score"] == pytest.approx(lines[-1]["val_top1"])
        assert run.info.status == "FINISHED"
    # a promotion adds its run; trials already logged are not logged again
    assert main(["promote", "0", *flags[:4], "--mlflow", uri]) == 0
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.data.tags["tianfeng.kind"] for r in runs) == ["promote", "trial", "trial", "trial"]
    promoted = next(r for r in runs if r.data.tags["tianfeng.kind"] == "promote")
    assert promoted.data.tags["tianfeng.trial"] == "0" and len(client.get_metric_history(
        promoted.info.run_id, "val_top1")) == 3  # the tiny space's target: 3 epochs
