"""`tianfeng report`: one self-contained HTML file per study (plotly.js embedded, no network)."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import optuna
import yaml

from tianfeng.core.errors import ConfigError
from tianfeng.core.lr_schedule import peak_lr
from tianfeng.core.run_config import config_from_dict
from tianfeng.cost.walltime import format_seconds, parts_text
from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.judge.outcomes import count_outcomes, outcome, outcomes_text
from tianfeng.hpo.judge.scores import (
    best_trial,
    epochs_reported,
    maximizing,
    mode_of,
    pruned_share,
    ranked,
    score,
)
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.promotion.run import load_study
from tianfeng.reporting import figures
from tianfeng.reporting.guidance import fidelity_caveat, front_rows, importance_caveat, next_step
from tianfeng.reporting.plotlyjs import bundle_for
from tianfeng.reporting.templates import environment, script_json
from tianfeng.storage.ownership import default_report_path, study_owner, write_report
from tianfeng.storage.runs import RunStore
from tianfeng.storage.study_attrs import StudyKey
from tianfeng.storage.url import storage_flag
from tianfeng.version import __version__


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _objective_text(study: optuna.Study) -> str:
    metric, mode = study.user_attrs.get(StudyKey.METRIC, "value"), mode_of(study)
    direction = "maximize" if maximizing(study) else "minimize"
    cluster = study.user_attrs.get(StudyKey.CLUSTER)
    on = f"; full runs predicted on {cluster}" if cluster else ""
    if mode == ObjectiveMode.PARETO:
        return f"pareto: {metric} ({direction}) against predicted wall time (minimize){on}"
    if mode == ObjectiveMode.TIME_TO_TARGET:
        return f"time-to-target: least predicted wall time with {metric} reaching {study.user_attrs.get(StudyKey.TARGET)}{on}"
    return f"{metric} ({direction}){on}"


def _summary(study: optuna.Study, trials: list) -> list[tuple[str, str]]:
    attrs = study.user_attrs
    seconds = sum((t.datetime_complete - t.datetime_start).total_seconds() for t in trials
                  if t.datetime_complete and t.datetime_start)
    core_s = sum((t.datetime_complete - t.datetime_start).total_seconds() * float(t.user_attrs.get(TrialKey.CORES, 1))
                 for t in trials if t.datetime_complete and t.datetime_start)
    calibration = attrs.get(StudyKey.CALIBRATION)
    rows = [("data set", attrs.get(StudyKey.DATA, "-")), ("space file", attrs.get(StudyKey.SPACE_PATH, "-")),
            ("search rung", attrs.get(StudyKey.RUNG, "-")),
            ("sampler / pruner", f"{attrs.get(StudyKey.SAMPLER, '-')} / {attrs.get(StudyKey.PRUNER, '-')}"),
            ("objective", _objective_text(study)),
            ("trials", f"{len(trials)}: {outcomes_text(count_outcomes(trials))}"),
            ("budget used", f"{seconds / 3600:.3f} trial-hours, {core_s / 3600:.3f} core-hours "
                            f"({seconds:.0f} s of trial wall time, {pruned_share(trials):.0%} of it in pruned trials)"),
            ("created", attrs.get(StudyKey.CREATED, "-"))]
    if attrs.get(StudyKey.PER_GPU_BATCH):
        rows.insert(5, ("per-GPU batch", attrs[StudyKey.PER_GPU_BATCH]))
    best = best_trial(study)
    parts = best is not None and (best.user_attrs.get(TrialKey.PREDICTED) or {}).get("parts")
    if parts:
        rows.insert(5, (f"trial {best.number}'s predicted full run", parts_text(parts)))
    if calibration:
        used = calibration.get("pairs_used", len(calibration["pairs"]))
        rho = calibration.get("spearman_rho")
        rows.append(("proxy fidelity", f"Spearman rho {rho:.3f} over {used} (proxy, full) pairs" if rho is not None
                     else f"not measured: {used} usable (proxy, full) pairs, at least 3 needed"))
    return rows


PEAK_LR_LABEL = "peak lr (trained at)"


def trial_peak_lr(t: optuna.trial.FrozenTrial) -> float | None:
    """The LR the trial's optimizer trained at after warm-up (its base LR scaled for the batch,
    and for LAMB the space's own division): what a sampled `base_lr` does not show."""
    raw = t.user_attrs.get(TrialKey.CONFIG)
    if not raw:
        return None
    try:
        return peak_lr(config_from_dict(raw, f"trial {t.number}"))
    except ConfigError:  # a config of another tianfeng version: no figure rather than no report
        return None


def _anchor(title: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in title.lower()).split())


def _caption(fig) -> str:
    """A figure's own title, moved above it as text: a long title clipped by a narrow window
    would hide what the figure shows."""
    if fig is None:
        return ""
    text = fig.layout.title.text or ""
    fig.update_layout(title=None, margin={"t": 30})
    return text


