"""The report's figures: Optuna's own where it draws them, ours for schedules, proxy vs full
and promoted runs. Each returns a plotly Figure, or None with the reason it cannot be drawn."""

from __future__ import annotations

import math

import optuna
import optuna.visualization as ov
import plotly.graph_objects as go
from optuna.trial import TrialState

from tianfeng.core.lr_schedule import learning_rate
from tianfeng.core.run_config import config_from_dict
from tianfeng.cost.walltime import format_seconds, schedule_text
from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.judge.outcomes import COLOURS, outcome
from tianfeng.hpo.judge.scores import (
    completed,
    curve,
    maximizing,
    mode_of,
    pareto_front,
    predicted_s,
    score,
)
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.storage.study_attrs import StudyKey

Figure = tuple[go.Figure | None, str]


def _optuna(draw, study: optuna.Study, **kwargs) -> Figure:
    try:
        fig = draw(study, **kwargs)
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        return None, f"not drawn: {exc}"
    # Optuna's generic title repeats the heading; its fixed width (slices) would overflow a narrow window
    fig.update_layout(title=None, width=None)
    return fig, ""


def _metric_target(study: optuna.Study) -> dict:
    """Optuna's plots draw the first objective; with pareto or time-to-target they draw the metric."""
    if mode_of(study) == ObjectiveMode.ACCURACY:
        return {}
    return {"target": score, "target_name": study.user_attrs.get(StudyKey.METRIC, "value")}


def integer_axis(largest: float, ticks: int = 10) -> dict:
    """Whole-number ticks (trial numbers, epochs) at a round step: 1, 2, 5, 10, 20, 50, ..."""
    step = 1
    while largest / step > ticks:
        step = step * 5 // 2 if str(step)[0] == "2" else step * 2
    return {"tick0": 0, "dtick": step}


def seconds_axis(values: list[float], title: str) -> dict:
    """An axis of seconds: logarithmic, with ticks at 1, 2 and 5 times each power of ten, when
    the values span a factor of 3 or more; linear otherwise, where a log axis would show only a
    few ticks that read as a linear scale. The title says which."""
    low, high = min(values), max(values)
    if low <= 0 or high < 3 * low:
        return {"title": f"{title} (s)", "type": "linear"}
    ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
             for m in (1, 2, 5)]
    shown = [t for t in ticks if low / 1.5 <= t <= high * 1.5]
    return {"title": f"{title} (s, log scale)", "type": "log", "tickvals": shown}


def history(study: optuna.Study) -> Figure:
    """Every complete trial's metric by trial number and the best so far as a step line, in
    every objective mode (Optuna's own plot draws no best line for a second objective)."""
    done = sorted(completed(study), key=lambda t: t.number)
    if not done:
        return None, "not drawn: no trial has completed"
    metric = study.user_attrs.get(StudyKey.METRIC, "value")
    better = max if maximizing(study) else min
    best, line = None, []
    for t in done:
        best = score(t) if best is None else better(best, score(t))
        line.append(best)
    numbers = [t.number for t in done]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=numbers, y=[score(t) for t in done], mode="markers", name=f"{metric} of a trial",
                             marker={"color": "#8c959f", "size": 7}, text=[f"#{n}" for n in numbers],
                             hovertemplate="trial %{text}: %{y:.4g}<extra></extra>"))
    fig.add_trace(go.Scatter(x=numbers, y=line, mode="lines", name="best so far", line={"shape": "hv", "color": "#0969da"},
                             hovertemplate="best after trial %{x}: %{y:.4g}<extra></extra>"))
    fig.update_layout(title=f"{metric} of each complete trial and the best so far", yaxis_title=metric,
                      xaxis={"title": "trial", **integer_axis(max(numbers))})
    return fig, ""


def timeline(study: optuna.Study) -> Figure:
    """Trials as bars in time, one row per worker (host:pid, or Ray's), coloured by state."""
    trials = [t for t in study.get_trials(deepcopy=False) if t.datetime_start]
    if not trials:
        return None, "not drawn: no trial has started"
    now = max(t.datetime_complete or t.datetime_start for t in trials)
    fig = go.Figure()
    for shown, colour in COLOURS.items():
        group = [t for t in trials if outcome(t) == shown]
        if not group:
            continue
        fig.add_trace(go.Bar(
            orientation="h", name=str(shown), marker_color=colour,
            y=[t.user_attrs.get(TrialKey.WORKER, "unknown") for t in group],
            base=[t.datetime_start.isoformat() for t in group],
            x=[max(1.0, ((t.datetime_complete or now) - t.datetime_start).total_seconds() * 1000) for t in group],
            text=[f"#{t.number}" for t in group], textposition="inside",
            hovertemplate="trial %{text}<br>%{base} + %{x:.0f} ms<extra></extra>"))
    fig.update_layout(title="Trials per worker over time", barmode="overlay", xaxis={"type": "date"},
                      yaxis={"title": "worker", "type": "category"})
    return fig, ""


