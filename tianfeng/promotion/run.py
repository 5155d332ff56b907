"""Promotion: run a trial's recipe at full scale, recorded beside the study; promoting the same
trial with the same config again resumes that run."""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState
from rich.console import Console

from tianfeng.core.epoch_metrics import EpochMetrics
from tianfeng.core.errors import ConfigError, LaunchError
from tianfeng.core.names import STUDY_MAX_LENGTH, check_name
from tianfeng.core.ports import free_port
from tianfeng.core.run_config import RunConfig, config_to_dict, with_changes
from tianfeng.hpo.judge.scores import best_trial, score
from tianfeng.hpo.running.objective import objective_value, predict_config
from tianfeng.hpo.space.read import SearchSpace, parse_space
from tianfeng.hpo.space.stored import space_text
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.launch.job_options import SIGNAL_S, SchedulerOptions
from tianfeng.launch.launchers import scheduler
from tianfeng.launch.local import run_here
from tianfeng.launch.scripts import LaunchPlan, check_fits, write_plan
from tianfeng.launch.slurm import sbatch_directives, slurm_time, time_limit_s
from tianfeng.promotion.jobs import live_job, refresh_jobs, submit_run
from tianfeng.promotion.options import PromoteOptions
from tianfeng.promotion.run_lock import refuse_if_trained, training_lock
from tianfeng.promotion.transfer import Change, transfer
from tianfeng.storage.ownership import check_folder, claim_folder, study_owner
from tianfeng.storage.runs import RunRecordStatus, RunStore
from tianfeng.storage.study_attrs import StudyKey
from tianfeng.terminal.logs import quiet_optuna
from tianfeng.terminal.run_progress import RunProgress
from tianfeng.terminal.tables import add_plain_row, plain_table, table_console
from tianfeng.trainers.engine import train

log = logging.getLogger("tianfeng.promote")


def load_study(storage: str, study_name: str | None, flag: str = "--study") -> optuna.Study:
    quiet_optuna()
    names = optuna.get_all_study_names(storage)
    if study_name is None:
        if len(names) != 1:
            raise ConfigError(flag, "", f"name the study; {storage} holds: {', '.join(names) or 'none'}")
        study_name = names[0]
    if study_name not in names:
        raise ConfigError(flag, study_name, f"no such study in {storage}; it holds: {', '.join(names) or 'none'}")
    check_name(study_name, flag, "", max_length=STUDY_MAX_LENGTH)  # it becomes paths below runs/, reports/
    return optuna.load_study(study_name=study_name, storage=storage)


def study_space(study: optuna.Study) -> SearchSpace:
    attrs = study.user_attrs
    text = space_text(study)
    if text is None:
        raise ConfigError("--study", study.study_name, "was not created by tianfeng search (no space stored)")
    space = parse_space(text, attrs.get(StudyKey.SPACE_PATH, study.study_name), data=attrs.get(StudyKey.DATA),
                        gpus=attrs.get(StudyKey.GPUS), gpus_per_node=attrs.get(StudyKey.GPUS_PER_NODE),
                        profile=attrs.get(StudyKey.PROFILE),
                        stored_format=attrs.get(StudyKey.SPACE_FORMAT, 1), corners=False)
    from tianfeng.hpo.spec import with_objective

    return with_objective(space, attrs.get(StudyKey.OBJECTIVE_MODE), attrs.get(StudyKey.TARGET), attrs.get(StudyKey.MIN_ACCURACY))


def complete_trial(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    if number not in trials:
        raise ConfigError("trial", str(number), f"no such trial in study {study.study_name} "
                          f"(trials 0 to {max(trials, default=-1)})")
    trial = trials[number]
    if trial.state != TrialState.COMPLETE:
        top = best_trial(study)
        best = f" (the best is #{top.number})" if top else ""
        raise ConfigError("trial", str(number), f"is {trial.state.name.lower()}: promote a complete trial{best}")
    return trial


def config_hash(cfg: RunConfig) -> str:
    raw = config_to_dict(cfg)
    raw.pop("name")
    raw.pop("run_dir")
    return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:8]


