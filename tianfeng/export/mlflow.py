"""Experiment tracking: a study's trials and promoted runs as MLflow runs, one experiment per
study, each with its parameters, per-epoch metrics (step = epoch) and final score. Written after
the trials end (from the study and each run's metrics.jsonl), so every backend and worker layout
is covered and a resumed study adds only what is new. A local `sqlite:///mlflow.db` needs no
server (MLflow's `file:` store is in maintenance mode and refuses new use)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.storage.runs import RunRecordStatus

log = logging.getLogger("tianfeng.tracking")

EPOCH_METRICS = ("train_loss", "val_loss", "val_top1", "val_top5", "lr", "samples_per_s", "data_wait_fraction",
                 "noise_scale")
_STATUS = {TrialState.COMPLETE: "FINISHED", TrialState.PRUNED: "KILLED", TrialState.FAIL: "FAILED"}


def _client(uri: str):
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as exc:
        raise RuntimeError(f"--mlflow needs the MLflow client: pip install mlflow-skinny ({exc})") from None
    return MlflowClient(tracking_uri=uri)


def _epochs(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _log(client, experiment: str, name: str, tags: dict, params: dict, epochs: list[dict], final: dict,
         status: str) -> None:
    from mlflow.entities import Metric, Param, RunTag

    run = client.create_run(experiment, run_name=name, tags=tags)
    now = int(time.time() * 1000)
    metrics = [Metric(key, float(e[key]), now, int(e["epoch"])) for e in epochs for key in EPOCH_METRICS
               if e.get(key) is not None]
    metrics += [Metric(key, float(value), now, 0) for key, value in final.items() if value is not None]
    params_list = [Param(k, str(v)) for k, v in params.items()]
    for start in range(0, max(len(metrics), 1), 900):  # MLflow takes at most 1000 entities a batch
        client.log_batch(run.info.run_id, metrics=metrics[start:start + 900],
                         params=params_list if start == 0 else [], tags=[RunTag("tianfeng.epochs", str(len(epochs)))])
    client.set_terminated(run.info.run_id, status)


def export_study(uri: str, study: optuna.Study, storage: str | None = None) -> int:
    """Log the study's finished trials (and, with `storage`, its promoted runs) not logged yet;
    returns how many runs were added."""
    from tianfeng.hpo.judge.scores import score

    client = _client(uri)
    found = client.get_experiment_by_name(study.study_name)
    experiment = found.experiment_id if found else client.create_experiment(
        study.study_name, tags={"tianfeng.storage": storage or ""})
    logged = {(r.data.tags.get("tianfeng.kind"), r.data.tags.get("tianfeng.id"))
              for r in client.search_runs([experiment], max_results=50_000)}
    added = 0
    for t in study.get_trials(deepcopy=False, states=tuple(_STATUS)):
        if ("trial", str(t.number)) in logged:
            continue
        predicted = (t.user_attrs.get(TrialKey.PREDICTED) or {}).get("seconds")
        _log(client, experiment, f"trial-{t.number}",
             {"tianfeng.kind": "trial", "tianfeng.id": str(t.number), "tianfeng.study": study.study_name,
              "tianfeng.state": t.state.name.lower(), "tianfeng.rung": str(t.user_attrs.get(TrialKey.FIDELITY, ""))},
             t.params, _epochs(Path(t.user_attrs.get(TrialKey.RUN_DIR, "")) / "metrics.jsonl"),
             {"score": score(t), "predicted_full_run_s": predicted}, _STATUS[t.state])
        added += 1
    if storage is not None:
        from tianfeng.storage.runs import RunStore

        trials = {t.number: t for t in study.get_trials(deepcopy=False)}
        for r in RunStore(storage).runs(study.study_name):
            if r["status"] not in (RunRecordStatus.COMPLETED, RunRecordStatus.DIVERGED, RunRecordStatus.FAILED) or ("promote", str(r["id"])) in logged:
                continue
            trial = trials.get(r["trial_number"])
            _log(client, experiment, f"{r['kind']}-trial-{r['trial_number']}",
                 {"tianfeng.kind": "promote", "tianfeng.id": str(r["id"]), "tianfeng.study": study.study_name,
                  "tianfeng.trial": str(r["trial_number"]), "tianfeng.run_dir": r["run_dir"]},
                 trial.params if trial else {}, r["epochs"],
                 {"score": r["final_score"], "proxy_score": r["proxy_score"]},
                 "FINISHED" if r["status"] == RunRecordStatus.COMPLETED else "FAILED")
            added += 1
    log.info("MLflow %s: %d run(s) added to experiment %s", uri, added, study.study_name)
    return added