def _joined(series: list[tuple[int, list[float], list[float]]]) -> tuple[list, list, list]:
    """Many lines as one trace, broken by None: hundreds of trials draw as fast as one."""
    xs: list = []
    ys: list = []
    text: list = []
    for number, x, y in series:
        xs += [*x, None]
        ys += [*y, None]
        text += [f"trial {number}"] * len(x) + [None]
    return xs, ys, text


def learning_curves(study: optuna.Study) -> Figure:
    """Every trial's per-epoch values: complete trials in one trace, pruned ones in another."""
    fig = go.Figure()
    trials = study.get_trials(deepcopy=False)
    for label, colour in COLOURS.items():
        series = [(t.number, sorted(c), [c[e] for e in sorted(c)])
                  for t in trials if outcome(t) == label and (c := curve(t))]
        if series:
            xs, ys, text = _joined(series)
            fig.add_trace(go.Scatter(x=xs, y=ys, text=text, mode="lines+markers", name=f"{label} ({len(series)})",
                                     line={"color": colour, "width": 1}, marker={"size": 4}, opacity=0.6,
                                     hovertemplate="%{text}<br>epoch %{x}: %{y:.4g}<extra></extra>"))
    if not fig.data:
        return None, "not drawn: no trial has reported an epoch"
    last_epoch = max(x for trace in fig.data for x in trace.x if x is not None)
    fig.update_layout(title="Intermediate values per epoch (what the pruner saw)",
                      xaxis={"title": "epoch", **integer_axis(last_epoch)},
                      yaxis_title=study.user_attrs.get(StudyKey.METRIC, "value"))
    return fig, ""


def importances(study: optuna.Study) -> Figure:
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if len(complete) < 3:
        return None, "not drawn: needs at least 3 complete trials"
    return _optuna(ov.plot_param_importances, study, **_metric_target(study))


def _axis_position(trial: optuna.trial.FrozenTrial, name: str) -> float | None:
    """A parameter's value placed on [0, 1] of its distribution (log scale where sampled so)."""
    if name not in trial.params:
        return None
    dist, value = trial.distributions[name], trial.params[name]
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return dist.choices.index(value) / max(1, len(dist.choices) - 1)
    low, high = dist.low, dist.high
    if getattr(dist, "log", False):
        low, high, value = math.log(low), math.log(high), math.log(value)
    return (value - low) / (high - low) if high > low else 0.5


def _axis_labels(trials: list[optuna.trial.FrozenTrial], name: str) -> list[tuple[float, str]]:
    """(position on [0, 1], label): every choice of a categorical axis, the ends of a numeric one."""
    dist = next(t.distributions[name] for t in trials if name in t.distributions)
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        last = max(1, len(dist.choices) - 1)
        return [(i / last, str(choice)) for i, choice in enumerate(dist.choices)]
    return [(0.0, f"{dist.low:.3g}"), (1.0, f"{dist.high:.3g}")]