def print_changes(changes: list[Change], console: Console) -> None:
    table = plain_table("proxy -> full transfer", ("key", "proxy", "full", "rule"))
    for c in changes:
        add_plain_row(table, c.key, str(c.proxy), str(c.full), c.rule)
    console.print(table)


@dataclass(frozen=True)
class Launch:
    """Where a promoted run goes: N nodes x G devices through a launch plan, run here (`local`)
    or submitted to a scheduler (`slurm`, `ray`) with its options."""
    nodes: int
    per_node: int
    device: str = "cuda"  # cpu: the plan runs here, as emulated nodes of gloo processes
    master_addr: str = "127.0.0.1"
    options: SchedulerOptions = SchedulerOptions()  # the launcher (local, slurm, ray) and the job's options
    max_restarts: int = 3  # torchrun's, for a submitted or elastic run
    min_nodes: int = 0  # elastic: torchrun --nnodes MIN:MAX; 0: exactly `nodes`
    requeue_at_limit: bool = False  # a Slurm time limit below the predicted run is meant: it trains in pieces

    @property
    def launcher(self) -> str:
        return self.options.launcher

    @property
    def submitted(self) -> bool:
        return self.launcher != "local"


def promote(o: PromoteOptions, trial_number: int, *, kind: str = "promote", launch: Launch | None = None) -> dict:
    """Train trial `trial_number`'s recipe at full fidelity as `o` says (its study, storage, batch,
    overrides, runs folder, dry run), here or through `launch`; returns the run's record."""
    storage, batch_size, overrides, dry_run = o.storage, o.batch_size, list(o.overrides), o.dry_run
    runs_dir = Path(o.runs_dir)
    study = load_study(storage, o.study)
    folder, owner = runs_dir / study.study_name, study_owner(study, storage)
    check_folder(folder, owner)  # the study's own folder: another study's of the same name is refused
    space = study_space(study)
    trial = complete_trial(study, trial_number)
    values = trial.user_attrs.get(TrialKey.VALUES) or trial.params
    proxy_rung = trial.user_attrs.get(TrialKey.FIDELITY, space.search_fidelity)
    full, changes = transfer(space, values, proxy_rung, batch_size=batch_size, overrides=overrides)
    # a run on another world is another run: its own directory, checkpoints and record
    digest = config_hash(full) + (f"-{launch.nodes}x{launch.per_node}" if launch else "")
    store = None if dry_run else RunStore(storage)
    # the same trial and config promoted before (by promote or calibrate) is that run: its
    # directory, its checkpoints, its record
    existing = store.find(study=study.study_name, trial_number=trial_number, config_hash=digest) if store else None
    run_dir = Path(existing["run_dir"]) if existing else folder / f"{kind}-trial-{trial_number}-{digest}"
    if not dry_run and launch is not None and launch.submitted:  # every scheduler check before anything is written
        scheduler(launch.launcher, launch.options.jobs_address).check(launch.options)
        if launch.launcher == "slurm":
            sbatch_directives(launch.options, (run_dir / "launch").resolve())
            _refuse_if_short(full, space, launch)
    if not dry_run:
        claim_folder(folder, owner)
    full = with_changes(full, name=f"{study.study_name}-{kind}-{trial_number}", run_dir=str(run_dir))
    if existing and not dry_run and existing["status"] == RunRecordStatus.SUBMITTED:
        live = live_job(store, existing["id"])
        if live is not None:  # its job trains it: left as it is, to be collected when the job ends
            job, state = live
            log.info("run %d is job %s of %s (%s): not submitted again; `tianfeng runs` collects it when it ends",
                     existing["id"], job["job_id"], job["launcher"], state.state)
            return {"run": existing["id"], "study": study.study_name, "trial": trial_number, "resumed": True,
                    "run_dir": str(run_dir), "proxy_score": score(trial), "status": RunRecordStatus.SUBMITTED,
                    "launcher": job["launcher"], "job": job["job_id"], "job_state": state.state,
                    "launch": str(run_dir / "launch")}
    if not dry_run:
        refuse_if_trained(run_dir, trial_number, study.study_name)
    print_changes(changes, table_console(stderr=True))
    config_yaml = yaml.safe_dump(config_to_dict(full), sort_keys=False)
    plan = _write_launch_plan(full, config_yaml, launch, run_dir) if launch else None
    if dry_run:
        return {"dry_run": True, "study": study.study_name, "trial": trial_number, "run_dir": str(run_dir),
                "config": config_to_dict(full), "launch": plan and str(run_dir / "launch")}
    metric = study.user_attrs.get(StudyKey.METRIC, "val_top1")
    if existing and existing["status"] in (RunRecordStatus.COMPLETED, RunRecordStatus.DIVERGED) and launch is None:
        log.info("trial %d of %s was promoted with this config before (run %d, %s): reusing it, nothing "
                 "trained", trial_number, study.study_name, existing["id"], existing["status"])
        return {"run": existing["id"], "study": study.study_name, "trial": trial_number, "resumed": True,
                "reused": True, "run_dir": str(run_dir), "proxy_score": score(trial),
                "status": existing["status"], f"full_{metric}": existing["final_score"]}
    with training_lock(run_dir, trial_number, study.study_name):  # one process trains a run
        run_id, resumed = store.open_run(study=study.study_name, trial_number=trial_number, config_hash=digest,
                                         kind=kind, run_dir=str(run_dir), config_yaml=config_yaml,
                                         proxy_score=score(trial))
        log.info("%s trial %d of %s as run %d in %s", "resuming" if resumed else "promoting",
                 trial_number, study.study_name, run_id, run_dir)
        epochs: list[dict] = []

        def record(m: EpochMetrics) -> None:
            epochs.append(asdict(m))
            store.update(run_id, epochs=epochs_so_far + epochs)
            bar.epoch(m.epoch, getattr(m, metric, None))

        epochs_so_far = store.runs(study.study_name)
        epochs_so_far = next(r["epochs"] for r in epochs_so_far if r["id"] == run_id)
        out = {"run": run_id, "study": study.study_name, "trial": trial_number, "resumed": resumed,
               "run_dir": str(run_dir), "proxy_score": score(trial)}
        if trial.user_attrs.get(TrialKey.PREDICTED):
            out["predicted_full_run"] = trial.user_attrs[TrialKey.PREDICTED]
        if plan is not None:
            return out | _run_plan(plan, launch, run_dir, store, run_id, space)
        try:
            with RunProgress(f"trial {trial_number} at full scale", full.total_epochs, metric) as bar:
                result = train(full, record)
        except KeyboardInterrupt:
            store.update(run_id, status=RunRecordStatus.INTERRUPTED)
            raise
        except BaseException:
            store.update(run_id, status=RunRecordStatus.FAILED)
            raise
        final = full_score(space, [asdict(m) for m in result.epochs])
        store.update(run_id, status=result.status, final_score=final, epochs=[asdict(m) for m in result.epochs],
                     checkpoint=str(full.resolved_checkpoint_dir / "last.pt"))
        return out | {"status": result.status, f"full_{metric}": final}


