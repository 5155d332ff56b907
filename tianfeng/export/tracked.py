"""What an experiment tracker is given for a study: each finished trial and each ended promoted
run as one tracked run (its parameters, per-epoch metrics, final scores and tags), read after the
trials end from the study and each run's metrics.jsonl, so every backend and worker layout is
covered. MLflow and W&B log the same runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.storage.runs import RunRecordStatus

EPOCH_METRICS = ("train_loss", "val_loss", "val_top1", "val_top5", "lr", "samples_per_s", "data_wait_fraction",
                 "noise_scale")
TRIAL_STATES = {TrialState.COMPLETE: "finished", TrialState.PRUNED: "killed", TrialState.FAIL: "failed"}
_ENDED_RUNS = (RunRecordStatus.COMPLETED, RunRecordStatus.DIVERGED, RunRecordStatus.FAILED)


@dataclass(frozen=True)
class TrackedRun:
    """One trial (`kind` "trial", `id` its number) or promoted run (`kind` "promote", `id` the
    run record's id). `state` is finished, killed (pruned) or failed."""
    kind: str
    id: str
    name: str
    tags: dict[str, str]
    params: dict
    epochs: list[dict]
    final: dict[str, float | None]
    state: str

    @property
    def key(self) -> tuple[str, str]:
        return self.kind, self.id

    def epoch_metrics(self) -> Iterator[tuple[int, dict[str, float]]]:
        """(epoch, {metric: value}) for each recorded epoch, the metrics a tracker plots."""
        for e in self.epochs:
            yield int(e["epoch"]), {k: float(e[k]) for k in EPOCH_METRICS if e.get(k) is not None}


def _epochs(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def tracked_runs(study: optuna.Study, storage: str | None = None) -> Iterator[TrackedRun]:
    """The study's finished trials and, with `storage`, its ended promoted runs."""
    from tianfeng.hpo.judge.scores import score

    name = study.study_name
    for t in study.get_trials(deepcopy=False, states=tuple(TRIAL_STATES)):
        predicted = (t.user_attrs.get(TrialKey.PREDICTED) or {}).get("seconds")
        yield TrackedRun(
            "trial", str(t.number), f"trial-{t.number}",
            {"tianfeng.kind": "trial", "tianfeng.id": str(t.number), "tianfeng.study": name,
             "tianfeng.state": t.state.name.lower(), "tianfeng.rung": str(t.user_attrs.get(TrialKey.FIDELITY, ""))},
            dict(t.params), _epochs(Path(t.user_attrs.get(TrialKey.RUN_DIR, "")) / "metrics.jsonl"),
            {"score": score(t), "predicted_full_run_s": predicted}, TRIAL_STATES[t.state])
    if storage is None:
        return
    from tianfeng.storage.runs import RunStore

    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    for r in RunStore(storage).runs(name):
        if r["status"] not in _ENDED_RUNS:
            continue
        trial = trials.get(r["trial_number"])
        yield TrackedRun(
            "promote", str(r["id"]), f"{r['kind']}-trial-{r['trial_number']}",
            {"tianfeng.kind": "promote", "tianfeng.id": str(r["id"]), "tianfeng.study": name,
             "tianfeng.trial": str(r["trial_number"]), "tianfeng.run_dir": r["run_dir"]},
            dict(trial.params) if trial else {}, r["epochs"],
            {"score": r["final_score"], "proxy_score": r["proxy_score"]},
            "finished" if r["status"] == RunRecordStatus.COMPLETED else "failed")