def parallel(study: optuna.Study) -> Figure:
    """Parallel coordinates drawn with lines (no parcoords trace, so the small plotly.js bundle
    draws it): one axis per parameter on its sampled scale, then the objective; trials coloured
    by quartile of their value, the best quartile darkest and on top."""
    complete = completed(study)
    if len(complete) < 2:
        return None, "not drawn: needs at least 2 complete trials"
    names = sorted({n for t in complete for n in t.params})
    values = sorted(score(t) for t in complete)
    low, high = values[0], values[-1]
    ranked = sorted(complete, key=score, reverse=not maximizing(study))  # worst first
    quarters = [ranked[i * len(ranked) // 4:(i + 1) * len(ranked) // 4] for i in range(4)]
    colours = ["#c6dbef", "#6baed6", "#2171b5", "#08306b"]
    fig = go.Figure()
    for i, group in enumerate(quarters):
        if not group:
            continue
        series = []
        for t in group:
            ys = [_axis_position(t, n) for n in names] + [(score(t) - low) / (high - low) if high > low else 0.5]
            series.append((t.number, list(range(len(ys))), ys))
        xs, ys, text = _joined(series)
        fig.add_trace(go.Scatter(x=xs, y=ys, text=text, mode="lines", line={"color": colours[i], "width": 1.5},
                                 name=f"quartile {i + 1} of {len(complete)}" + (" (best)" if i == 3 else ""),
                                 connectgaps=False, hovertemplate="%{text}<extra></extra>"))
    metric = study.user_attrs.get(StudyKey.METRIC, "value")
    labels = [_axis_labels(complete, n) for n in names] + [[(0.0, f"{low:.4g}"), (1.0, f"{high:.4g}")]]
    for x, axis in enumerate(labels):
        for position, text in axis:
            # the ends sit beyond the axis; the choices between them on it, on a white ground
            y = -0.06 if position == 0 else 1.06 if position == 1 else position
            fig.add_annotation(x=x, y=y, text=text, showarrow=False, font={"size": 10},
                               bgcolor="rgba(255,255,255,0.85)" if 0 < position < 1 else None)
        fig.add_shape(type="line", x0=x, x1=x, y0=0, y1=1, line={"color": "#888", "width": 1})
    fig.update_layout(title="Parallel coordinates of the complete trials", showlegend=True,
                      xaxis={"tickvals": list(range(len(names) + 1)), "ticktext": [*names, metric],
                             "showgrid": False, "zeroline": False},
                      yaxis={"visible": False, "range": [-0.12, 1.12]})
    return fig, ""


def slices(study: optuna.Study, params: list[str]) -> Figure:
    return _optuna(ov.plot_slice, study, params=params or None, **_metric_target(study))


def pareto(study: optuna.Study, runs: list[dict]) -> Figure:
    """Every complete trial's proxy metric against its full run's predicted wall time on the
    study's cluster; the front joined by a line, promoted trials ringed."""
    done = [t for t in completed(study) if predicted_s(t) is not None]
    if not done:
        return None, "not drawn: no complete trial has a predicted wall time"
    front = pareto_front(study)
    promoted = {r["trial_number"] for r in runs}
    metric = study.user_attrs.get(StudyKey.METRIC, "value")

    def hover(t) -> str:
        p = t.user_attrs[TrialKey.PREDICTED]
        return (f"#{t.number}: {metric} {score(t):.4g}, {format_seconds(p['seconds'])}, "
                f"{p['gpu_hours']:.3g} GPU-h<br>{schedule_text(p.get('phases') or [])}")

    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[predicted_s(t) for t in done], y=[score(t) for t in done], mode="markers",
                             name=f"complete trials ({len(done)})", marker={"color": "#8c959f", "size": 7},
                             hovertext=[hover(t) for t in done], hoverinfo="text"))
    fig.add_trace(go.Scatter(x=[predicted_s(t) for t in front], y=[score(t) for t in front],
                             mode="lines+markers", name=f"Pareto front ({len(front)})",
                             line={"shape": "hv", "color": "#0969da"}, marker={"size": 9},
                             hovertext=[hover(t) for t in front], hoverinfo="text"))
    marked = [t for t in done if t.number in promoted]
    if marked:
        fig.add_trace(go.Scatter(x=[predicted_s(t) for t in marked], y=[score(t) for t in marked], mode="markers",
                                 name="promoted", marker={"size": 16, "symbol": "circle-open", "color": "#cf222e",
                                                          "line": {"width": 2}},
                                 hovertext=[hover(t) for t in marked], hoverinfo="text"))
    fig.update_layout(title=f"{metric} at the search rung against the full run's predicted wall time on "
                            f"{study.user_attrs.get(StudyKey.CLUSTER, 'the cluster')}",
                      xaxis=seconds_axis([predicted_s(t) for t in done], "predicted wall time"), yaxis_title=metric)
    return fig, ""


