"""A study read back: `tianfeng export` in three formats, trials_dataframe, and `status`."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import optuna
import pandas as pd

from tests.search.conftest import write_space
from tests.search.test_study import spec_for
from tianfeng.cli import main
from tianfeng.hpo.running.runner import run_search

CLI = [sys.executable, "-m", "tianfeng.cli", "export"]


def test_export_writes_every_trial_in_three_formats(tmp_path: Path, tiny_space: dict, capsys) -> None:
    tiny_space["objective"]["mode"] = "pareto"
    spec = spec_for(tmp_path, write_space(tmp_path, tiny_space), trials=3, pruner="none")
    run_search(spec, workers=1, resume=False)
    study = optuna.load_study(study_name="s", storage=spec.options.storage)

    csv = subprocess.run([*CLI, "s", "--storage", spec.options.storage], capture_output=True, text=True)
    assert csv.returncode == 0, csv.stderr
    table = pd.read_csv(io.StringIO(csv.stdout))
    assert list(table["number"]) == [0, 1, 2]
    assert list(table["val_top1"]) == [t.values[0] for t in study.trials]
    assert list(table["predicted_seconds"]) == [t.values[1] for t in study.trials]
    assert set(table["outcome"]) == {"completed"} and "params_base_lr" in table
    assert table["params_base_lr"][1] == study.trials[1].params["base_lr"]

    # the rest in this process (the command's own code path, without a new interpreter each time)
    assert main(["export", "--storage", spec.options.storage, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["number"] for r in rows] == [0, 1, 2] and rows[0]["promoted_score"] is None

    out = tmp_path / "t.parquet"
    assert main(["export", "--study", "s", "--storage", spec.options.storage, "--format", "parquet", "-o", str(out)]) == 0
    assert "3 trials of study s written" in capsys.readouterr().err
    assert pd.read_parquet(out)["val_top1"].tolist() == table["val_top1"].tolist()

    assert main(["export", "--study", "s", "--storage", spec.options.storage, "--format", "parquet"]) == 2
    assert "--output: parquet is binary" in capsys.readouterr().err
    # a file the format does not match is refused, not written as CSV under another name
    xlsx = tmp_path / "t.xlsx"
    assert main(["export", "--study", "s", "--storage", spec.options.storage, "-o", str(xlsx)]) == 2
    err = capsys.readouterr().err
    assert "names a .xlsx file but --format is csv" in err and err.count("\n") == 1 and not xlsx.exists()
    assert main(["export", "--study", "nope", "--storage", spec.options.storage]) == 2
    assert "--study: nope: no such study" in capsys.readouterr().err


def test_trials_dataframe_works_on_a_tianfeng_study(tmp_path: Path, tiny_space: dict) -> None:
    spec = spec_for(tmp_path, write_space(tmp_path, tiny_space), trials=2, pruner="none")
    run_search(spec, workers=1, resume=False)
    frame = optuna.load_study(study_name="s", storage=spec.options.storage).trials_dataframe()
    assert len(frame) == 2 and "params_base_lr" in frame


def test_status_fits_the_width_and_shows_the_front_of_a_pareto_study(tmp_path: Path, tiny_space: dict) -> None:
    import os

    tiny_space["objective"]["mode"] = "pareto"
    spec = spec_for(tmp_path, write_space(tmp_path, tiny_space), trials=3, pruner="none")
    run_search(spec, workers=1, resume=False)
    env = {**os.environ, "COLUMNS": "100"}
    out = subprocess.run([sys.executable, "-m", "tianfeng.cli", "status", "--study", "s", "--storage", spec.options.storage],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert max(len(line) for line in out.stdout.splitlines()) <= 100
    assert "Pareto front of s" in out.stdout.replace("\n", " ")


def test_every_attribute_a_search_writes_is_named_once(tmp_path: Path, tiny_space: dict) -> None:
    """Bug: a study or trial attribute written under a spelled-out key that its readers spell
    differently (or another module reuses for something else): every key a real search leaves
    is one of StudyKey's or TrialKey's."""
    from tianfeng.hpo.options import SearchOptions
    from tianfeng.hpo.spec import resolve_search
    from tianfeng.hpo.trial_attrs import TrialKey
    from tianfeng.storage.study_attrs import StudyKey

    tiny_space["objective"]["mode"] = "pareto"  # the default floor adds the chance level
    options = SearchOptions(storage=f"sqlite:///{tmp_path / 'study.db'}", study="s", trials=2, pruner="none",
                            runs_dir=str(tmp_path / "runs"), sampler="random")
    spec, _ = resolve_search(write_space(tmp_path, tiny_space), options.checked())
    run_search(spec, workers=1, resume=False)
    study = optuna.load_study(study_name="s", storage=spec.options.storage)
    assert set(study.user_attrs) <= set(StudyKey), set(study.user_attrs) - set(StudyKey)
    assert {StudyKey.METRIC, StudyKey.CHANCE, StudyKey.TRIAL_BUDGET, StudyKey.UID} <= set(study.user_attrs)
    for t in study.trials:
        assert set(t.user_attrs) <= set(TrialKey), set(t.user_attrs) - set(TrialKey)