def _write_launch_plan(full: RunConfig, config_yaml: str, launch: Launch, run_dir: Path) -> LaunchPlan:
    check_fits(full, launch.nodes, launch.per_node, "promoted config", launch.min_nodes)
    launch_dir = run_dir / "launch"
    launch_dir.mkdir(parents=True, exist_ok=True)
    (launch_dir / "config.yaml").write_text(config_yaml)
    local = launch.device == "cpu" and launch.master_addr == "127.0.0.1" and not launch.submitted
    plan = LaunchPlan(config_path=str((launch_dir / "config.yaml").resolve()), run_name=full.name,
                      nodes=launch.nodes, per_node=launch.per_node, device=launch.device,
                      master_addr=launch.master_addr, port=free_port() if local or launch.submitted else 29500,
                      max_restarts=launch.max_restarts if launch.submitted or launch.min_nodes else 0,
                      min_nodes=launch.min_nodes)
    directives = tuple(sbatch_directives(launch.options, launch_dir.resolve())) if launch.launcher == "slurm" else ()
    for path in write_plan(plan, launch_dir, directives):
        log.info("launch plan: %s", path)
    return plan


def _refuse_if_short(full: RunConfig, space: SearchSpace, launch: Launch) -> None:
    """A Slurm time limit below this run's own predicted time (its config, on the space's cluster
    at the launch's world) would end the job at its limit and requeue it, again and again: refused
    unless --requeue-at-limit says so. A CPU run (`--device cpu`) has no prediction to check."""
    if not launch.options.time or launch.requeue_at_limit or launch.device == "cpu":
        return
    cluster = replace(space.cluster, gpus=launch.nodes * launch.per_node, gpus_per_node=launch.per_node)
    seconds = predict_config(full, cluster, space, memory=False).seconds  # the world's own checks come later
    limit = time_limit_s(launch.options.time)
    if limit < seconds:
        raise LaunchError(
            f"--time: {launch.options.time} ({limit} s) is shorter than this run's predicted {seconds:.0f} s on "
            f"{launch.nodes} x {launch.per_node} {cluster.device}: the job would reach its limit and be requeued; "
            f"give at least {slurm_time(seconds + SIGNAL_S)}, or --requeue-at-limit to train it in pieces")


