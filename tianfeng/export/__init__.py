"""A study taken elsewhere: a table of its trials (csv, parquet, json), MLflow runs and W&B runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import optuna


def track_study(mlflow: str | None, wandb: str | None, study: optuna.Study, storage: str) -> None:
    """`--mlflow URI` and `--wandb PROJECT`: the study's runs not logged yet."""
    if mlflow:
        from tianfeng.export import mlflow as tracker

        tracker.export_study(mlflow, study, storage)
    if wandb:
        from tianfeng.export import wandb as tracker

        tracker.export_study(wandb, study, storage)
