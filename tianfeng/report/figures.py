"""The report's figures: Optuna's own where it draws them, ours for schedules, proxy vs full
and promoted runs. Each returns a plotly Figure, or None with the reason it cannot be drawn."""

from __future__ import annotations

import math

import optuna
import optuna.visualization as ov
import plotly.graph_objects as go
from optuna.trial import TrialState

from trainers.config import config_from_dict
from trainers.schedules import learning_rate

Figure = tuple[go.Figure | None, str]


def _optuna(draw, study: optuna.Study, **kwargs) -> Figure:
    try:
        return draw(study, **kwargs), ""
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        return None, f"not drawn: {exc}"


def history(study: optuna.Study) -> Figure:
    return _optuna(ov.plot_optimization_history, study)


def timeline(study: optuna.Study) -> Figure:
    return _optuna(ov.plot_timeline, study)


def learning_curves(study: optuna.Study) -> Figure:
    return _optuna(ov.plot_intermediate_values, study)


def importances(study: optuna.Study) -> Figure:
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if len(complete) < 3:
        return None, "not drawn: needs at least 3 complete trials"
    return _optuna(ov.plot_param_importances, study)


def parallel(study: optuna.Study) -> Figure:
    return _optuna(ov.plot_parallel_coordinate, study)


def slices(study: optuna.Study, params: list[str]) -> Figure:
    return _optuna(ov.plot_slice, study, params=params or None)


def schedules(trials: list[optuna.trial.FrozenTrial]) -> Figure:
    """LR against epochs and resolution / batch per phase for the top trials, drawn with the
    engine's own schedule functions from each trial's resolved config."""
    fig = go.Figure()
    drawn = 0
    for t in trials:
        raw = t.user_attrs.get("config")
        if not raw:
            continue
        cfg = config_from_dict(raw, f"trial {t.number}")
        total = cfg.total_epochs
        xs, lrs, first = [], [], 0
        for phase in cfg.phases:
            for i in range(101):
                e = first + phase.epochs * i / 100
                if e >= total:
                    e = total - 1e-9
                xs.append(e)
                lrs.append(learning_rate(e, phase.batch_size, cfg))
            first += phase.epochs
        fig.add_trace(go.Scatter(x=xs, y=lrs, mode="lines", name=f"#{t.number} LR"))
        edges = [0]
        for p in cfg.phases:
            edges.append(edges[-1] + p.epochs)
        text = [f"{p.resolution}px, batch {p.batch_size}" for p in cfg.phases]
        fig.add_trace(go.Scatter(x=[(a + b) / 2 for a, b in zip(edges, edges[1:], strict=False)],
                                 y=[p.resolution for p in cfg.phases], mode="markers+text", text=text,
                                 textposition="top center", yaxis="y2", name=f"#{t.number} phases"))
        drawn += 1
    if not drawn:
        return None, "not drawn: no trial with a recorded config"
    fig.update_layout(title="Schedules of the top trials (as the engine computes them)",
                      xaxis_title="epoch", yaxis_title="learning rate",
                      yaxis2={"title": "resolution (px)", "overlaying": "y", "side": "right"})
    return fig, ""


def proxy_vs_full(runs: list[dict], rho: float | None) -> Figure:
    pairs = [r for r in runs if r["final_score"] is not None and r["proxy_score"] is not None]
    if not pairs:
        return None, "not drawn: no promoted run has finished yet (tianfeng promote / calibrate)"
    fig = go.Figure(go.Scatter(x=[r["proxy_score"] for r in pairs], y=[r["final_score"] for r in pairs],
                               mode="markers+text", text=[f"#{r['trial_number']}" for r in pairs],
                               textposition="top center"))
    title = "Proxy score against full score"
    if rho is not None and not math.isnan(rho):
        title += f" (Spearman rho {rho:.2f} over {len(pairs)} runs)"
    fig.update_layout(title=title, xaxis_title="proxy score", yaxis_title="full-fidelity score")
    return fig, ""


def promoted_curves(runs: list[dict], metric: str) -> Figure:
    if not any(r["epochs"] for r in runs):
        return None, "not drawn: no promoted run has reported an epoch"
    fig = go.Figure()
    for r in runs:
        xs = [e["epoch"] for e in r["epochs"]]
        fig.add_trace(go.Scatter(x=xs, y=[e.get(metric) for e in r["epochs"]], mode="lines+markers",
                                 name=f"run {r['id']} (trial #{r['trial_number']}, {r['kind']})"))
        fig.add_trace(go.Scatter(x=xs, y=[e["samples_per_s"] for e in r["epochs"]], mode="lines",
                                 line={"dash": "dot"}, yaxis="y2", name=f"run {r['id']} samples/s"))
    fig.update_layout(title="Promoted runs: per-epoch metric and throughput", xaxis_title="epoch",
                      yaxis_title=metric, yaxis2={"title": "samples/s", "overlaying": "y", "side": "right"})
    return fig, ""