def schedules(trials: list[optuna.trial.FrozenTrial]) -> Figure:
    """LR against epochs for the top trials, drawn with the engine's own schedule functions from
    each trial's resolved config, and each phase's resolution as a step line on a second axis
    (only when the phases differ in resolution). Phase details are in the hover text, never as
    labels on the plot, so nothing overlaps however many trials share a phase."""
    fig = go.Figure()
    configs = [(t.number, config_from_dict(t.user_attrs[TrialKey.CONFIG], f"trial {t.number}"))
               for t in trials if t.user_attrs.get(TrialKey.CONFIG)]
    if not configs:
        return None, "not drawn: no trial with a recorded config"
    resolutions = sorted({p.resolution for _, cfg in configs for p in cfg.phases})
    for number, cfg in configs:
        total = cfg.total_epochs
        xs, lrs, hover, first = [], [], [], 0
        for phase in cfg.phases:
            for i in range(101):
                e = min(first + phase.epochs * i / 100, total - 1e-9)
                xs.append(e)
                lrs.append(learning_rate(e, phase.batch_size, cfg))
                hover.append(f"#{number} epoch {e:.2f}: {phase.resolution} px, batch {phase.batch_size}")
            first += phase.epochs
        suffix = f" ({resolutions[0]} px)" if len(resolutions) == 1 else ""
        fig.add_trace(go.Scatter(x=xs, y=lrs, mode="lines", name=f"#{number} LR{suffix}", hovertext=hover,
                                 hoverinfo="text+y"))
        if len(resolutions) > 1:
            edges = [0]
            for p in cfg.phases:
                edges.append(edges[-1] + p.epochs)
            ys = [p.resolution for p in cfg.phases]
            fig.add_trace(go.Scatter(x=edges, y=[*ys, ys[-1]], mode="lines", line={"shape": "hv", "dash": "dot"},
                                     yaxis="y2", name=f"#{number} resolution",
                                     hovertext=[f"#{number}: {p.resolution} px, batch {p.batch_size}, "
                                                f"{p.epochs} epochs" for p in cfg.phases] + [""],
                                     hoverinfo="text"))
    layout = {"title": "Schedules of the top trials (as the engine computes them)", "xaxis_title": "epoch",
              "yaxis_title": "learning rate"}
    if len(resolutions) > 1:
        layout["yaxis2"] = {"title": "resolution (px)", "overlaying": "y", "side": "right",
                            "tickvals": resolutions, "range": [resolutions[0] * 0.9, resolutions[-1] * 1.1]}
    fig.update_layout(**layout)
    return fig, ""


def proxy_vs_full(runs: list[dict], calibration: dict) -> Figure:
    """Every promoted run; the title gives the calibration's rho and the pairs it was computed on."""
    pairs = [r for r in runs if r["final_score"] is not None and r["proxy_score"] is not None]
    rho, used = calibration.get("spearman_rho"), calibration.get("pairs_used", len(calibration.get("pairs", [])))
    if not pairs:
        return None, "not drawn: no promoted run has finished yet (tianfeng promote / calibrate)"
    # trial numbers on hover: printed beside the points they would overlap wherever scores are close
    fig = go.Figure(go.Scatter(x=[r["proxy_score"] for r in pairs], y=[r["final_score"] for r in pairs],
                               mode="markers", hovertext=[f"#{r['trial_number']} ({r['kind']})" for r in pairs],
                               hoverinfo="text+x+y"))
    title = "Proxy score against full score"
    if rho is not None and not math.isnan(rho):
        title += f" (calibration: Spearman rho {rho:.2f} over {used} pairs)"
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


def noise_scale(trials: list[optuna.trial.FrozenTrial], runs: list[dict]) -> Figure:
    """The gradient noise scale per epoch: the top trials' (proxy runs) and the promoted runs'.
    An estimate at or below zero is noise swamping the signal, not a scale: the line breaks there
    and the epoch is marked, at the foot of the log axis, as too little signal."""
    fig = go.Figure()
    unmeasured: list[tuple[int, float, str]] = []  # (epoch, estimate, whose)

    def add(points: list[tuple[int, float]], name: str, line: dict) -> None:
        unmeasured.extend((e, v, name) for e, v in points if v <= 0)
        fig.add_trace(go.Scatter(x=[e for e, _ in points], y=[v if v > 0 else None for _, v in points],
                                 mode="lines+markers", line=line, connectgaps=False, name=name))

    for t in trials:
        points = sorted((int(e), v) for e, v in t.user_attrs.get(TrialKey.NOISE_CURVE, {}).items() if v is not None)
        if points:
            add(points, f"trial #{t.number}", {})
    for r in runs:
        points = [(e["epoch"], e["noise_scale"]) for e in r["epochs"] if e.get("noise_scale") is not None]
        if points:
            add(points, f"run {r['id']} (trial #{r['trial_number']})", {"dash": "dot"})
    if not fig.data:
        return None, "not drawn: no run measured it (noise_scale_every: 0)"
    if unmeasured:
        measured = [v for trace in fig.data for v in trace.y if v is not None]
        foot = min(measured) / 2 if measured else 1.0
        fig.add_trace(go.Scatter(x=[e for e, _, _ in unmeasured], y=[foot] * len(unmeasured), mode="markers",
                                 marker={"symbol": "x", "color": "grey"}, name="estimate <= 0: too little signal",
                                 text=[f"{who}, epoch {e}: estimate {v:.3g}" for e, v, who in unmeasured],
                                 hoverinfo="text"))
    fig.update_layout(title="Gradient noise scale B_simple per epoch (McCandlish et al. 2018)",
                      xaxis_title="epoch", yaxis={"title": "B_simple (images)", "type": "log"})
    return fig, ""
