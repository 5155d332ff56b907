"""A promoted run's time, part by part, measured from its epochs beside its prediction."""

from __future__ import annotations

import pytest

from tianfeng.promotion.measured import measured_parts, time_check


def _epoch(train_s: float, wait: float, eval_s: float, startup_s: float | None = None) -> dict:
    return {"train_s": train_s, "data_wait_fraction": wait, "eval_s": eval_s, "startup_s": startup_s}


def test_the_parts_add_up_by_hand_and_a_half_done_run_meets_half_its_prediction() -> None:
    """Bug caught: the data wait counted twice (inside training too), a second process's set-up
    dropped, or a run compared with its whole prediction after half its epochs."""
    epochs = [_epoch(10.0, 0.2, 1.0, startup_s=5.0), _epoch(10.0, 0.1, 1.0), _epoch(12.0, 0.0, 2.0, startup_s=3.0)]
    assert measured_parts(epochs) == pytest.approx({"startup": 8.0, "training": 29.0, "data_wait": 3.0,
                                                    "evaluation": 4.0})
    predicted = {"cluster": "8 x V100", "parts": {"startup": 4.0, "compute": 20.0, "optimizer": 2.0,
                                                  "noise_scale": 1.0, "exchange": 6.0, "sync_bn": 1.0,
                                                  "data_wait": 0.0, "evaluation": 3.0, "checkpoints": 9.0}}
    check = time_check(epochs, predicted, total_epochs=6)
    parts = check["parts"]
    assert check["epochs"] == 3 and check["of_epochs"] == 6 and check["cluster"] == "8 x V100"
    assert parts["training"]["predicted_s"] == pytest.approx(15.0)  # 30 s over 6 epochs, 3 of them done
    assert parts["training"]["ratio"] == pytest.approx(29.0 / 15.0)
    assert parts["startup"]["predicted_s"] == 4.0  # paid once, whatever the epochs
    assert parts["data_wait"]["ratio"] is None  # nothing predicted: no ratio
    assert measured_parts([{"train_s": 1.0, "data_wait_fraction": 0.0}]) is None  # recorded before eval_s
    assert time_check(epochs, None, 6) is None
