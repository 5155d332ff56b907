"""A study as a table: one row per trial with its parameters, objective values, state, outcome,
predicted full-run time and the result of its promotion, if any (`tianfeng export`)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pandas as pd

from tianfeng.core.errors import ConfigError
from tianfeng.hpo.judge.outcomes import outcome
from tianfeng.hpo.results.dashboard import metric_names
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.storage.runs import RunRecordStatus, RunStore
from tianfeng.storage.study_attrs import StudyKey

FORMATS = ("csv", "parquet", "json")


def trials_table(study: optuna.Study, storage: str) -> pd.DataFrame:
    """Optuna's own trials_dataframe with its objective columns named, and tianfeng's columns."""
    attrs = study.user_attrs
    names = metric_names(attrs.get(StudyKey.OBJECTIVE_MODE, "accuracy"), attrs.get(StudyKey.METRIC, "val_top1"))
    table = study.trials_dataframe(attrs=("number", "value", "datetime_start", "datetime_complete", "duration",
                                          "params", "state"), multi_index=False)
    # Optuna names them value, values_<i> or, with metric names set, values_<name>
    renames = {"value": names[0]} if len(names) == 1 else {}
    for i, name in enumerate(names):
        renames.update({f"values_{i}": name, f"values_{name}": name})
    table = table.rename(columns=renames)
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    promoted = {}
    for run in RunStore(storage).runs(study.study_name):
        if run["kind"] == "promote" and run["status"] == RunRecordStatus.COMPLETED:
            promoted[run["trial_number"]] = run["final_score"]
    number = table["number"] if len(table) else pd.Series(dtype=int)
    table["outcome"] = [outcome(trials[n]).value for n in number]
    table["score"] = [trials[n].user_attrs.get(TrialKey.SCORE) for n in number]
    table["predicted_seconds"] = [trials[n].user_attrs.get(TrialKey.PREDICTED, {}).get("seconds") for n in number]
    table["predicted_gpu_hours"] = [trials[n].user_attrs.get(TrialKey.PREDICTED, {}).get("gpu_hours") for n in number]
    table["fidelity"] = [trials[n].user_attrs.get(TrialKey.FIDELITY) for n in number]
    table["promoted_score"] = [promoted.get(n) for n in number]
    return table.loc[:, ~table.columns.duplicated()]


def write_table(table: pd.DataFrame, output: Path | None, fmt: str) -> str | None:
    """Write to `output` (None: return the text, for stdout; parquet needs a file)."""
    if fmt not in FORMATS:
        raise ConfigError("--format", fmt, f"allowed: {', '.join(FORMATS)}")
    if output is not None and output.suffix and output.suffix.lower() != f".{fmt}":
        raise ConfigError("--output", str(output), f"names a {output.suffix} file but --format is {fmt}: give a "
                          f"file ending .{fmt}, or --format {' or '.join(f for f in FORMATS if f != fmt)} "
                          f"with its own ending (formats: {', '.join(FORMATS)})")
    if fmt == "parquet":
        if output is None:
            raise ConfigError("--output", "", "parquet is binary: give a file with -o FILE.parquet")
        try:
            table.to_parquet(output, index=False)
        except ImportError:
            raise ConfigError("--format", "parquet", "needs pyarrow: pip install pyarrow") from None
        return None
    text = table.to_csv(index=False) if fmt == "csv" else table.to_json(orient="records", indent=2,
                                                                        date_format="iso")
    if output is None:
        return text
    output.write_text(text)
    return None
