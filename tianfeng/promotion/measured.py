"""Where a promoted run's time went, measured from its recorded epochs, beside where the wall-time
model said it would go: the first check of a prediction on the cluster itself."""

from __future__ import annotations

from typing import Any

# the model's parts (cost.walltime.PARTS) as the engine can tell them apart
TRAINING_PARTS = ("compute", "optimizer", "noise_scale", "exchange", "sync_bn")
SHOWN = ("startup", "training", "data_wait", "evaluation")


def measured_parts(epochs: list[dict[str, Any]]) -> dict[str, float] | None:
    """Seconds of each shown part over the run's recorded epochs: every process's set-up, the
    training steps less their waits for data, the waits, the evaluations. None when an epoch was
    recorded before the engine kept these (or there is none)."""
    if not epochs or any(e.get("train_s") is None or e.get("eval_s") is None for e in epochs):
        return None
    wait = sum(e["train_s"] * e["data_wait_fraction"] for e in epochs)
    return {"startup": sum(e.get("startup_s") or 0.0 for e in epochs),
            "training": sum(e["train_s"] for e in epochs) - wait, "data_wait": wait,
            "evaluation": sum(e["eval_s"] for e in epochs)}


def predicted_parts(predicted: dict[str, Any] | None) -> dict[str, float] | None:
    """The model's parts of a full run (a trial's `predicted`), grouped as `measured_parts` groups."""
    parts = (predicted or {}).get("parts")
    if not parts:
        return None
    return {"startup": parts.get("startup", 0.0), "training": sum(parts.get(p, 0.0) for p in TRAINING_PARTS),
            "data_wait": parts.get("data_wait", 0.0), "evaluation": parts.get("evaluation", 0.0)}


def time_check(epochs: list[dict[str, Any]], predicted: dict[str, Any] | None, total_epochs: int) -> dict | None:
    """Measured beside predicted, part by part, for the epochs trained so far (the prediction
    scaled to them: a run half done is compared with half its prediction). None without both."""
    measured, model = measured_parts(epochs), predicted_parts(predicted)
    if measured is None or model is None or total_epochs < 1:
        return None
    share = len(epochs) / total_epochs
    scaled = {p: (model[p] if p == "startup" else model[p] * share) for p in SHOWN}
    return {"cluster": (predicted or {}).get("cluster", ""), "epochs": len(epochs), "of_epochs": total_epochs,
            "parts": {p: {"measured_s": measured[p], "predicted_s": scaled[p],
                          "ratio": measured[p] / scaled[p] if scaled[p] > 0 else None} for p in SHOWN}}


def with_time_checks(storage: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each run row with `time_check` (or None): its epochs against its trial's predicted full run."""
    import optuna
    import yaml

    from tianfeng.hpo.trial_attrs import TrialKey

    predicted: dict[tuple[str, int], dict | None] = {}
    for study in {r["study"] for r in rows}:
        try:
            trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
        except KeyError:  # the study is gone: its runs are still listed
            continue
        predicted.update({(study, t.number): t.user_attrs.get(TrialKey.PREDICTED) for t in trials})
    out = []
    for r in rows:
        phases = (yaml.safe_load(r.get("config_yaml") or "") or {}).get("phases", [])
        total = sum(int(p.get("epochs", 0)) for p in phases)
        out.append({**r, "time_check": time_check(r["epochs"], predicted.get((r["study"], r["trial_number"])), total)})
    return out
