"""The command line: help, results on stdout, one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tianfeng.trainers.precision import cpu_has_bf16_hardware


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tianfeng.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize("command", [[], ["train"], ["search"], ["scale"], ["promote"], ["runs"], ["calibrate"],
                                     ["report"], ["launch"], ["plan"], ["status"]])
def test_help(command: list[str]) -> None:
    out = run(*command, "--help")
    assert out.returncode == 0 and out.stdout.startswith(f"usage: tianfeng {' '.join(command)}".rstrip())
    assert "--debug" in out.stdout if not command else "-h, --help" in out.stdout


@pytest.mark.parametrize(("yaml_text", "overrides", "expected"), [
    ("optimizer: {lars: {trust_coefficient: -1}}", [], "optimizer.lars.trust_coefficient: must be > 0, got -1"),
    ("phases: [{epochs: 1, resolution: 16, batch_size: 5000}]", [], "phases.0.batch_size: must be <= the training set size (1438 images), got 5000"),
    ("data: {source: 'imagefolder:/no/such/dir'}", [], "data.source: /no/such/dir: no such directory"),
    ("{}", ["precision.mode=fp8"], "precision.mode: must be one of auto, fp32, bf16, fp16; got 'fp8'"),
])
def test_bad_input_is_one_line_with_exit_2(tmp_path: Path, yaml_text: str, overrides: list[str],
                                           expected: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(yaml_text)
    sets = [a for o in overrides for a in ("--set", o)]
    out = run("train", "--config", str(config), "--set", f"run_dir={tmp_path / 'run'}", *sets)
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.startswith("tianfeng: error:")]
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert str(config) in lines[0] and expected in lines[0], out.stderr


def test_train_prints_json_result_and_writes_run_dir(tmp_path: Path) -> None:
    out = run("train", "--set", f"run_dir={tmp_path / 'run'}", "--set", "phases.0.epochs=1",
              "--set", "phases.0.resolution=8", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "completed" and result["final"]["epoch"] == 1
    expected = "bf16" if cpu_has_bf16_hardware() else "fp32"  # precision: auto, decided by the CPU
    assert f"precision {expected}" in out.stderr and "epoch 1/1" in out.stderr
    for name in ("config.yaml", "metrics.jsonl", "result.json", "checkpoints/last.pt"):
        assert (tmp_path / "run" / name).exists(), name


def test_a_refused_resume_leaves_the_run_untouched(tmp_path: Path) -> None:
    """Another config on an existing run is refused before its config.yaml (or anything) is rewritten."""
    run_dir = tmp_path / "run"
    out = run("train", "--set", f"run_dir={run_dir}", "--set", "phases.0.epochs=1", "--set", "phases.0.resolution=8")
    assert out.returncode == 0, out.stderr
    before = {p.name: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    out = run("train", "--set", f"run_dir={run_dir}", "--set", "phases.0.epochs=1", "--set", "phases.0.resolution=8",
              "--set", "optimizer.lr=0.02")
    assert out.returncode == 2 and "was written by a different run" in out.stderr, out.stderr
    assert {p.name: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_diverged_run_exits_nonzero(tmp_path: Path) -> None:
    out = run("train", "--set", f"run_dir={tmp_path / 'run'}", "--set", "optimizer.lr=1e12",
              "--set", "phases.0.resolution=8")
    assert out.returncode == 1 and "run diverged" in out.stderr
    assert out.stdout.startswith("diverged (") and f"run dir: {tmp_path / 'run'}" in out.stdout  # for a person


def test_a_reader_that_stops_early_ends_the_output_quietly(tmp_path: Path) -> None:
    """`status --json | head -1`: the JSON is far larger than a pipe holds, `head` leaves after
    one line; tianfeng stops without a word, as `ls | head` does."""
    import optuna

    db = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="s", storage=db)
    dist = optuna.distributions.FloatDistribution(0.0, 1.0)
    for i in range(400):
        study.add_trial(optuna.trial.create_trial(params={"x": i / 400}, distributions={"x": dist}, value=float(i)))
    out = subprocess.run(f"{sys.executable} -m tianfeng.cli status --study s --storage {db} --json | head -1",
                         shell=True, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.stdout == "[\n"
    assert out.stderr == "", out.stderr


def test_storage_takes_a_plain_path_to_a_sqlite_file(tmp_path: Path) -> None:
    import optuna

    optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'study.db'}").add_trial(
        optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    for given in (str(tmp_path / "study.db"), "study.db"):  # absolute, and relative to the working folder
        out = run("status", "--study", "s", "--storage", given, "--json", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)[0]["state"] == "completed"


@pytest.mark.parametrize(("argv", "usage", "hint"), [
    (["serch"], "usage: tianfeng [-h]", "did you mean search?"),
    (["status", "--jsn"], "usage: tianfeng status", "did you mean --json?"),
    (["search", "--space", "x.yaml", "--sampler", "tpee"], "usage: tianfeng search", "did you mean tpe?"),
])
def test_a_mistyped_command_flag_or_choice_gets_its_usage_and_a_suggestion(argv, usage, hint) -> None:
    out = run(*argv)
    assert out.returncode == 2
    assert out.stderr.startswith(usage) and out.stderr.strip().endswith(hint), out.stderr


def test_report_export_and_dashboard_take_study_as_every_command_does(tmp_path, capsys) -> None:
    """`--study` everywhere; the old positional form still works, with a deprecation line."""
    import optuna

    from tianfeng.cli import main

    db = f"sqlite:///{tmp_path / 's.db'}"
    optuna.create_study(study_name="a", storage=db).enqueue_trial({})
    optuna.create_study(study_name="b", storage=db)
    assert main(["export", "--study", "a", "--storage", db, "--format", "json"]) == 0
    out = capsys.readouterr()
    assert '"number":0' in out.out and "deprecated" not in out.err
    assert main(["export", "a", "--storage", db, "--format", "json"]) == 0
    out = capsys.readouterr()
    assert '"number":0' in out.out
    assert "deprecated" in out.err and "tianfeng export --study a" in out.err
    assert main(["export", "a", "--study", "b", "--storage", db]) == 2
    assert "--study: b: and STUDY a name two studies" in capsys.readouterr().err
    assert main(["report", "--study", "nosuch", "--storage", db]) == 2
    assert "--study: nosuch" in capsys.readouterr().err


def test_every_command_shows_examples_that_parse_as_written(capsys) -> None:
    import shlex

    from tianfeng.cli import build_parser
    from tianfeng.verbs import all_verbs

    parser = build_parser()
    assert set(all_verbs()) == set(parser.commands)
    for verb in all_verbs().values():
        assert len(verb.examples) >= 2, verb.name
        assert "examples:\n  " in parser.commands[verb.name].format_help(), verb.name
        for command, _ in verb.examples:
            words = shlex.split(command.split(" > ")[0])
            if words[0] == "tianfeng":
                parser.parse_args(words[1:])  # an unknown flag or choice exits here
            else:
                assert words[:4] == ["torchrun", "--nproc-per-node", "8", "-m"], command


def test_search_help_lists_its_flags_in_sections() -> None:
    from tianfeng.cli import build_parser

    text = build_parser().commands["search"].format_help()
    sections = ("what to search:", "where trials run:", "the target cluster", "storage and tracking:",
                "scheduler (with --launcher slurm or ray):")
    assert all(s in text for s in sections)
    scheduler = text.split("scheduler (with --launcher slurm or ray):")[1].split("examples:")[0]
    assert "--partition" in scheduler and "--array-throttle" in scheduler and "--trials" not in scheduler


def test_each_verb_is_one_module_and_the_parser_holds_no_flag_of_its_own() -> None:
    """A verb's flags come from its module's typed options, and only positionals are written by
    hand; the command line's own code adds only --debug and branches on no command's name."""
    import ast

    from tianfeng import verbs

    folder = Path(verbs.__file__).parent
    modules = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")}
    assert modules == set(verbs.NAMES)
    for module in folder.glob("*.py"):
        written = [ast.unparse(node.args[0]) for node in ast.walk(ast.parse(module.read_text()))
                   if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"]
        assert not [w for w in written if w.strip("'\"").startswith("-")] or module.stem == "_flags", (module, written)
    tree = ast.parse((Path(verbs.__file__).parents[1] / "cli.py").read_text())
    flags = [node.args[0].value for node in ast.walk(tree) if isinstance(node, ast.Call)
             and getattr(node.func, "attr", "") == "add_argument"]
    assert flags == ["--debug"]
    compared = [node for node in ast.walk(tree) if isinstance(node, ast.Compare)
                and "args.command" in ast.unparse(node)]
    assert not compared, [ast.unparse(c) for c in compared]


def test_building_the_parser_loads_neither_torch_nor_optuna() -> None:
    """`--help` and a mistyped flag answer at once: a verb module imports what its functions
    need inside them. A module-level `import optuna` in any verb fails here."""
    code = ("import sys; from tianfeng.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('torch', 'optuna', 'sqlalchemy', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_api_gathers_the_verbs_functions_and_defines_none() -> None:
    """Each API function lives in its verb's module beside the command that prints it."""
    import ast

    import tianfeng.api

    tree = ast.parse(Path(tianfeng.api.__file__).read_text())
    assert not [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
    homes = {name: getattr(tianfeng.api, name).__module__ for name in tianfeng.api.__all__}
    assert all(m.startswith("tianfeng.verbs.") for n, m in homes.items() if n not in ("SearchOptions",
                                                                                        "SearchInterrupted",
                                                                                        "ConfigError")), homes
    assert homes["search"] == "tianfeng.verbs.search" and homes["runs"] == "tianfeng.verbs.runs"
