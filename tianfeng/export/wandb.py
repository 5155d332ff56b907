"""`--wandb PROJECT`: a study's trials and promoted runs as W&B runs in one project, grouped by
study (a sweep's users find them where they look), each with its parameters as config, per-epoch
metrics as history (step = epoch), final scores in the summary and its kind and state as tags.
W&B's own settings apply: `WANDB_MODE=offline` writes the runs under `./wandb` for `wandb sync`
and sends nothing; `WANDB_ENTITY`, `WANDB_DIR` as usual. What was logged to a project is noted
in the study, so a resumed study adds only what is new, online or offline."""

from __future__ import annotations

import logging

import optuna

from tianfeng.export.tracked import TrackedRun, tracked_runs
from tianfeng.hpo.optuna_private import storage_of, study_id

log = logging.getLogger("tianfeng.tracking")


def logged_attr(project: str) -> str:
    """The study's system attribute listing the runs already logged to `project` (a system
    attribute: user attributes are what `optuna studies` lists)."""
    return f"tianfeng:wandb_logged:{project}"


def _wandb():
    try:
        import wandb
    except ImportError as exc:
        raise RuntimeError(f"--wandb needs the W&B client: pip install 'tianfeng[wandb]' ({exc})") from None
    return wandb


def _log(wandb, project: str, study: str, run: TrackedRun) -> None:
    ours = {k.removeprefix("tianfeng."): v for k, v in run.tags.items()}
    started = wandb.init(project=project, group=study, job_type=run.kind, name=f"{study}/{run.name}",
                         config={**run.params, "tianfeng": ours}, tags=[run.kind, run.state],
                         settings=wandb.Settings(silent=True, console="off"), reinit="create_new")
    for epoch, values in run.epoch_metrics():
        started.log(values, step=epoch)
    started.summary.update({k: float(v) for k, v in run.final.items() if v is not None})
    started.summary["epochs"] = len(run.epochs)
    started.finish(exit_code=1 if run.state == "failed" else 0)


def export_study(project: str, study: optuna.Study, storage: str | None = None) -> int:
    """Log the study's finished trials (and, with `storage`, its promoted runs) not yet logged to
    `project`; returns how many runs were added."""
    wandb = _wandb()
    attr, storage_api, sid = logged_attr(project), storage_of(study), study_id(study)
    logged = {tuple(key) for key in storage_api.get_study_system_attrs(sid).get(attr, [])}
    added = 0
    for run in tracked_runs(study, storage):
        if run.key in logged:
            continue
        _log(wandb, project, study.study_name, run)
        logged.add(run.key)
        storage_api.set_study_system_attr(sid, attr, sorted(logged))  # after each: a crash re-logs at most one
        added += 1
    log.info("W&B project %s: %d run(s) added to group %s", project, added, study.study_name)
    return added