def full_score(space: SearchSpace, epochs: list[dict]) -> float | None:
    """The full run's score by the same statistic as the trial's proxy score (`objective.at`:
    final or best epoch), so calibration compares like with like."""
    values = [e[space.objective.metric] for e in epochs if e.get(space.objective.metric) is not None]
    return objective_value(space, values) if values else None


def _run_plan(plan: LaunchPlan, launch: Launch, run_dir: Path, store: RunStore, run_id: int,
              space: SearchSpace) -> dict:
    """Run the plan here (CPU, one machine) or leave it for the cluster; a run whose result is
    already in its directory (the cluster finished it) is collected instead."""
    if launch.submitted and not (run_dir / "result.json").exists():
        return submit_run(launch, run_dir, store, run_id)
    if not (run_dir / "result.json").exists():
        if launch.device != "cpu" or launch.master_addr != "127.0.0.1":
            store.update(run_id, status=RunRecordStatus.PLANNED)
            print(f"tianfeng: launch plan in {run_dir / 'launch'}: run node-<i>.sh on each node or "
                  f"`sbatch {run_dir / 'launch' / 'sbatch.sh'}`; promote again to collect the result",
                  file=sys.stderr)
            return {"status": RunRecordStatus.PLANNED, "launch": str(run_dir / "launch")}
        log.info("running the plan here: %d emulated nodes x %d gloo processes", plan.nodes, plan.per_node)
        if run_here(plan) != 0:
            store.update(run_id, status=RunRecordStatus.FAILED)
            return {"status": RunRecordStatus.FAILED, f"full_{space.objective.metric}": None}
    return _collect(run_dir, store, run_id, space)


def _collect(run_dir: Path, store: RunStore, run_id: int, space: SearchSpace) -> dict:
    metric = space.objective.metric
    result = json.loads((run_dir / "result.json").read_text())
    metrics = run_dir / "metrics.jsonl"
    epochs = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    final = full_score(space, epochs)
    store.update(run_id, status=result["status"], final_score=final, epochs=epochs,
                 checkpoint=str(run_dir / "checkpoints" / "last.pt"))
    return {"status": result["status"], f"full_{metric}": final, "launch": str(run_dir / "launch")}


def refresh_submitted(storage: str, study: str | None = None) -> None:
    """Bring the scheduler's view of submitted runs into the study database: finished runs are
    collected with their epochs and full-fidelity score, as a run trained here is."""
    store = RunStore(storage)

    def collect(run: dict) -> None:
        _collect(Path(run["run_dir"]), store, run["id"], study_space(load_study(storage, run["study"])))

    refresh_jobs(store, collect, study)
