"""`tianfeng promote`: a trial's recipe at full scale, from the API function to what the command
prints."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tianfeng.core.errors import ConfigError
from tianfeng.defaults import DEFAULT_STORAGE
from tianfeng.options import option
from tianfeng.promotion.options import PromoteOptions
from tianfeng.verbs import Verb
from tianfeng.verbs._flags import emit, options_from_flags
from tianfeng.verbs._study import load

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True)
class FrontFlag:
    front: bool = option(False, "list the study's Pareto front (proxy metric, predicted wall time, GPU-hours, batch, "
                         "resolution schedule) and promote nothing")


def promote(trial: int | None = None, options: PromoteOptions | None = None, **changes: Any) -> dict:
    """Run trial `trial`'s recipe (or, with `fastest_to`, the Pareto-front trial with the least
    predicted time whose proxy metric reaches it) at full fidelity; returns the run's record
    (status, full-fidelity score, run directory, predicted time). `options` (a `PromoteOptions`)
    holds what `tianfeng promote` takes as flags; keyword arguments change single options:
    `promote(7, study="large_batch", batch_size=4096)`."""
    from tianfeng.export import track_study
    from tianfeng.hpo.judge.scores import score
    from tianfeng.hpo.trial_attrs import TrialKey
    from tianfeng.promotion.run import Launch, load_study
    from tianfeng.promotion.run import promote as run_promotion
    from tianfeng.storage.runs import RunRecordStatus
    from tianfeng.storage.study_attrs import StudyKey

    o = (options or PromoteOptions()).changed(**changes).checked(trial)
    if o.fastest_to is not None:
        loaded = load_study(o.storage, o.study)
        pick = fastest_trial(loaded, o.fastest_to)
        logging.getLogger("tianfeng.promote").info(
            "trial %d: the fastest front trial with %s >= %g (%.4g, full run predicted %.0f s)", pick.number,
            loaded.user_attrs.get(StudyKey.METRIC, "value"), o.fastest_to, score(pick),
            pick.user_attrs[TrialKey.PREDICTED]["seconds"])
        trial = pick.number
    launch = Launch(o.nodes, o.gpus_per_node, o.device, o.master_addr, o, min_nodes=o.min_nodes or 0, requeue_at_limit=o.requeue_at_limit) if o.nodes else None
    out = run_promotion(o, trial, launch=launch)
    if (o.mlflow or o.wandb) and not o.dry_run and out["status"] not in (RunRecordStatus.PLANNED,
                                                                          RunRecordStatus.SUBMITTED):
        track_study(o.mlflow, o.wandb, load_study(o.storage, out["study"]), o.storage)
    return out


def fastest_trial(study: optuna.Study, level: float) -> optuna.trial.FrozenTrial:
    """The front trial with the least predicted time whose proxy metric reaches `level`."""
    from tianfeng.hpo.judge.front import fastest_to
    from tianfeng.hpo.judge.scores import best_trial, score
    from tianfeng.storage.study_attrs import StudyKey

    if not math.isfinite(level):
        raise ConfigError("--fastest-to", "", f"must be a finite number, got {level}")
    pick = fastest_to(study, level)
    if pick is None:
        top = best_trial(study)
        best = f"; the best front trial reaches {score(top):.4g} (#{top.number})" if top else ""
        raise ConfigError("--fastest-to", "", f"no complete trial of study {study.study_name} reaches "
                          f"{study.user_attrs.get(StudyKey.METRIC, 'the metric')} {level:g}{best}")
    return pick


def front(study: str | None = None, *, storage: str = DEFAULT_STORAGE) -> list[optuna.trial.FrozenTrial]:
    """The feasible Pareto front of a pareto study: proxy metric against predicted full-run time."""
    from tianfeng.hpo.judge.scores import pareto_front

    return pareto_front(load(study, storage=storage))


def command(args: argparse.Namespace) -> int:
    import yaml

    from tianfeng.storage.runs import RunRecordStatus
    from tianfeng.verbs.report import report

    if sum(x is not None for x in (args.trial, args.fastest_to, args.front or None)) != 1:
        raise ConfigError("trial", "", "give a trial number, --fastest-to LEVEL or --front (one of them)")
    if args.front:
        return _print_front(args)
    out = promote(args.trial, options_from_flags(args, PromoteOptions))
    if args.dry_run:
        print(yaml.safe_dump(out["config"], sort_keys=False), end="")
        where = f"; launch plan in {out['launch']}" if out["launch"] else ""
        print(f"# dry run: would train in {out['run_dir']}{where}", file=sys.stderr)
        return 0
    if out["status"] == RunRecordStatus.SUBMITTED:
        emit(args, out, [f"run {out['run']} is {out['launcher']} job {out['job']} ({out['job_state']}); "
                         "tianfeng runs shows its state, and collects it when it ends"])
        return 0
    if out["status"] == RunRecordStatus.PLANNED:
        emit(args, out, [f"launch plan written to {out['launch']} (run it on the cluster)"])
        return 0
    out["report"] = str(report(out["study"], storage=args.storage))
    emit(args, out, _promoted_lines(out))
    return 0 if out["status"] == RunRecordStatus.COMPLETED else 1


def _print_front(args: argparse.Namespace) -> int:
    from tianfeng.hpo.judge.front import print_front
    from tianfeng.hpo.results.rows import trial_row

    study = load(args.study, storage=args.storage)
    if args.json:
        print(json.dumps([trial_row(t) for t in front(study.study_name, storage=args.storage)], indent=2,
                         default=str))
    else:
        print_front(study)
    return 0


def _promoted_lines(out: dict) -> list[str]:
    full = next(((k, v) for k, v in out.items() if k.startswith("full_")), None)
    scored = f": {full[0].removeprefix('full_')} {full[1]:.2f} at full scale" if full and full[1] is not None else ""
    proxy = f" (proxy {out['proxy_score']:.2f})" if out.get("proxy_score") is not None else ""
    reused = ", reused from an earlier promotion" if out.get("reused") else ""
    lines = [f"trial {out['trial']} of {out['study']} {out['status']}{scored}{proxy}{reused}"]
    if out.get("run_dir"):
        lines.append(f"run dir: {out['run_dir']}")
    lines.append(f"report: {out['report']}")
    return lines


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trial", type=int, nargs="?", default=None, help="trial number in the study")


VERB = Verb(
    "promote", "run a trial's recipe at full scale",
    "Transfer a trial's recipe from its proxy rung to the full-fidelity target (printed rule by rule), run it, and "
    "record the run beside the study. Promoting the same trial with the same config again resumes that run.",
    command,
    (("tianfeng promote --front --study large_batch", "list the Pareto front"),
     ("tianfeng promote --fastest-to 80 --study large_batch", "the fastest front trial reaching 80"),
     ("tianfeng promote 14 --study large_batch --nodes 16 --gpus-per-node 8 --launcher slurm --partition gpu "
      "--time 2:00:00", "trial 14 on 128 GPUs through Slurm")),
    options=(FrontFlag, PromoteOptions), arguments=_arguments, json=True, storage="writes", loads=("optuna", "torch"))
