"""The Python API: what `tianfeng search | promote | scale | report | train` do, callable from
notebooks and scripts with the same options, returning the Optuna study or the run's results.

    import tianfeng
    study = tianfeng.search("large_batch.yaml", trials=30)
    run = tianfeng.promote(study=study.study_name, fastest_to=80)
    tianfeng.report(study.study_name)

Errors are `tianfeng.ConfigError` (bad input: it names the file or option, the key and
what is allowed) or the environment's own exceptions; nothing here prints the summary tables the
commands print, except the Pareto front and the transfer rules logged to stderr.

Each function lives with its command in `tianfeng.verbs`; this module gathers them.
"""

from tianfeng.core.errors import ConfigError
from tianfeng.hpo.options import SearchInterrupted, SearchOptions
from tianfeng.verbs._study import load
from tianfeng.verbs.calibrate import calibrate, calibrate_from_run, measure_throughput
from tianfeng.verbs.dashboard import publish_curves
from tianfeng.verbs.export import export
from tianfeng.verbs.launch import launch, launch_plan
from tianfeng.verbs.plan import plan, predict
from tianfeng.verbs.promote import fastest_trial, front, promote
from tianfeng.verbs.report import report
from tianfeng.verbs.runs import cancel, follow, runs
from tianfeng.verbs.scale import export_scale, plan_scale, run_scale_plan, scale, scale_report
from tianfeng.verbs.search import search, search_dry_run
from tianfeng.verbs.spaces import spaces
from tianfeng.verbs.status import studies, trials
from tianfeng.verbs.train import train

__all__ = ["ConfigError", "SearchInterrupted", "SearchOptions", "calibrate", "calibrate_from_run", "cancel", "export", "export_scale",
           "fastest_trial", "follow", "front", "launch", "launch_plan", "load", "measure_throughput", "plan",
           "plan_scale", "predict", "promote", "publish_curves", "report", "run_scale_plan", "runs", "scale",
           "scale_report", "search", "search_dry_run", "spaces", "studies", "train", "trials"]
