"""What optuna-dashboard shows of a tianfeng study: each objective's name, and for every
objective mode the per-epoch curves of the trials.

An accuracy study reports per-epoch values to Optuna, which the dashboard plots itself. A pareto
or time-to-target study cannot (Optuna refuses intermediate values in multi-objective studies,
and a time-to-target study's objective is the predicted time): their curves live in each trial's
`curve` user attribute. So the curves of every study are also saved as a figure of the study's
own (optuna-dashboard's user-defined Plotly figure), which its study page draws."""

from __future__ import annotations

import plotly.graph_objects as go
from optuna import Study
from optuna.trial import TrialState

from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.scores import curve as epoch_curve

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


def publish_curves(study: Study) -> bool:
    """Save the curves figure on the study for optuna-dashboard; False when it is not installed."""
    try:
        from optuna_dashboard import save_plotly_graph_object
    except ImportError:
        return False
    metric = study.user_attrs.get("metric", "val_top1")
    save_plotly_graph_object(study, curves_figure(study, metric), graph_object_id=CURVES_ID)
    return True
