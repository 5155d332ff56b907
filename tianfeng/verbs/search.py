"""`tianfeng search`: a study over a search space with cheap proxy runs, from the API function to
what the command prints."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tianfeng.hpo.options import SearchOptions
from tianfeng.storage.study_attrs import StudyKey
from tianfeng.verbs import Verb
from tianfeng.verbs._flags import SpaceFlag, options_from_flags

if TYPE_CHECKING:
    import optuna

    from tianfeng.hpo.space.read import SearchSpace
    from tianfeng.hpo.spec import SearchSpec
    from tianfeng.promotion.leaders import LeaderPromotion


def search(space: str | Path, options: SearchOptions | None = None, **changes: Any) -> optuna.Study:
    """Search `space` (a file, or a shipped space's bare name) with proxy runs; the study is kept
    in `options.storage` and returned. `options` (a `SearchOptions`) holds what `tianfeng search`
    takes as flags; keyword arguments change single options:
    `search("large_batch.yaml", trials=60, objective="pareto", gpus=128)`. Ctrl-C raises
    `SearchInterrupted` (a KeyboardInterrupt) once the cut trials are queued again. With
    `launcher="slurm"` the study is created, its workers submitted as a job array, and the study
    returned at once (the job in `study.user_attrs[StudyKey.WORKERS_JOB]`); the trials come as they run."""
    from tianfeng.hpo.options import SearchInterrupted
    from tianfeng.hpo.running.runner import requeue_interrupted
    from tianfeng.terminal.interrupts import clear

    checked = (options or SearchOptions()).changed(**changes).checked()
    named: list[str] = []  # the study's name once the space has given it
    try:
        return _search(space, checked, named)
    except SearchInterrupted:
        raise
    except KeyboardInterrupt:
        clear()
        requeued = requeue_interrupted(checked.storage, named[0]) if named else None
        raise SearchInterrupted(named[0] if named else None, checked.storage, requeued) from None


def search_dry_run(space: str | Path, options: SearchOptions | None = None, **changes: Any) -> dict:
    """What `search` would run, checked as `search` checks before its first trial (the space,
    every option against it, the spec; with a launcher, each value of the batch script), touching
    neither the storage nor the scheduler: the study, its objective, rung, sampler, pruner,
    budget and workers, and with a launcher the job array's `script`."""
    from tianfeng.hpo.judge.pruning import judging
    from tianfeng.hpo.spec import resolve_search

    o = (options or SearchOptions()).changed(**changes).checked()
    spec, loaded = resolve_search(space, o)
    out = {"study": spec.study, "storage": o.storage, "space": str(spec.space_path),
           "objective": loaded.objective.mode, "metric": loaded.objective.metric, "fidelity": spec.rung,
           "sampler": spec.sampler, "pruner": judging(loaded, spec.rung, o.pruner).label, "trials": o.trials,
           "timeout_s": o.timeout_s, "workers": o.workers, "backend": o.backend, "launcher": o.launcher,
           "promote": spec.options.promote, "promotion_rule": spec.promotion_rule, "resume": o.resume}
    if o.launcher != "local":
        from tianfeng.hpo.running.submitted import array_script

        out["script"] = array_script(spec, int(o.workers), spec.runs_root.resolve() / spec.study / o.launcher,
                                     check_only=True)
    return out


def _search(space: str | Path, o: SearchOptions, named: list[str]) -> optuna.Study:
    import optuna

    from tianfeng.export import track_study
    from tianfeng.hpo.results.dashboard import publish_curves
    from tianfeng.hpo.running.runner import run_search
    from tianfeng.hpo.spec import resolve_search

    spec, loaded = resolve_search(space, o)  # the space, read once in this process
    named.append(spec.study)
    if o.launcher != "local":
        from tianfeng.hpo.running.study import open_study
        from tianfeng.hpo.running.submitted import check_workers_submission, submit_workers

        check_workers_submission(spec)  # before the study is created
        study = open_study(spec, loaded, resume=o.resume, heartbeat=False)
        try:
            submit_workers(spec, study)
        except BaseException:
            if not o.resume:  # sbatch refused what every check passed: the command can be run again as it was
                optuna.delete_study(study_name=spec.study, storage=spec.options.storage)
            raise
        return study
    if o.backend == "ray":
        from tianfeng.hpo.running.ray_backend import RayOptions, run_ray_search

        cpus = 1.0 if o.cpus_per_trial is None else o.cpus_per_trial
        run_ray_search(spec, RayOptions(address=o.ray_address, cpus_per_trial=cpus, gpus_per_trial=o.gpus_per_trial),
                       resume=o.resume)
    else:
        promotion = _leader_promotion(spec, loaded)
        study = run_search(spec, o.workers, resume=o.resume, space=loaded, progress=o.progress,
                           between_trials=promotion)
        if promotion is not None:
            promotion.finish(study)
    study = optuna.load_study(study_name=spec.study, storage=o.storage)
    publish_curves(study)  # for optuna-dashboard, when installed
    track_study(o.mlflow, o.wandb, study, o.storage)
    return study


def _leader_promotion(spec: SearchSpec, space: SearchSpace) -> LeaderPromotion | None:
    """`--promote leader` or `balanced`: the work between trials, or None."""
    if spec.options.promote == "none":
        return None
    from tianfeng.promotion.leaders import LeaderPromotion

    return LeaderPromotion(spec.options.storage, spec.study, spec.runs_root, space,
                           balanced=spec.options.promote == "balanced")


def search_options(args: argparse.Namespace) -> SearchOptions:
    """The command's flags as the API's `SearchOptions` (each field's flag generated from it)."""
    return options_from_flags(args, SearchOptions)


def command(args: argparse.Namespace) -> int:
    from tianfeng.terminal import interrupts

    try:
        return _search_command(args)
    except KeyboardInterrupt as cut:
        interrupts.clear()
        return _interrupted(args, cut)


def _interrupted(args: argparse.Namespace, cut: KeyboardInterrupt) -> int:
    # nothing is imported here: a Ctrl-C in the middle of an import leaves that module half made
    study_name, requeued = getattr(cut, "study", None), getattr(cut, "requeued", None)
    if requeued is None:
        named = f"study {study_name}" if study_name else "the study"
        print(f"tianfeng: interrupted before {named} was created; nothing was saved, run the same command again",
              file=sys.stderr)
        return 130
    again = f"; trial(s) {', '.join(map(str, requeued))} will continue from their checkpoints" if requeued else ""
    promoting = f" --promote {args.promote}" if args.promote not in ("none", "auto") else ""
    print(f"tianfeng: interrupted; finished trials are saved in {args.storage}{again}. Continue with:\n"
          f"  tianfeng search --space {args.space} --study {study_name} --storage {args.storage}{promoting} --resume",
          file=sys.stderr)
    return 130


def _search_command(args: argparse.Namespace) -> int:
    options = search_options(args).checked()  # flags first: they need nothing loaded, so a typo fails at once

    from tianfeng.hpo.results.summary import print_summary, summary_row
    from tianfeng.terminal.interrupts import raise_if_interrupted
    from tianfeng.verbs.report import report

    if options.dry_run:
        planned = search_dry_run(args.space, options)
        if args.json:
            print(json.dumps(planned, indent=2, default=str))
            return 0
        return _print_dry_run(planned)
    study = search(args.space, options)
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
        out["report"] = str(report(study.study_name, storage=args.storage))
        print(json.dumps(out, indent=2, default=str))
        return 0 if out["best"] is not None else 1
    code = print_summary(study, args.storage)
    print(f"report: {report(study.study_name, storage=args.storage)}")
    return code


def _print_dry_run(spec: dict) -> int:
    script = spec.pop("script", None)
    budget = f"{spec['trials']} trials" + (f" or {spec['timeout_s']:g} s" if spec["timeout_s"] else "")
    print(f"study {spec['study']} in {spec['storage']}{' (resumed)' if spec['resume'] else ''}: {spec['space']}, "
          f"objective {spec['objective']} ({spec['metric']}), rung {spec['fidelity']}, sampler {spec['sampler']}, "
          f"pruner {spec['pruner']}, {budget}, workers {spec['workers']} ({spec['backend']}, "
          f"launcher {spec['launcher']}), {spec['promotion_rule']}")
    if script:
        print(f"the job array's batch script:\n{script}", end="")
    print("dry run: nothing was started, created or submitted", file=sys.stderr)
    return 0


VERB = Verb(
    "search", "search a space with cheap proxy runs (Optuna)",
    "Search a space of large-batch recipes with cheap proxy runs, pruning losers early. Trials are stored in an "
    "Optuna study (SQLite by default); per-trial lines go to stderr, the summary and the promote command to stdout.",
    command,
    (("tianfeng search --space large_batch.yaml", "the shipped space, on the bundled digits"),
     ("tianfeng search --space large_batch.yaml --study lb2 --objective accuracy --trials 60 --workers 4",
      "another study, accuracy alone"),
     ("tianfeng search --space imagenet_resnet50 --data imagefolder:/data/imagenet --launcher slurm --workers 8 "
      "--gpus-per-trial 1 --partition gpu --time 4:00:00 --dry-run", "print the Slurm job array it would submit")),
    options=(SpaceFlag, SearchOptions), json=True, source="space", storage="creates")
