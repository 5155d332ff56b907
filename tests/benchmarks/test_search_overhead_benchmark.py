"""benchmarks/platform/search_overhead.py runs at its smallest size: its null trainer ends a pruned trial
as the engine does (a status), not with StopTraining escaping the objective as a failed trial."""

from __future__ import annotations

from pathlib import Path

import optuna
import search_overhead  # noqa: E402
from optuna.trial import TrialState


def test_the_overhead_benchmark_runs_its_trials_without_a_failure(tmp_path: Path) -> None:
    seconds = search_overhead.tianfeng_per_trial(tmp_path, trials=12)
    assert seconds > 0
    trials = optuna.load_study(study_name="overhead", storage=f"sqlite:///{tmp_path}/tf.db").get_trials()
    assert len(trials) == 12 and not [t.number for t in trials if t.state == TrialState.FAIL]
    assert any(t.state == TrialState.PRUNED for t in trials)  # ASHA stops some: the path that crashed
