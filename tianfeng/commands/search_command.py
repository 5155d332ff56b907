"""`tianfeng search`: run (or resume) a study over a search space with cheap proxy runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tianfeng.commands.flags import add_json, add_option_flags, options_from_flags
from tianfeng.storage.study_attrs import StudyKey


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
    """The command's flags as the API's `SearchOptions` (each field's flag generated from it)."""
    from tianfeng.hpo.options import SearchOptions

    return options_from_flags(args, SearchOptions)


def _search(args) -> int:
    options = search_options(args).checked()  # flags first: they need nothing loaded, so a typo fails at once

    from tianfeng import api
    from tianfeng.hpo.run.summary import print_summary, summary_row
    from tianfeng.terminal.interrupts import raise_if_interrupted

    if options.dry_run:
        planned = api.search_dry_run(args.space, options)
        if args.json:
            print(json.dumps(planned, indent=2, default=str))
            return 0
        return _print_dry_run(planned)
    study = api.search(args.space, options)
    raise_if_interrupted()  # a Ctrl-C swallowed on the way still ends the command as one
    if options.launcher != "local":
        job = study.user_attrs[StudyKey.WORKERS_JOB]
        if args.json:
            print(json.dumps({"study": study.study_name, "storage": args.storage, "workers_job": job}, indent=2))
            return 0
        print(f"study {study.study_name}: {job['workers']} workers are {job['launcher']} job {job['job']} "
              f"(logs in {job['log_dir']}); tianfeng status --study {study.study_name} --storage {args.storage} "
              "shows the trials as they finish")
        return 0
    if args.json:
        out = summary_row(study, args.storage)
        out["report"] = str(api.report(study.study_name, storage=args.storage))
        print(json.dumps(out, indent=2, default=str))
        return 0 if out["best"] is not None else 1
    code = print_summary(study, args.storage)
    print(f"report: {api.report(study.study_name, storage=args.storage)}")
    return code


def _print_dry_run(plan: dict) -> int:
    script = plan.pop("script", None)
    budget = f"{plan['trials']} trials" + (f" or {plan['timeout_s']:g} s" if plan["timeout_s"] else "")
    print(f"study {plan['study']} in {plan['storage']}{' (resumed)' if plan['resume'] else ''}: {plan['space']}, "
          f"objective {plan['objective']} ({plan['metric']}), rung {plan['fidelity']}, sampler {plan['sampler']}, "
          f"pruner {plan['pruner']}, {budget}, workers {plan['workers']} ({plan['backend']}, "
          f"launcher {plan['launcher']}), promote {plan['promote']}")
    if script:
        print(f"the job array's batch script:\n{script}", end="")
    print("dry run: nothing was started, created or submitted", file=sys.stderr)
    return 0


def add_search_arguments(parser) -> None:
    from tianfeng.hpo.options import SearchOptions

    parser.add_argument("--space", type=Path, required=True, help="search-space YAML, e.g. search_spaces/large_batch.yaml")
    add_option_flags(parser, SearchOptions)
    add_json(parser)