def build_report(storage: str, study_name: str | None, output: Path | None = None, *,
                 flag: str = "--study") -> Path:
    warnings.filterwarnings("ignore", module="optuna")  # importance estimates on few trials warn
    study = load_study(storage, study_name, flag)
    trials = study.get_trials(deepcopy=False)
    runs = RunStore(storage).runs(study.study_name)
    metric = study.user_attrs.get(StudyKey.METRIC, "value")
    complete = ranked(study)
    best = None
    b = best_trial(study)
    if b is not None:
        peak = trial_peak_lr(b)
        best = {"number": b.number, "value": _fmt(score(b)), "prior": b.user_attrs.get(TrialKey.PRIOR, ""),
                "params": [(PEAK_LR_LABEL, _fmt(peak))] * (peak is not None) + [(k, _fmt(v)) for k, v in b.params.items()],
                "config_yaml": yaml.safe_dump(b.user_attrs.get(TrialKey.CONFIG, {}), sort_keys=False)}
    flags = f"--study {study.study_name}{storage_flag(storage)}"
    importance_fig, _ = figures.importances(study)
    top_params = []
    if importance_fig is not None:
        top_params = list(importance_fig.data[0].y)[::-1][:4]
    calibration = study.user_attrs.get(StudyKey.CALIBRATION) or {}
    drawn = [  # (heading, short name for the contents, figure)
        ("Optimisation history", "History", figures.history(study)),
        ("Accuracy against predicted wall time on the cluster", "Accuracy vs time", figures.pareto(study, runs)),
        ("Timeline of trials per worker (complete, pruned, failed)", "Timeline", figures.timeline(study)),
        ("Learning curves: intermediate values per epoch", "Learning curves", figures.learning_curves(study)),
        ("Parameter importances", "Importances",
         (importance_fig, "not drawn: needs at least 3 complete trials")),
        ("Parallel coordinates", "Parallel coordinates", figures.parallel(study)),
        ("Slices of the top parameters", "Slices", figures.slices(study, top_params)),
        ("Schedules of the top trials", "Schedules", figures.schedules(complete[:3])),
        ("Gradient noise scale (the critical batch size)", "Noise scale", figures.noise_scale(complete[:3], runs)),
        ("Proxy against full fidelity", "Proxy vs full", figures.proxy_vs_full(runs, calibration)),
    ]
    curves, _ = figures.promoted_curves(runs, metric)  # drawn in the promoted runs' own section
    promoted = {"id": "fig-promoted", "json": script_json(curves) if curves is not None else ""}
    caveats = {"Parameter importances": importance_caveat(study),
               "Proxy against full fidelity": fidelity_caveat(calibration, flags)}
    figs = [{"id": f"fig-{i}", "anchor": _anchor(title), "title": title, "short": short, "caption": _caption(fig),
             "json": script_json(fig) if fig is not None else "", "note": note, "caveat": caveats.get(title, "")}
            for i, (title, short, (fig, note)) in enumerate(drawn)]
    params = sorted({k for t in trials for k in t.params})
    fixed = ["trial", "state", metric, "epochs run", "seconds", "predicted full run", "GPU-h", "prior", PEAK_LR_LABEL]
    columns = [*fixed, *(f"{p} (parameter)" if p in fixed else p for p in params)]
    rows = []
    for t in trials:
        seconds = (t.datetime_complete - t.datetime_start).total_seconds() if t.datetime_complete else None
        predicted = t.user_attrs.get(TrialKey.PREDICTED) or {}
        rows.append([t.number, str(outcome(t)), _fmt(score(t)), epochs_reported(t), _fmt(seconds),
                     format_seconds(predicted["seconds"]) if predicted else "-", _fmt(predicted.get("gpu_hours")),
                     t.user_attrs.get(TrialKey.PRIOR, ""), _fmt(trial_peak_lr(t)),
                     *[_fmt(t.params.get(p)) for p in params]])
    run_rows = [{**r, "proxy": _fmt(r["proxy_score"]), "full": _fmt(r["final_score"]),
                 "throughput": _fmt(r["epochs"][-1]["samples_per_s"]) if r["epochs"] else "-"} for r in runs]
    from tianfeng.reporting.measured_scaling import scaling_rows

    scaling = [{**r, **{k: _fmt(r[k]) for k in ("single", "measured", "predicted_samples")},
                "efficiency": f"{100 * r['efficiency']:.0f}%", "predicted": f"{100 * r['predicted']:.0f}%"}
               for r in scaling_rows(runs)]
    env = environment()
    html = env.get_template("study.html.j2").render(
        study=study.study_name, summary=_summary(study, trials), best=best, metric=metric,
        next_step=next_step(study, runs, b, flags), front=front_rows(study), flags=flags,
        promote_command=f"tianfeng promote {best['number']} {flags}" if best else "",
        figures=figs, runs=run_rows, promoted=promoted, scaling=scaling, trial_columns=columns, trial_rows=rows,
        plotly_js=bundle_for([fig for _title, _short, (fig, _note) in drawn] + [curves]),
        version=__version__, generated=time.strftime("%Y-%m-%d %H:%M:%S"))
    return write_report(output or default_report_path(study.study_name), html, study_owner(study, storage))

