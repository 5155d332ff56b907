"""The batch-scaling study's HTML report: accuracy against batch size (searched and naive), the
winning LR and warm-up against batch size, and a row per batch size."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import optuna
import plotly.graph_objects as go

from tianfeng.core.errors import ConfigError
from tianfeng.core.names import STUDY_MAX_LENGTH, check_name
from tianfeng.hpo.spec import UNLIMITED_TRIALS
from tianfeng.reporting.plotlyjs import bundle_for
from tianfeng.reporting.templates import environment, script_json
from tianfeng.scaling.results import NAIVE_SCORED, ScalePoint, ScaleStore
from tianfeng.scaling.table import describe, fmt_value, headline
from tianfeng.storage.ownership import default_report_path, study_owner, write_report
from tianfeng.storage.url import storage_flag
from tianfeng.version import __version__


def accuracy_figure(points: list[ScalePoint], metric: str, tolerance: float) -> go.Figure:
    batches = [p.batch_size for p in points]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=batches, y=[p.searched_value for p in points], mode="lines+markers",
                             name="searched (per-batch study)"))
    fig.add_trace(go.Scatter(x=batches, y=[p.naive_value for p in points], mode="lines+markers",
                             line={"dash": "dash"}, name="naive linear scaling"))
    ref = points[0].searched_value
    if ref is not None:
        fig.add_trace(go.Scatter(x=[batches[0], batches[-1]], y=[ref - tolerance] * 2, mode="lines",
                                 line={"dash": "dot", "color": "grey"},
                                 name=f"batch {batches[0]} minus {tolerance:g}"))
    fig.update_layout(title=f"Best {metric} against global batch size", yaxis_title=metric,
                      xaxis={"title": "global batch size", "type": "log", "tickvals": batches},
                      legend={"orientation": "h", "y": -0.25})
    return fig


def recipe_figure(points: list[ScalePoint]) -> go.Figure | None:
    shown = [p for p in points if p.searched_recipe]
    if not shown:
        return None
    batches = [p.batch_size for p in shown]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=batches, y=[p.searched_recipe["peak_lr"] for p in shown], mode="lines+markers",
                             text=[p.searched_recipe["optimizer"] for p in shown], name="winning peak LR"))
    naive = [p for p in shown if p.naive_recipe]
    fig.add_trace(go.Scatter(x=[p.batch_size for p in naive], y=[p.naive_recipe["peak_lr"] for p in naive],
                             mode="lines", line={"dash": "dash"}, name="naive peak LR (linear)"))
    fig.add_trace(go.Scatter(x=batches, y=[p.searched_recipe["warmup_epochs"] for p in shown],
                             mode="lines+markers", yaxis="y2", name="winning warm-up (epochs)"))
    fig.update_layout(title="The winning recipe against batch size",
                      xaxis={"title": "global batch size", "type": "log", "tickvals": batches},
                      yaxis={"title": "peak learning rate", "type": "log"},
                      yaxis2={"title": "warm-up epochs", "overlaying": "y", "side": "right", "type": "linear",
                              "rangemode": "tozero"},
                      legend={"orientation": "h", "y": -0.25})
    return fig


def build_scale_report(storage: str, name: str, output: Path | None = None) -> Path:
    store = ScaleStore(storage)
    points, settings = store.points(name)
    if not points:
        known = ", ".join(store.scales()) or "none"
        raise ConfigError("--name", name, f"no batch-scaling study of that name in {storage}; known: {known}")
    metric, tolerance = settings.get("metric", "value"), settings.get("tolerance", 1.0)
    maximize = settings.get("direction", "maximize") == "maximize"
    trial_s = sum(p.trial_s for p in points)
    budget = (f"{settings['trials_per_batch']} trials" if settings.get("trials_per_batch", UNLIMITED_TRIALS) < UNLIMITED_TRIALS
              else f"{settings['epoch_budget']} epochs" if settings.get("epoch_budget")
              else f"{settings.get('timeout_s', 0):.0f} s")
    summary = [("space", settings.get("space", "-")), ("data set", settings.get("data", "-")),
               ("search rung", f"{settings.get('rung', '-')}: {points[0].epochs_per_trial} epochs per trial "
                               "at every batch size"),
               ("budget per batch size", budget),
               ("sampler / pruner", f"{settings.get('sampler', '-')} / {settings.get('pruner', '-')}"),
               ("trials", f"{sum(p.trials for p in points)} ({sum(p.pruned for p in points)} pruned), "
                          f"plus {len(points) - 1} naive runs"),
               ("wall time", f"{sum(p.wall_s for p in points):.0f} s; "
                             f"{sum(p.pruned_s for p in points) / trial_s if trial_s else 0:.0%} of trial time "
                             "in pruned trials")]
    drawn = [("Accuracy against batch size", accuracy_figure(points, metric, tolerance)),
             ("LR and warm-up of the winners", recipe_figure(points))]
    figs = [{"id": f"scale-fig-{i}", "title": title, "json": script_json(fig) if fig is not None else "",
             "note": "not drawn: no batch size has a complete trial"} for i, (title, fig) in enumerate(drawn)]
    ref = points[0].searched_value
    columns = ["batch", "steps/epoch", f"searched {metric}", "vs smallest", f"naive {metric}", "vs smallest",
               "winning recipe", "study", "trials (pruned, warm-started)", "wall s", "pruned share"]
    rows = []
    for p in points:
        def delta(v: float | None) -> str:
            return "-" if v is None or ref is None else f"{v - ref:+.2f}"
        naive = fmt_value(p.naive_value) if p.naive_status in NAIVE_SCORED else p.naive_status
        rows.append([p.batch_size, p.steps_per_epoch, fmt_value(p.searched_value), delta(p.searched_value), naive,
                     delta(p.naive_value), describe(p.searched_recipe) + (f" (trial #{p.searched_trial})"
                                                                          if p.searched_trial is not None else ""),
                     p.study, f"{p.trials} ({p.pruned}, {p.warm_started})", f"{p.wall_s:.0f}",
                     f"{p.pruned_s / p.trial_s:.0%}" if p.trial_s else "-"])
    env = environment()
    html = env.get_template("scale.html.j2").render(
        name=name, summary=summary, metric=metric, headline=headline(points, tolerance, maximize),
        figures=figs, columns=columns, rows=rows, plotly_js=bundle_for([fig for _title, fig in drawn]),
        storage_flag=storage_flag(storage),
        version=__version__, generated=time.strftime("%Y-%m-%d %H:%M:%S"))
    check_name(name, "--scale", "", max_length=STUDY_MAX_LENGTH)
    first = optuna.load_study(study_name=points[0].study, storage=storage)  # the scale study's id is its first search's
    owner = replace(study_owner(first, storage), study=name)
    return write_report(output or default_report_path(name), html, owner)
