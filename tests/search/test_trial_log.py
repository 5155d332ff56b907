"""Each trial's log line shows the LR the optimizer trains at, beside the searched base LR."""

from __future__ import annotations

import logging

import optuna
import pytest

from tianfeng.hpo.materialize import build_config
from tianfeng.hpo.space import load_space
from tianfeng.hpo.trial_log import TrialLogger
from tianfeng.trainers.config import config_to_dict


def test_the_trial_line_shows_lambs_effective_lr(caplog) -> None:
    space = load_space("large_batch")
    values = {"optimizer": "lamb", "base_lr": 8.627, "weight_decay": 1e-4, "warmup_epochs": 1.0,
              "warmup_shape": "linear", "per_gpu_batch": 64, "epochs": 12, "label_smoothing": 0.0,
              "decay": "cosine", "stages": 1}
    cfg = build_config(space, values, "proxy")
    study = optuna.create_study()
    trial = study.ask()
    trial.set_user_attr("config", config_to_dict(cfg))
    study.tell(trial, 90.0)
    with caplog.at_level(logging.INFO, logger="tianfeng"):
        TrialLogger("val_top1")(study, study.trials[0])
    # the space divides LAMB's base LR by 100; batch 8 x 64 = 512 doubles it (linear rule from 256)
    shown = float(caplog.text.split("peak lr ")[1].split()[0])
    assert shown == pytest.approx(8.627 / 100 * 512 / 256, rel=1e-3)
