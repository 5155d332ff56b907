"""A screened trial's full run picks up where its screen stopped.

A screening rung trains the full run's own config and stops after its first epochs, leaving
the checkpoint of its last one. When the full run of that trial is the same run (its config
differs from the trial's in nothing a checkpoint must match: names, folders, checkpoint and
loader settings), it continues from that checkpoint instead of training those epochs again: the
same weights, optimizer state, random streams and position an uninterrupted run would hold. A
config that differs (another batch, an override) starts from scratch, as before."""

from __future__ import annotations

import logging
from pathlib import Path

from optuna.trial import FrozenTrial

from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import RunConfig, config_from_dict, config_to_dict
from tianfeng.hpo.judge.screen_check import SCREENED_ATTR
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.trainers import checkpoint

log = logging.getLogger("tianfeng.promote")


def _screen_checkpoints(trial: FrozenTrial) -> Path | None:
    """Where the screened trial's run kept its checkpoints, if it was screened."""
    config = trial.user_attrs.get(TrialKey.CONFIG)
    if SCREENED_ATTR not in trial.user_attrs or not isinstance(config, dict):
        return None
    return config_from_dict(config).resolved_checkpoint_dir


def continue_screen(trial: FrozenTrial, full: RunConfig) -> list[dict]:
    """Seed `full`'s fresh checkpoint folder with the screened trial's last checkpoint when `full`
    is the trial's own run; the epochs it holds (their metrics, as the screen recorded them), or
    [] when the full run starts from scratch."""
    source = _screen_checkpoints(trial)
    target = full.resolved_checkpoint_dir
    if source is None or source.resolve() == target.resolve() or (target / checkpoint.LAST).exists():
        return []
    try:
        saved = checkpoint.load(source)
    except ConfigError as error:  # a damaged screen checkpoint: the full run starts afresh
        log.warning("trial %d: its screen's checkpoint is unreadable (%s); the full run starts from scratch",
                    trial.number, error)
        return []
    if saved is None or checkpoint.config_changes(saved["config"], config_to_dict(full)):
        return []
    checkpoint.copy_files(source, target)
    history = list(saved["position"]["history"])
    log.info("trial %d: its full run continues from the screen's checkpoint after epoch %d (the same run), "
             "so those epochs are not trained again", trial.number, len(history))
    return history
