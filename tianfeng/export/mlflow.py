"""`--mlflow URI`: a study's trials and promoted runs as MLflow runs, one experiment per study,
each with its parameters, per-epoch metrics (step = epoch) and final score. A resumed study adds
only what is new. A local `sqlite:///mlflow.db` needs no server (MLflow's `file:` store is in
maintenance mode and refuses new use)."""

from __future__ import annotations

import logging
import time

import optuna

from tianfeng.export.tracked import TrackedRun, tracked_runs

log = logging.getLogger("tianfeng.tracking")

_STATUS = {"finished": "FINISHED", "killed": "KILLED", "failed": "FAILED"}


def _client(uri: str):
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as exc:
        raise RuntimeError(f"--mlflow needs the MLflow client: pip install mlflow-skinny ({exc})") from None
    return MlflowClient(tracking_uri=uri)


def _log(client, experiment: str, run: TrackedRun) -> None:
    from mlflow.entities import Metric, Param, RunTag

    created = client.create_run(experiment, run_name=run.name, tags=run.tags)
    now = int(time.time() * 1000)
    metrics = [Metric(key, value, now, epoch) for epoch, values in run.epoch_metrics() for key, value in values.items()]
    metrics += [Metric(key, float(value), now, 0) for key, value in run.final.items() if value is not None]
    params = [Param(k, str(v)) for k, v in run.params.items()]
    for start in range(0, max(len(metrics), 1), 900):  # MLflow takes at most 1000 entities a batch
        client.log_batch(created.info.run_id, metrics=metrics[start:start + 900],
                         params=params if start == 0 else [], tags=[RunTag("tianfeng.epochs", str(len(run.epochs)))])
    client.set_terminated(created.info.run_id, _STATUS[run.state])


def export_study(uri: str, study: optuna.Study, storage: str | None = None) -> int:
    """Log the study's finished trials (and, with `storage`, its promoted runs) not logged yet;
    returns how many runs were added."""
    client = _client(uri)
    found = client.get_experiment_by_name(study.study_name)
    experiment = found.experiment_id if found else client.create_experiment(
        study.study_name, tags={"tianfeng.storage": storage or ""})
    logged = {(r.data.tags.get("tianfeng.kind"), r.data.tags.get("tianfeng.id"))
              for r in client.search_runs([experiment], max_results=50_000)}
    added = 0
    for run in tracked_runs(study, storage):
        if run.key not in logged:
            _log(client, experiment, run)
            added += 1
    log.info("MLflow %s: %d run(s) added to experiment %s", uri, added, study.study_name)
    return added
