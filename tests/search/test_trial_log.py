"""Each trial's log line shows the LR the optimizer trains at, beside the searched base LR."""

from __future__ import annotations

import logging

import optuna
import pytest

from tianfeng.core.run_config import config_to_dict
from tianfeng.hpo.running.trial_log import TrialLogger
from tianfeng.hpo.space.materialize import build_config
from tianfeng.hpo.space.read import load_space


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


def test_the_progress_line_names_running_trials_with_their_epoch() -> None:
    import optuna

    from tianfeng.hpo.running.progress import running_text

    study = optuna.create_study(directions=["maximize", "minimize"])
    config = {"phases": [{"epochs": 3}, {"epochs": 5}]}
    for curve in ({"1": 50.0, "2": 55.0, "3": 60.0}, {}):
        trial = study.ask()
        trial.set_user_attr("config", config)
        trial.set_user_attr("curve", curve)
    done = study.ask()
    study.tell(done, [1.0, 1.0])
    accuracy = optuna.create_study(direction="maximize")
    reporting = accuracy.ask()
    reporting.set_user_attr("config", config)
    reporting.report(0.5, 1)
    reporting.report(0.6, 2)
    assert running_text(study.get_trials()) == "running #0 ep 3/8, #1 ep 0/8"
    assert running_text(accuracy.get_trials()) == "running #0 ep 2/8"
    assert running_text([]) == "running 0"
    many = [t for t in study.get_trials() if t.state.name == "RUNNING"] * 3
    assert running_text(many, shown=3).endswith("+3")


def test_verbose_epoch_lines_name_their_trial(tmp_path, tiny_space, caplog) -> None:
    from tests.search.conftest import write_space
    from tests.search.test_study import spec_for
    from tianfeng.hpo.running.runner import run_search

    spec = spec_for(tmp_path, write_space(tmp_path, tiny_space), trials=2, verbose=True)
    with caplog.at_level("INFO", logger="tianfeng.engine"):
        run_search(spec, workers=1, resume=False)
    epochs = [r.getMessage() for r in caplog.records if r.name == "tianfeng.engine" and "epoch 1/2" in r.getMessage()]
    assert [m.split(":")[0] for m in epochs] == ["trial 0", "trial 1"]
    assert not logging_filters_left()


def logging_filters_left() -> list:
    import logging

    return logging.getLogger("tianfeng.engine").filters


def test_a_long_run_shows_its_epochs_and_last_metric() -> None:
    from tianfeng.terminal.run_progress import RunProgress

    with RunProgress("trial 3 at full scale", 5) as bar:
        bar.epoch(2, 61.234)
        task = bar._progress.tasks[0]
        assert (task.completed, task.total, task.description) == (2, 5, "val_top1 61.23")
