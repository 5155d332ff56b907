"""What optuna-dashboard shows of a tianfeng study: each objective's name, and for every
objective mode the per-epoch curves of the trials.

An accuracy study reports per-epoch values to Optuna, which the dashboard plots itself. A pareto
or time-to-target study cannot (Optuna refuses intermediate values in multi-objective studies,
and a time-to-target study's objective is the predicted time): their curves live in each trial's
`curve` user attribute. So the curves of every study are also saved as a figure of the study's
own (optuna-dashboard's user-defined Plotly figure), which its study page draws."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import plotly.graph_objects as go
from optuna import Study
from optuna.trial import TrialState

from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.judge.scores import curve as epoch_curve
from tianfeng.storage.study_attrs import StudyKey

CURVES_ID = "tianfeng-learning-curves"
PREDICTED = "predicted_seconds"


def metric_names(mode: str, metric: str) -> list[str]:
    """The names of the values each trial tells Optuna, in order."""
    if mode == ObjectiveMode.PARETO:
        return [metric, PREDICTED]
    return [PREDICTED] if mode == ObjectiveMode.TIME_TO_TARGET else [metric]


def curves_figure(study: Study, metric: str) -> go.Figure:
    figure = go.Figure()
    for trial in study.get_trials(deepcopy=False):
        curve = dict(sorted(epoch_curve(trial).items()))
        if not curve:
            continue
        state = trial.state.name.lower() if trial.state != TrialState.RUNNING else "running"
        figure.add_trace(go.Scatter(x=list(curve), y=list(curve.values()), mode="lines+markers",
                                    name=f"trial {trial.number} ({state})"))
    figure.update_layout(title=f"{metric} by epoch, every trial (tianfeng)", xaxis_title="epoch",
                         yaxis_title=metric)
    return figure


def _figure_saver() -> Callable[..., str] | None:
    """optuna-dashboard's save_plotly_graph_object, or None when it is not installed. Its module is
    loaded on its own when it is where the package keeps it: the package's __init__ imports the
    whole web app (and through it scikit-learn), ~2.4 s at the end of every search."""
    spec = importlib.util.find_spec("optuna_dashboard")
    if spec is None:
        return None
    source = Path(spec.submodule_search_locations[0]) / "_custom_plot_data.py"
    if source.is_file():
        module_spec = importlib.util.spec_from_file_location("_tianfeng_dashboard_plot_data", source)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        saver = getattr(module, "save_plotly_graph_object", None)
        if saver is not None:
            return saver
    from optuna_dashboard import save_plotly_graph_object

    return save_plotly_graph_object


def publish_curves(study: Study) -> bool:
    """Save the curves figure on the study for optuna-dashboard; False when it is not installed."""
    saver = _figure_saver()
    if saver is None:
        return False
    metric = study.user_attrs.get(StudyKey.METRIC, "val_top1")
    saver(study, curves_figure(study, metric), graph_object_id=CURVES_ID)
    return True
