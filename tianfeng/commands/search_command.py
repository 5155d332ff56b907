"""`tianfeng search`: run (or resume) a study over a search space with cheap proxy runs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tianfeng.commands.flags import add_storage, options_from_flags
from tianfeng.defaults import OBJECTIVE_MODES, PROMOTION_MODES, PRUNER_NAMES, SAMPLER_NAMES
from tianfeng.trainers.config import ConfigError

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")


def parse_duration(text: str | None) -> float | None:
    """`90`, `90s`, `10m`, `1.5h` -> seconds."""
    if text is None:
        return None
    match = _DURATION.match(text.strip())
    if not match:
        raise ConfigError("--timeout", "", f"must look like 90s, 10m or 1h; got {text!r}")
    return float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]


def run_search_command(args) -> int:
    from tianfeng.terminal import interrupts

    try:
        return _search(args)
    except KeyboardInterrupt as cut:
        interrupts.clear()
        return _interrupted(args, cut)


def _interrupted(args, cut: KeyboardInterrupt) -> int:
    # nothing is imported here: a Ctrl-C in the middle of an import leaves that module half made
    study_name, requeued = getattr(cut, "study", None), getattr(cut, "requeued", None)
    if requeued is None:
        named = f"study {study_name}" if study_name else "the study"
        print(f"tianfeng: interrupted before {named} was created; nothing was saved, run the same command again",
              file=sys.stderr)
        return 130
    again = f"; trial(s) {', '.join(map(str, requeued))} will continue from their checkpoints" if requeued else ""
    promoting = f" --promote {args.promote}" if args.promote != "none" else ""
    print(f"tianfeng: interrupted; finished trials are saved in {args.storage}{again}. Continue with:\n"
          f"  tianfeng search --space {args.space} --study {study_name} --storage {args.storage}{promoting} --resume",
          file=sys.stderr)
    return 130


def search_options(args):
    """The command's flags as the API's `SearchOptions` (a flag per field, same name)."""
    from tianfeng.hpo.options import SearchOptions

    return options_from_flags(args, SearchOptions, timeout_s=parse_duration(args.timeout), ray_address=args.address)


def _search(args) -> int:
    options = search_options(args).checked()  # flags first: they need nothing loaded, so a typo fails at once

    from tianfeng import api
    from tianfeng.hpo.run.summary import print_summary
    from tianfeng.terminal.interrupts import raise_if_interrupted

    study = api.search(args.space, options)
    raise_if_interrupted()  # a Ctrl-C swallowed on the way still ends the command as one
    code = print_summary(study, args.storage)
    print(f"report: {api.report(study.study_name, storage=args.storage)}")
    return code


def add_search_arguments(parser) -> None:
    parser.add_argument("--space", type=Path, required=True, help="search-space YAML, e.g. search_spaces/large_batch.yaml")
    parser.add_argument("--mlflow", default=None, metavar="URI",
                        help="also log every trial (parameters, per-epoch metrics, final score) as an MLflow run "
                             "in an experiment named after the study, e.g. sqlite:///mlflow.db")
    parser.add_argument("--data", default=None, help="replace the space's data source (digits, synthetic, imagefolder:DIR)")
    parser.add_argument("--study", default=None, help="study name (default: the space's name)")
    add_storage(parser)
    parser.add_argument("--sampler", choices=SAMPLER_NAMES, default="auto",
                        help="how recipes are sampled (Optuna's samplers); auto (default): random when the rung "
                             "screens the full run's first epochs (--fidelity screen) for accuracy or a target, else tpe")
    parser.add_argument("--pruner", choices=PRUNER_NAMES, default="asha",
                        help="how losers are stopped early (default asha; pareto and time-to-target use a peer rule)")
    parser.add_argument("--trials", type=int, default=30, help="the study's trial budget, counting trials already done (default 30)")
    parser.add_argument("--timeout", default=None, help="stop starting trials after this long: 90s, 10m, 1h")
    parser.add_argument("--workers", default="auto",
                        help="local worker processes sharing the study; auto (default): one per GPU, or without "
                             "GPUs one per CPU core (up to 8) with the cores shared out; 1 runs the trials one at "
                             "a time, in a reproducible order")
    parser.add_argument("--backend", choices=("optuna", "ray"), default="optuna",
                        help="optuna: local worker processes (default); ray: Ray Tune places the trials "
                             "(local or a cluster) and prunes with its own ASHA; both record in the study")
    parser.add_argument("--address", default=None,
                        help="with --backend ray: auto or HOST:PORT of a running Ray cluster (default: start one here)")
    parser.add_argument("--cpus-per-trial", type=float, default=None, help="with --backend ray (default 1)")
    parser.add_argument("--gpus-per-trial", type=float, default=None, help="with --backend ray (default 1 on a cluster with GPUs, else 0)")
    parser.add_argument("--fidelity", default=None, help="the rung trials run at (default: the space's search_fidelity)")
    parser.add_argument("--objective", choices=OBJECTIVE_MODES, default=None,
                        help="accuracy: the metric alone; pareto: the metric against the full run's predicted wall "
                             "time on the cluster; time-to-target: least predicted time whose metric reaches "
                             "--target (default: the space's objective.mode, else accuracy)")
    parser.add_argument("--min-accuracy", type=float, default=None, metavar="PERCENT",
                        help="with --objective pareto: trials below this accuracy are infeasible, never on the "
                             "front (default: the space's objective.min_accuracy, else chance plus as much again, "
                             "at least 10 points: 40 for 5 classes, 20 for 10, 10.1 for 1000)")
    parser.add_argument("--target", type=float, default=None,
                        help="with --objective time-to-target: the metric the search rung must reach")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs of the cluster the full run is for "
                        "(replaces the space's cluster.gpus)")
    parser.add_argument("--gpus-per-node", type=int, default=None, help="GPUs per node of that cluster")
    parser.add_argument("--promote", choices=PROMOTION_MODES, default="none",
                        help="leader: once 3 trials are complete, train each new leader at full fidelity (as "
                             "tianfeng promote does) while the other workers wait, so the search ends with its "
                             "best trial's full run (with --fidelity screen: the trial whose full run is "
                             "forecast to end best); none (default): proxy trials only")
    parser.add_argument("--resume", action="store_true", help="continue an existing study")
    parser.add_argument("--seed", type=int, default=0, help="the sampler's seed (with --workers 1 a search repeats exactly)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where trial run directories go (default runs/)")
    parser.add_argument("--verbose", action="store_true", help="also log every epoch of every trial")
    parser.add_argument("--failure-limit", type=int, default=3,
                        help="stop the search when this many trials in a row fail with the same error (default 3)")
    parser.add_argument("--heartbeat-s", type=int, default=10, help=argparse_suppress())
    parser.add_argument("--grace-s", type=int, default=60,
                        help="seconds without a heartbeat before a trial counts as dead and is retried (default 60)")


def argparse_suppress() -> str:
    import argparse

    return argparse.SUPPRESS
