"""A search's options as one object: every flag of `tianfeng search` is a field, every check in
one place, the space read once by the process that runs the search, and Ctrl-C from Python as
an exception that says what was saved."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

import tianfeng
from tests.search.conftest import write_space
from tianfeng.cli import build_parser
from tianfeng.core.errors import ConfigError
from tianfeng.hpo.options import SearchInterrupted, SearchOptions
from tianfeng.verbs.search import search_options


def test_every_flag_of_search_is_generated_from_an_option_with_its_default() -> None:
    """The flags come from the fields: parsing no flag gives the options' own defaults (a default
    restated by hand, or a field without its flag, fails here), and each flag lands in its field."""
    from tianfeng.options import flag_of

    parser = build_parser().commands["search"]
    options = search_options(parser.parse_args(["--space", "s.yaml"]))
    assert options == dataclasses.replace(SearchOptions(), runs_dir=Path("runs"))
    flags = {a.dest for a in parser._actions} - {"help", "space", "json"}  # --json: the printing's
    assert flags == {f.name for f in dataclasses.fields(SearchOptions) if flag_of(f)}
    assert flags == {f.name for f in dataclasses.fields(SearchOptions)} - {"progress", "signal_s"}
    changed = search_options(parser.parse_args(["--space", "s.yaml", "--timeout", "10m", "--backend", "ray",
                                                "--address", "auto", "--trials", "7", "--failure-limit", "5"]))
    assert (changed.timeout_s, changed.ray_address, changed.trials, changed.failure_limit) == (600.0, "auto", 7, 5)
    assert "(default 30)" in " ".join(parser.format_help().split())


@pytest.mark.parametrize(("changes", "message"), [
    ({"trials": 0}, "--trials: must be >= 1, got 0"),
    ({"workers": "two"}, "--workers: must be auto or a number >= 1"),
    ({"failure_limit": 0}, "--failure-limit: must be >= 1"),
    ({"grace_s": 10}, "--grace-s: must be longer than the heartbeat interval (10 s)"),
    ({"backend": "ray", "workers": 2}, "--workers: is for the optuna backend"),
    ({"cpus_per_trial": 2.0}, "--backend: --cpus-per-trial needs --backend ray or --launcher slurm"),
    ({"gpus_per_trial": 0.5}, "--gpus-per-trial: with the optuna backend: the DDP ranks of each trial, an integer"),
    ({"objective": "fastest"}, "--objective: must be one of accuracy, pareto, time-to-target"),
    ({"sampler": "bayes"}, "--sampler: must be one of tpe, cmaes"),
    ({"target": float("nan")}, "--target: must be a finite number"),
    ({"min_accuracy": 100.0}, "--min-accuracy: must be a percentage in [0, 100)"),
    ({"timeout_s": -1.0}, "--timeout: must be a positive duration"),
    ({"ray_address": "auto"}, "--backend: --address needs --backend ray"),
    ({"launcher": "slurm"}, "--workers: with --launcher slurm: give the job array's tasks"),
    ({"launcher": "ray", "workers": 2}, "--launcher: ray is for promote; a search on a Ray cluster is --backend ray"),
    ({"launcher": "slurm", "workers": 2, "promote": "leader"}, "--launcher: slurm submits optuna workers"),
    ({"partition": "gpu"}, "--partition: goes with --launcher slurm"),
    ({"launcher": "pbs"}, "--launcher: must be one of local, slurm"),
])
def test_each_option_is_checked_in_one_place(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        SearchOptions().changed(**changes).checked()


def test_the_workers_command_gives_the_resolved_search_again(tmp_path: Path) -> None:
    """Each Slurm task runs `tianfeng search` with the flags that rebuild this search as resolved
    here (study, rung, sampler, floor), joining the study with paths that hold on any node; a
    flag dropped or a default taken for a change fails here."""
    from tianfeng.hpo.running.submitted import array_script, worker_options
    from tianfeng.hpo.spec import SearchSpec

    spec = SearchSpec.of(tmp_path / "s.yaml", study="s", rung="proxy", sampler="random", floor=41.5, trials=9,
                         launcher="slurm", workers=3, time="1:00:00", seed=4, timeout_s=600.0,
                         runs_dir="runs", cpus_per_trial=1.5, objective="pareto")
    parser = build_parser().commands["search"]
    script = array_script(spec, 3, tmp_path / "logs")
    command = next(line for line in script.splitlines() if " -m tianfeng.cli search " in line)
    import shlex

    argv = shlex.split(command.removesuffix(" &"))
    rebuilt = search_options(parser.parse_args(argv[argv.index("search") + 1:])).checked()
    assert rebuilt == dataclasses.replace(worker_options(spec), runs_dir=Path(worker_options(spec).runs_dir)).checked()
    assert (rebuilt.study, rebuilt.fidelity, rebuilt.sampler, rebuilt.min_accuracy, rebuilt.trials, rebuilt.seed,
            rebuilt.timeout_s, rebuilt.objective, rebuilt.workers, rebuilt.resume, rebuilt.launcher) == (
        "s", "proxy", "random", 41.5, 9, 4, 600.0, "pareto", 1, True, "local")
    assert Path(rebuilt.runs_dir).is_absolute() and Path(argv[argv.index("--space") + 1]).is_absolute()
    for line in ("#SBATCH --array=0-2", "#SBATCH --cpus-per-task=2", "#SBATCH --requeue", "#SBATCH --time=1:00:00",
                 "#SBATCH --signal=B:USR1@120", f"#SBATCH --output={tmp_path / 'logs'}/slurm-%A_%a.out"):
        assert line in script.splitlines(), line


def test_a_mistyped_option_names_the_closest_one() -> None:
    with pytest.raises(ConfigError, match="trails: unknown option; did you mean trials"):
        tianfeng.search("large_batch.yaml", trails=3)
    assert SearchOptions().changed(workers="3").checked().workers == 3


def test_the_space_is_read_once_by_a_search_in_one_process(tmp_path: Path, tiny_space: dict,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import tianfeng.hpo.space.read as space_module

    space_file = write_space(tmp_path, tiny_space)
    reads: list[str] = []
    read = space_module.read_yaml
    monkeypatch.setattr(space_module, "read_yaml", lambda path, *a, **k: reads.append(str(path)) or read(path, *a, **k))
    monkeypatch.chdir(tmp_path)
    study = tianfeng.search(space_file, storage=f"sqlite:///{tmp_path / 's.db'}", trials=2, workers=1,
                            sampler="random", pruner="none", progress=False)
    assert len(study.get_trials()) == 2
    assert reads.count(str(space_file)) == 1, reads


def test_ctrl_c_in_a_python_search_raises_with_the_study_and_the_trials_queued_again(
        tmp_path: Path, tiny_space: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    import tianfeng.hpo.running.objective as objective_module

    def cut(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(objective_module, "build_config", cut)
    monkeypatch.chdir(tmp_path)
    storage = f"sqlite:///{tmp_path / 'c.db'}"
    with pytest.raises(SearchInterrupted) as caught:
        tianfeng.search(write_space(tmp_path, tiny_space), study="c", storage=storage, trials=2, workers=1,
                        sampler="random", pruner="none", progress=False)
    assert caught.value.study == "c" and caught.value.storage == storage and caught.value.requeued == [0]
    trials = optuna.load_study(study_name="c", storage=storage).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
