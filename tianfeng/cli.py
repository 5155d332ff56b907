"""The `tianfeng` command: parses arguments and calls the function behind each subcommand."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import NoReturn

from tianfeng.commands.flags import add_json, add_option_flags, add_storage
from tianfeng.cost.grid_options import PlanOptions
from tianfeng.promotion.options import PromoteOptions
from tianfeng.trainers.config import ConfigError


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None,
                        help="run config YAML (default: the embedded digits recipe)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one config value, e.g. --set optimizer.lr=0.2 "
                             "or --set phases.0.batch_size=128 (repeatable)")


class _Parser(argparse.ArgumentParser):
    """argparse with a "did you mean" for a mistyped command, flag or choice, and the usage of
    the command the mistake was made in."""

    def error(self, message: str) -> NoReturn:
        import difflib

        target, hint = self, ""
        commands = getattr(self, "commands", {})
        argv = sys.argv[1:] if self._argv is None else self._argv
        given = next((a for a in argv if a in commands), None)
        if given is not None:
            target = commands[given]
        unknown = re.search(r"unrecognized arguments: (\S+)", message)
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if unknown:
            flags = [o for action in target._actions for o in action.option_strings]
            close = difflib.get_close_matches(unknown.group(1).split("=")[0], flags, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
        elif choice:
            options = [c.strip().strip("'") for c in choice.group(2).split(",")]
            close = difflib.get_close_matches(choice.group(1), options, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
        target.print_usage(sys.stderr)
        self.exit(2, f"{target.prog}: error: {message}{hint}\n")

    _argv: list[str] | None = None


def _add_study(parser: argparse.ArgumentParser, help: str) -> None:
    """`--study NAME`, as every command takes it; the positional form these commands took
    before still works for one release, with a deprecation line."""
    parser.add_argument("--study", default=None, help=help)
    parser.add_argument("study_positional", nargs="?", default=None, metavar="STUDY",
                        help="deprecated: the same as --study, accepted until the next release")


def _study_from_positional(args: argparse.Namespace) -> None:
    given = getattr(args, "study_positional", None)
    if given is None:
        return
    if args.study is not None and args.study != given:
        raise ConfigError("--study", args.study, f"and STUDY {given} name two studies: give it once, as --study")
    args.study, args.study_flag = given, "STUDY"
    print(f"tianfeng: warning: the study as a positional argument is deprecated and goes in the next release; "
          f"write `tianfeng {args.command} --study {given}`", file=sys.stderr)


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's, except that the examples keep their lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tianfeng",
        description="Find hyper-parameters for large-batch training with cheap proxy runs, "
                    "then run the winners at scale.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    parser.commands = sub.choices

    train = sub.add_parser("train", help="run one training job with the bundled engine",
                           description="Train with the bundled engine. Logs go to stderr; the "
                                       "final metrics to stdout (JSON with --json), and the run "
                                       "directory holds config.yaml, metrics.jsonl, result.json "
                                       "and checkpoints.")
    _add_config_args(train)
    add_json(train)

    from tianfeng.commands.search_command import add_search_arguments

    search = sub.add_parser("search", help="search a space with cheap proxy runs (Optuna)",
                            description="Search a space of large-batch recipes with cheap proxy runs, "
                                        "pruning losers early. Trials are stored in an Optuna study "
                                        "(SQLite by default); per-trial lines go to stderr, the summary "
                                        "and the promote command to stdout.")
    add_search_arguments(search)

    from tianfeng.commands.scale_command import add_scale_arguments

    scale = sub.add_parser("scale", help="best accuracy against batch size: a search per batch size",
                           description="For each batch size (increasing), search the space with the batch "
                                       "pinned, warm-started from the previous size's best trials; run the "
                                       "naive baseline (the smallest batch's winner with linear LR scaling) "
                                       "beside it; store the curve, print it and write its HTML report.")
    add_scale_arguments(scale)

    promote = sub.add_parser("promote", help="run a trial's recipe at full scale",
                             description="Transfer a trial's recipe from its proxy rung to the full-"
                                         "fidelity target (printed rule by rule), run it, and record the "
                                         "run beside the study. Promoting the same trial with the same "
                                         "config again resumes that run.")
    promote.add_argument("trial", type=int, nargs="?", default=None, help="trial number in the study")
    promote.add_argument("--front", action="store_true", help="list the study's Pareto front (proxy metric, "
                         "predicted wall time, GPU-hours, batch, resolution schedule) and promote nothing")
    add_option_flags(promote, PromoteOptions)
    add_json(promote)

    runs = sub.add_parser("runs", help="list promoted runs", description="List the promoted runs recorded in a study database.")
    runs.add_argument("--study", default=None, help="one study's runs (default: every study)")
    runs.add_argument("--follow", type=int, default=None, metavar="RUN",
                      help="follow run RUN until it ends: its job's state, and each epoch as it is recorded "
                           "(with --json, one JSON object a line)")
    runs.add_argument("--interval", type=float, default=2.0, metavar="S",
                      help="with --follow: seconds between looks at the run (default 2)")
    runs.add_argument("--cancel", type=int, default=None, metavar="RUN",
                      help="cancel submitted run RUN's scheduler job (promoting the trial again resumes it)")
    add_storage(runs)
    add_json(runs)

    calibrate = sub.add_parser("calibrate", help="measure how well the proxies rank recipes",
                               description="Promote the top-k and some random complete trials to full "
                                           "fidelity and store the Spearman rank correlation between "
                                           "their proxy and full scores in the study.")
    calibrate.add_argument("--study", default=None, help="study name (default: the only study in the storage)")
    add_storage(calibrate)
    calibrate.add_argument("--top-k", type=int, default=3, help="best trials to promote (default 3)")
    calibrate.add_argument("--random", type=int, default=2, help="further random complete trials (default 2)")
    calibrate.add_argument("--seed", type=int, default=0, help="seed of the random trials' choice")
    calibrate.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where promoted runs' directories go (default runs/)")
    calibrate.add_argument("--throughput", action="store_true",
                           help="instead: measure this machine's training step time for --space's full-fidelity "
                                "model per resolution and batch, and write the fit a cluster section with "
                                "`device: measured` reads")
    calibrate.add_argument("--space", type=Path, default=None, help="with --throughput: the search space")
    calibrate.add_argument("--data", default=None, help="with --throughput: replace the space's data source")
    calibrate.add_argument("--resolutions", default=None,
                           help="with --throughput: e.g. 8,16,32 (default: those the space's full runs use)")
    calibrate.add_argument("--batches", default=None, help="with --throughput: per-process batches (default 32,128,512)")
    calibrate.add_argument("--threads", type=int, default=None,
                           help="with --throughput: torch threads per process (default: all, or 1 with --processes)")
    calibrate.add_argument("--processes", type=int, default=1,
                           help="with --throughput: time this many processes at once (emulated GPUs sharing the "
                                "machine, as `launch --device cpu` runs them) and fit gloo's allreduce links")
    calibrate.add_argument("--nodes", type=int, default=None,
                           help="with --throughput: measure on this many nodes of --processes each, and fit the "
                                "links between nodes too (default 1); with --launcher slurm|ray: each full run's")
    calibrate.add_argument("--gpus-per-node", type=int, default=None,
                           help="with --launcher slurm|ray (not --throughput): each full run's GPUs per node")
    calibrate.add_argument("--launcher", choices=("local", "slurm", "ray"), default="local",
                           help="local: here; slurm or ray: submit each full run (and return; run calibrate again "
                                "to collect them and compute rho); with --throughput: local (several nodes as "
                                "emulated CPU nodes) or slurm (one job on --nodes real nodes, waited for)")
    calibrate.add_argument("--jobs-address", default=None, metavar="URL",
                           help="with --launcher ray: the Ray head's Jobs API (default: $RAY_ADDRESS)")
    calibrate.add_argument("--device", choices=("cuda", "cpu"), default=None,
                           help="what the processes train on (default: this machine's GPU if it has one with "
                                "--throughput, cuda on a scheduler)")
    calibrate.add_argument("--partition", default=None, help="with --launcher slurm: the job's partition")
    calibrate.add_argument("--account", default=None, help="with --launcher slurm: the job's account")
    calibrate.add_argument("--time", default=None, help="with --launcher slurm: the job's time limit, e.g. 0:30:00")
    calibrate.add_argument("--sbatch-arg", dest="sbatch_args", action="append", default=[], metavar="ARG",
                           help="with --launcher slurm: passed to sbatch as it is (repeatable)")
    calibrate.add_argument("--from-run", type=int, default=None, metavar="RUN",
                           help="instead: refine a throughput profile with promoted run RUN's measured step times "
                                "(each phase's, less the exchange predicted exposed at its world)")
    calibrate.add_argument("--profile", type=Path, default=None, metavar="FILE",
                           help="with --from-run: the profile to refine (default: the study's cluster.throughput; "
                                "none: a new profile from the run alone)")
    calibrate.add_argument("-o", "--output", type=Path, default=None,
                           help="with --throughput: where to write it (default $TIANFENG_CACHE/throughput/); with "
                                "--from-run: default the profile refined")
    add_json(calibrate)

    report = sub.add_parser("report", help="write a study's self-contained HTML report",
                            description="Write one HTML file (plotly.js embedded, opens offline) with "
                                        "what was searched, what won and why, proxy against full "
                                        "scores and the promoted runs.")
    _add_study(report, "study name (default: the only study)")
    add_storage(report)
    report.add_argument("-o", "--output", type=Path, default=None, help="default reports/<study>.html")
    report.add_argument("--scale", default=None, metavar="NAME",
                        help="write the report of a batch-scaling study (tianfeng scale) instead")
    add_json(report)

    launch = sub.add_parser("launch", help="write the launch plan of a multi-node run (or run it here on CPU)",
                            description="Check that a run fits N nodes x G devices, then write per-node "
                                        "torchrun commands (c10d rendezvous), a Slurm sbatch script and a "
                                        "Ray job (Ray Train). With --device cpu on this machine it runs the "
                                        "plan: N emulated nodes of G gloo processes, through torchrun or "
                                        "(--via ray) Ray Train.")
    launch.add_argument("--config", type=Path, required=True, help="the run config YAML to launch")
    launch.add_argument("--nodes", type=int, required=True, help="nodes (machines) of the run")
    launch.add_argument("--gpus-per-node", type=int, required=True, help="processes per node (GPUs, or CPU ranks)")
    launch.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda: write the plan for GPU nodes; cpu: run it here as emulated nodes of gloo processes")
    launch.add_argument("--master-addr", default="127.0.0.1", help="rendezvous host (the first node)")
    launch.add_argument("--port", type=int, default=0, help="rendezvous port (default 29500, or a free one locally)")
    launch.add_argument("--max-restarts", type=int, default=0,
                        help="restarts of every rank from the last checkpoint after a failure (torchrun's "
                             "--max-restarts, Ray Train's max_failures)")
    launch.add_argument("--min-nodes", type=int, default=0,
                        help="elastic: go on with as few as this many nodes when nodes fail or are not there "
                             "(torchrun --nnodes MIN:MAX; needs --max-restarts >= 1; every node count must fit "
                             "the batch); default: exactly --nodes")
    launch.add_argument("--out", type=Path, default=None, help="where the plan goes (default <run_dir>/launch)")
    launch.add_argument("--dry-run", action="store_true", help="print the plan only")
    launch.add_argument("--via", choices=("torchrun", "ray"), default="torchrun",
                        help="what starts the ranks when the plan runs: torchrun per node, or Ray Train workers")
    launch.add_argument("--address", default=None,
                        help="with --via ray: the Ray cluster to run on (auto, HOST:PORT); default a Ray started here")
    add_json(launch)

    plan = sub.add_parser("plan", help="predict a run's wall time, part by part, at many GPUs",
                          description="The predicted wall time of a run (start-up, compute, exchange, data, "
                                      "evaluation, checkpoints) at several GPU counts for flat, hierarchical "
                                      "and compressed gradient exchange, with scaling efficiency and whether "
                                      "the per-GPU batch fits the GPU's memory: the model the search scores "
                                      "recipes with.")
    plan.add_argument("--config", type=Path, required=True, help="the run config YAML to predict")
    add_option_flags(plan, PlanOptions)
    add_json(plan)

    export = sub.add_parser("export", help="write a study's trials as CSV, Parquet or JSON",
                            description="One row per trial: its parameters, objective values (named), state "
                                        "and outcome, proxy score, predicted full-run time and GPU-hours, "
                                        "and the score of its completed promotion, if any. To stdout "
                                        "unless -o is given (Parquet needs -o).")
    _add_study(export, "study name (default: the only study)")
    add_storage(export)
    export.add_argument("--format", choices=("csv", "parquet", "json"), default="csv", help="file format (default csv)")
    export.add_argument("-o", "--output", type=Path, default=None, help="the file to write (default: stdout)")

    dashboard = sub.add_parser("dashboard", help="serve optuna-dashboard on the study database",
                               description="Save every study's per-epoch curves where optuna-dashboard "
                                           "draws them (pareto and time-to-target studies cannot report "
                                           "them to Optuna), then serve optuna-dashboard on the database "
                                           "until Ctrl-C. Needs the [dashboard] extra.")
    _add_study(dashboard, "refresh this study only (default: all)")
    add_storage(dashboard)
    dashboard.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    dashboard.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    dashboard.add_argument("--no-serve", action="store_true", help="save the curves and exit")

    spaces = sub.add_parser("spaces", help="list the search spaces shipped with tianfeng",
                            description="List the shipped search spaces: --space takes each by its bare name "
                                        "(e.g. --space large_batch.yaml) when no such file is in the working "
                                        "directory.")
    add_json(spaces)

    status = sub.add_parser("status", help="show studies or one study's trials",
                            description="Without --study (and with several studies), list the studies in "
                                        "the database; otherwise list one study's trials.")
    status.add_argument("--study", default=None, help="one study's trials (default: list the studies)")
    status.add_argument("--follow", action="store_true",
                        help="follow the study until it is over: a line each time its trial counts or best trial "
                             "change (with --json, one JSON object a line); re-attaches to a submitted search")
    status.add_argument("--interval", type=float, default=5.0, metavar="S",
                        help="with --follow: seconds between looks (default 5)")
    add_storage(status)
    add_json(status)
    from tianfeng.commands.examples import examples_text

    for verb, command in sub.choices.items():
        command.epilog, command.formatter_class = examples_text(verb), _HelpFormatter
    return parser


def _check_inputs(args: argparse.Namespace) -> None:
    """The flags every command shares, checked before anything is opened or written."""
    from tianfeng.storage.url import check_storage
    from tianfeng.trainers.names import STUDY_MAX_LENGTH, check_name

    _study_from_positional(args)
    if getattr(args, "space", None) is not None:
        from tianfeng.hpo.space.shipped import resolve_space

        args.space = resolve_space(args.space)  # a bare name: the shipped space
    flags = {"study": getattr(args, "study_flag", "--study"), "scale": "--scale"}
    if args.command == "scale":
        flags["name"] = "--name"
    for attr, flag in flags.items():
        value = getattr(args, attr, None)
        if value is not None:
            check_name(value, flag, "", max_length=STUDY_MAX_LENGTH)
    if getattr(args, "storage", None) is not None and not getattr(args, "throughput", False):
        from tianfeng.storage.url import as_url

        args.storage = as_url(args.storage)
        creates = args.command in ("search", "scale") and not args.resume
        writes = args.command in ("search", "scale", "promote", "calibrate") and not (
            getattr(args, "dry_run", False) or getattr(args, "front", False))
        check_storage(args.storage, must_exist=not creates, writes=writes)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush does not fail a second time."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    from tianfeng.terminal import interrupts

    interrupts.install()
    try:
        parser = build_parser()
        parser._argv = argv
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        return _interrupted_before_start()
    from tianfeng.terminal.logs import setup_logging
    from tianfeng.trainers.user_code import put_code_dir_on_path

    put_code_dir_on_path()  # the user's model and data modules import here and in every process that trains
    from tianfeng.hpo.space.read import PRIORS_TOLD_ENV

    os.environ.pop(PRIORS_TOLD_ENV, None)  # a new command: its warnings are said once again, then not by its workers
    if args.command == "train":
        source = str(args.config) if args.config else "the embedded default recipe"
    elif args.command in ("search", "scale"):
        source = str(args.space)
    elif args.command in ("launch", "plan"):
        source = str(args.config)
    else:
        source = ""
    try:
        try:  # nothing is opened or written before the command's handler runs
            setup_logging(args.debug)
            _check_inputs(args)
        except KeyboardInterrupt:
            raise _InterruptedBeforeStart from None
        code = _dispatch(args)
        sys.stdout.flush()  # here, where a closed pipe is handled, not at the interpreter's exit
        return code
    except ConfigError as exc:
        if args.debug:
            raise
        print(f"tianfeng: error: {exc.with_source(source)}", file=sys.stderr)
        return 2
    except _InterruptedBeforeStart:
        return _interrupted_before_start()
    except KeyboardInterrupt:
        interrupts.clear()  # handled: a later command in this process does not see it again
        print("tianfeng: interrupted; completed epochs and checkpoints are saved", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `tianfeng status --json | head -1`: the reader has all it wanted
        _silence_stdout()
        return 141  # what a shell reports for a process ended by SIGPIPE, as `ls | head` is
    except OSError as exc:  # a path we cannot read or write: the environment, not the input
        if args.debug:
            raise
        where = f" {exc.filename}" if exc.filename else ""
        print(f"tianfeng: error: cannot use{where}: {exc.strerror or _one_line(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:  # database, data and engine failures: one line, --debug for more
        if args.debug:
            raise
        if type(exc).__module__.startswith("sqlalchemy"):  # it wraps the driver's message
            origin = getattr(exc, "orig", None) or exc
            text = f"database {getattr(args, 'storage', '')}: {_one_line(origin)}"
        elif isinstance(exc, RuntimeError) and "compatible with the table schema" in str(exc):
            newer = "Please try updating" in str(exc)  # a schema this Optuna does not know: a newer one wrote it
            text = (f"--storage: {getattr(args, 'storage', '')}: its tables were written by "
                    + ("a newer Optuna than this tianfeng's; upgrade tianfeng (pip install -U tianfeng) to read it"
                       if newer else "an older Optuna; upgrade them with `optuna storage upgrade --storage URL`"))
        elif isinstance(exc, RuntimeError):
            text = _one_line(exc)
        else:
            text = f"{type(exc).__name__}: {_one_line(exc)} (--debug shows the traceback)"
        print(f"tianfeng: error: {text}", file=sys.stderr)
        return 1


# command -> (module, function taking the parsed arguments); imported only when the command runs,
# so `--help` and bad flags do not pay for torch and optuna
_COMMANDS = {
    "search": ("tianfeng.commands.search_command", "run_search_command"),
    "scale": ("tianfeng.commands.scale_command", "run_scale_command"),
    "promote": ("tianfeng.commands.promote_command", "run_promote_command"),
    "runs": ("tianfeng.commands.promote_command", "run_runs_command"),
    "calibrate": ("tianfeng.commands.calibrate_command", "run_calibrate_command"),
    "report": ("tianfeng.reporting.build", "run_report_command"),
    "launch": ("tianfeng.commands.launch_command", "run_launch_command"),
    "plan": ("tianfeng.commands.plan_command", "run_plan_command"),
    "status": ("tianfeng.commands.status_command", "run_status_command"),
    "spaces": ("tianfeng.commands.spaces_command", "run_spaces_command"),
    "dashboard": ("tianfeng.commands.dashboard_command", "run_dashboard_command"),
    "export": ("tianfeng.commands.export_command", "run_export_command"),
}


class _InterruptedBeforeStart(Exception):
    pass


def _interrupted_before_start() -> int:
    from tianfeng.terminal import interrupts

    interrupts.clear()
    print("tianfeng: interrupted before anything started; nothing was saved", file=sys.stderr)
    return 130


def _dispatch(args: argparse.Namespace) -> int:
    import importlib

    try:  # importing torch and optuna takes seconds: a Ctrl-C then has nothing to save
        if args.command == "train":
            from tianfeng.commands.train_command import run_train as handler
        else:
            module, function = _COMMANDS[args.command]
            handler = getattr(importlib.import_module(module), function)
    except KeyboardInterrupt:
        raise _InterruptedBeforeStart from None
    if args.command == "train":
        return handler(args.config, args.overrides, json_output=args.json)
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
