"""Bad input to every command, table-driven: each case is one line on stderr naming the file,
key or flag, exit 2 (bad input) or 1 (environment), no traceback, and nothing written where it
should not be. The commands run in this process (`tianfeng.cli.main`), as the console script does."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.search.conftest import TINY_SPACE
from tianfeng.cli import main

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))


def space_with(**changes) -> dict:
    """The tiny space with changes at dotted paths (`phases.stages=...`)."""
    space = copy.deepcopy(TINY_SPACE)
    for path, value in changes.items():
        node = space
        *parents, last = path.split("__")
        for part in parents:
            node = node[part]
        node[last] = value
    return space


# (id, files to write {name: text or bytes or dict for a YAML space}, argv with {tmp}, exit code,
#  what the one error line must contain)
FILES_SPACE = {"space.yaml": TINY_SPACE}
CASES = [
    # --- train: run config files -----------------------------------------------------------------
    ("train-missing-file", {}, ["train", "--config", "{tmp}/nope.yaml"], 2, "nope.yaml: cannot read"),
    ("train-empty-file", {"c.yaml": ""}, ["train", "--config", "{tmp}/c.yaml"], 2, "c.yaml: is empty"),
    ("train-binary-file", {"c.yaml": b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe"}, ["train", "--config", "{tmp}/c.yaml"],
     2, "c.yaml: is not a UTF-8 text file"),
    ("train-nul-bytes", {"c.yaml": "seed: 1\x00"}, ["train", "--config", "{tmp}/c.yaml"], 2, "not a text file"),
    ("train-alias-bomb", {"c.yaml": ALIAS_BOMB}, ["train", "--config", "{tmp}/c.yaml"], 2, "expands to more than"),
    ("train-huge-file", {"c.yaml": "# " + "x" * (1 << 20)}, ["train", "--config", "{tmp}/c.yaml"], 2, "larger than 1 MiB"),
    ("train-inf-lr", {"c.yaml": "optimizer: {lr: .inf}"}, ["train", "--config", "{tmp}/c.yaml"], 2,
     "optimizer.lr: must be a finite number"),
    ("train-nan-lr", {"c.yaml": "optimizer: {lr: .nan}"}, ["train", "--config", "{tmp}/c.yaml"], 2,
     "optimizer.lr: must be a finite number"),
    ("train-inf-loss-scale", {"c.yaml": "precision: {loss_scale_init: .inf}"}, ["train", "--config", "{tmp}/c.yaml"],
     2, "precision.loss_scale_init: must be a finite number"),
    ("train-nan-milestone", {"c.yaml": "schedule: {decay: step, step_milestones: [.nan]}"},
     ["train", "--config", "{tmp}/c.yaml"], 2, "schedule.step_milestones.0: must be a finite number"),
    ("train-shell-name", {"c.yaml": "name: $(touch PWNED)"}, ["train", "--config", "{tmp}/c.yaml"], 2,
     "name: must be letters, digits"),
    ("train-climbing-name", {"c.yaml": "name: ../../etc"}, ["train", "--config", "{tmp}/c.yaml"], 2, "name: must be"),
    ("train-long-name", {"c.yaml": f"name: {'n' * 200}"}, ["train", "--config", "{tmp}/c.yaml"], 2,
     "at most 128 characters"),
    ("train-huge-seed", {"c.yaml": "seed: 100000000000000000000000"}, ["train", "--config", "{tmp}/c.yaml"], 2,
     "seed: must be an integer (below 2**63)"),
    ("train-list-top", {"c.yaml": "- a\n- b"}, ["train", "--config", "{tmp}/c.yaml"], 2, "(top level): must be a mapping"),
    ("train-bad-yaml", {"c.yaml": "model: [1,\n"}, ["train", "--config", "{tmp}/c.yaml"], 2, "not valid YAML"),
    ("train-unknown-key", {"c.yaml": "modle: {}"}, ["train", "--config", "{tmp}/c.yaml"], 2, "modle: unknown key"),
    ("train-no-phases", {"c.yaml": "phases: []"}, ["train", "--config", "{tmp}/c.yaml"], 2, "phases: must list"),
    ("train-set-inf", {}, ["train", "--set", "optimizer.lr=.inf"], 2, "optimizer.lr: must be a finite number"),
    ("train-set-markup-name", {}, ["train", "--set", "name=[/red]"], 2, "name: must be"),
    ("train-set-alias-bomb", {}, ["train", "--set", "seed=" + ALIAS_BOMB], 2,
     "--set seed: expands to more than 100,000 values"),
    ("train-missing-data", {}, ["train", "--set", "data.source=imagefolder:/no/such/dir"], 2,
     "data.source: /no/such/dir: no such directory"),
    ("train-unwritable-run-dir", {}, ["train", "--set", "run_dir=/proc/tianfeng-run", "--set", "phases.0.epochs=1"],
     1, "cannot use /proc/tianfeng-run"),
    # --- search: space files and flags ------------------------------------------------------------
    ("search-missing-space", {}, ["search", "--space", "{tmp}/nope.yaml"], 2, "nope.yaml: cannot read"),
    ("search-binary-space", {"s.yaml": b"\xff\xd8\xff\xe0\x00\x10JFIF"}, ["search", "--space", "{tmp}/s.yaml"], 2,
     "s.yaml: is not a UTF-8 text file"),
    ("search-alias-bomb", {"s.yaml": ALIAS_BOMB}, ["search", "--space", "{tmp}/s.yaml"], 2, "expands to more than"),
    ("search-inf-high", {"s.yaml": space_with(parameters__base_lr__high=float("inf"))},
     ["search", "--space", "{tmp}/s.yaml"], 2, "parameters.base_lr.high: must be a finite number"),
    ("search-nan-low", {"s.yaml": space_with(parameters__base_lr__low=float("nan"))},
     ["search", "--space", "{tmp}/s.yaml"], 2, "parameters.base_lr.low: must be a finite number"),
    ("search-billion-stages", {"s.yaml": space_with(phases__stages="10**9")}, ["search", "--space", "{tmp}/s.yaml"],
     2, "phases.stages: must give a number in [1, 3]"),
    ("search-nan-resolution", {"s.yaml": space_with(phases__end_resolution="float('nan')")},
     ["search", "--space", "{tmp}/s.yaml"], 2, "not a finite number"),
    ("search-string-resolution", {"s.yaml": space_with(phases__end_resolution="'big'")},
     ["search", "--space", "{tmp}/s.yaml"], 2, "phases.end_resolution: must give a number"),
    ("search-inf-batch", {"s.yaml": space_with(phases__batch_size="1e308 * 10")}, ["search", "--space", "{tmp}/s.yaml"],
     2, "gives inf, not a finite number"),
    ("search-zero-division", {"s.yaml": space_with(phases__start_resolution="8 / 0")},
     ["search", "--space", "{tmp}/s.yaml"], 2, "division by zero"),
    ("search-nested-powers", {"s.yaml": space_with(phases__batch_size="((10**64)**64)**64")},
     ["search", "--space", "{tmp}/s.yaml"], 2, "is too large"),
    ("search-string-repetition", {"s.yaml": space_with(phases__batch_size="len('a' * 10**9)")},
     ["search", "--space", "{tmp}/s.yaml"], 2, "is not allowed"),
    ("search-string-bomb", {"s.yaml": space_with(phases__batch_size="'a' * 10**9")},
     ["search", "--space", "{tmp}/s.yaml"], 2, "intermediate string exceeds"),
    ("search-string-format", {"s.yaml": space_with(phases__batch_size="'%999999999d' % 1")},
     ["search", "--space", "{tmp}/s.yaml"], 2, "does not format strings"),
    ("search-deep-expression", {"s.yaml": space_with(phases__batch_size="-" * 5000 + "1")},
     ["search", "--space", "{tmp}/s.yaml"], 2, "longer than 1000 characters"),
    ("search-bad-space-name", {"s.yaml": space_with(name="../escape")}, ["search", "--space", "{tmp}/s.yaml"], 2,
     "name: must be letters"),
    ("search-climbing-study", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--study", "../../x"], 2,
     "--study: must be letters"),
    ("search-absolute-study", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--study", "{tmp}/abs"], 2,
     "--study: must be letters"),
    ("search-markup-study", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--study", "[/red]"], 2,
     "--study: must be"),
    ("search-long-study", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--study", "s" * 65], 2,
     "at most 64 characters"),
    ("search-url-not-url", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--storage", "sqlite:/x.db"], 2,
     "--storage: must be a SQLAlchemy database URL"),
    ("search-path-no-folder", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--storage",
                                            "{tmp}/no/such/x.db"], 2, "folder {tmp}/no/such does not exist"),
    ("search-url-no-folder", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--storage",
                                           "sqlite:///{tmp}/no/such/x.db"], 2, "folder {tmp}/no/such does not exist"),
    ("search-url-not-a-db", {**FILES_SPACE, "x.db": "just text\n"},
     ["search", "--space", "{tmp}/space.yaml", "--storage", "sqlite:///{tmp}/x.db"], 2, "is not a SQLite database"),
    ("search-url-directory", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--storage", "sqlite:///{tmp}"],
     2, "is a directory"),
    ("search-url-no-driver", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--storage",
                                           "mysql://u@127.0.0.1/db"], 2, "the driver for mysql is not installed"),
    ("search-url-unknown-kind", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--storage", "nosuchdb://x"],
     2, "unknown database kind"),
    ("search-url-cannot-create", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--storage",
                                               "sqlite:////proc/tianfeng.db"], 1,
     "database sqlite:////proc/tianfeng.db: unable to open database file"),
    ("search-zero-trials", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--trials", "0"], 2, "--trials: must be >= 1"),
    ("search-zero-workers", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--workers", "0"], 2,
     "--workers: must be auto or a number >= 1"),
    ("search-bad-timeout", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--timeout", "10x"], 2,
     "--timeout: must look like"),
    ("search-bad-fidelity", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--fidelity", "nope"], 2,
     "--fidelity: must be one of proxy, target"),
    ("search-missing-data", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--data", "imagefolder:/no/such"],
     2, "/no/such: no such directory"),
    ("search-unknown-data", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--data", "cifar"], 2,
     "data.source: must be digits, synthetic, imagefolder:DIR or package.module:function"),
    ("search-resume-nothing", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--resume", "--storage",
                                            "sqlite:///{tmp}/none.db"], 2, "no database at {tmp}/none.db"),
    ("search-zero-grace", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--grace-s", "0"], 2,
     "--grace-s: must be >= 1 second"),
    ("search-zero-failure-limit", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--failure-limit", "0"], 2,
     "--failure-limit: must be >= 1"),
    ("search-ray-workers", FILES_SPACE, ["search", "--space", "{tmp}/space.yaml", "--backend", "ray", "--workers", "2"],
     2, "--workers: is for the optuna backend"),
    # --- scale ------------------------------------------------------------------------------------
    ("scale-negative-tolerance", FILES_SPACE, ["scale", "--space", "{tmp}/space.yaml", "--batch-sizes", "64,128",
                                               "--tolerance", "-5"], 2, "--tolerance: must be a finite number >= 0"),
    ("scale-bad-batches", FILES_SPACE, ["scale", "--space", "{tmp}/space.yaml", "--batch-sizes", "64,a"], 2,
     "--batch-sizes: must be comma-separated integers"),
    ("scale-decreasing-batches", FILES_SPACE, ["scale", "--space", "{tmp}/space.yaml", "--batch-sizes", "128,64"], 2,
     "strictly increasing"),
    ("scale-bad-budget", FILES_SPACE, ["scale", "--space", "{tmp}/space.yaml", "--batch-sizes", "64,128",
                                       "--budget-per-batch", "5x"], 2, "--budget-per-batch: must be"),
    ("scale-climbing-name", FILES_SPACE, ["scale", "--space", "{tmp}/space.yaml", "--batch-sizes", "64,128",
                                          "--name", "../x"], 2, "--name: must be letters"),
    ("scale-negative-warm-start", FILES_SPACE, ["scale", "--space", "{tmp}/space.yaml", "--batch-sizes", "64,128",
                                                "--warm-start", "-1"], 2, "--warm-start: must be >= 0"),
    # --- promote, runs, calibrate, report, status: the study database --------------------------------
    ("promote-missing-db", {}, ["promote", "0", "--storage", "sqlite:///{tmp}/missing.db"], 2,
     "no database at {tmp}/missing.db"),
    ("promote-climbing-study", {}, ["promote", "0", "--study", "../x"], 2, "--study: must be"),
    ("promote-absolute-study", {}, ["promote", "0", "--study", "/etc"], 2, "--study: must be"),
    ("promote-no-such-trial", "STUDY", ["promote", "99", "--study", "tiny", "--storage", "{db}"], 2,
     "trial: 99: no such trial in study tiny"),
    ("promote-no-such-study", "STUDY", ["promote", "0", "--study", "other", "--storage", "{db}"], 2,
     "--study: other: no such study"),
    ("promote-bad-set", "STUDY", ["promote", "0", "--study", "tiny", "--storage", "{db}", "--set", "optimizer.lr=-1",
                                  "--dry-run"], 2, "optimizer.lr: must be > 0"),
    ("runs-bad-url", {}, ["runs", "--storage", "postgresql:/nohost"], 2, "--storage: must be a SQLAlchemy"),
    ("runs-mistyped-url", {}, ["runs", "--storage", "postgresql//nohost"], 2, "no database at postgresql/nohost"),
    ("runs-missing-db", {}, ["runs", "--storage", "sqlite:///{tmp}/missing.db"], 2, "no database at"),
    ("calibrate-negative-top-k", "STUDY", ["calibrate", "--storage", "{db}", "--top-k", "-1"], 2,
     "--top-k: must be >= 0"),
    ("calibrate-negative-random", "STUDY", ["calibrate", "--storage", "{db}", "--random", "-3"], 2,
     "--random: must be >= 0"),
    ("report-climbing-study", {}, ["report", "../../x"], 2, "STUDY: must be letters"),
    ("report-bad-url", {}, ["report", "--storage", "sqlite:/x"], 2,
     "--storage: must be a SQLAlchemy database URL such as sqlite:///tianfeng.db"),
    ("report-no-such-study", "STUDY", ["report", "nosuch", "--storage", "{db}"], 2,
     "STUDY: nosuch: no such study in"),
    ("report-unwritable", "STUDY", ["report", "tiny", "--storage", "{db}", "-o", "/proc/tianfeng/r.html"], 1,
     "cannot use /proc/tianfeng"),
    ("report-climbing-scale", {}, ["report", "--scale", "../x"], 2, "--scale: must be"),
    ("status-missing-db", {}, ["status", "--storage", "sqlite:///{tmp}/typo.db"], 2, "no database at {tmp}/typo.db"),
    ("status-no-such-study", "STUDY", ["status", "--study", "nope", "--storage", "{db}"], 2, "no such study"),
    # --- plan and launch ----------------------------------------------------------------------------
    ("plan-zero-throughput", {"c.yaml": "seed: 1"}, ["plan", "--config", "{tmp}/c.yaml", "--gpus", "8",
                                                     "--gpu-images-per-s", "0"], 2, "--gpu-images-per-s: must be > 0"),
    ("plan-negative-throughput", {"c.yaml": "seed: 1"}, ["plan", "--config", "{tmp}/c.yaml", "--gpus", "8",
                                                         "--gpu-images-per-s", "-5"], 2, "--gpu-images-per-s: must be > 0"),
    ("plan-nan-compute", {"c.yaml": "seed: 1"}, ["plan", "--config", "{tmp}/c.yaml", "--gpus", "8", "--compute-ms",
                                                 "nan"], 2, "--compute-ms: must be > 0"),
    ("plan-zero-link", {"c.yaml": "seed: 1"}, ["plan", "--config", "{tmp}/c.yaml", "--gpus", "8", "--inter-gbps", "0"],
     2, "--inter-gbps: must be > 0"),
    ("plan-overlap-5", {"c.yaml": "seed: 1"}, ["plan", "--config", "{tmp}/c.yaml", "--gpus", "8", "--overlap", "5"],
     2, "--overlap: must be between 0 and 1"),
    ("plan-negative-latency", {"c.yaml": "seed: 1"}, ["plan", "--config", "{tmp}/c.yaml", "--gpus", "8",
                                                      "--inter-latency-us", "-1"], 2, "--inter-latency-us: must be >= 0"),
    ("plan-zero-gpus", {"c.yaml": "seed: 1"}, ["plan", "--config", "{tmp}/c.yaml", "--gpus", "0"], 2, "--gpus: must be >= 1"),
    ("launch-zero-nodes", {"c.yaml": "seed: 1"}, ["launch", "--config", "{tmp}/c.yaml", "--nodes", "0",
                                                  "--gpus-per-node", "2", "--dry-run"], 2, "--nodes: must be >= 1"),
    ("launch-shell-name", {"c.yaml": "name: '$(touch {tmp}/PWNED)'"},
     ["launch", "--config", "{tmp}/c.yaml", "--nodes", "2", "--gpus-per-node", "2", "--dry-run"], 2, "name: must be"),
    ("launch-shell-master-addr", {"c.yaml": "seed: 1"},
     ["launch", "--config", "{tmp}/c.yaml", "--nodes", "2", "--gpus-per-node", "2", "--master-addr", "h;touch x",
      "--dry-run"], 2, "--master-addr: must be a host name"),
]


@pytest.fixture(scope="module")
def study_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real two-trial study of the tiny space, for the commands that read one."""
    root = tmp_path_factory.mktemp("bad-input-study")
    (root / "space.yaml").write_text(yaml.safe_dump(TINY_SPACE, sort_keys=False))
    db = f"sqlite:///{root / 'study.db'}"
    code = main(["search", "--space", str(root / "space.yaml"), "--storage", db, "--trials", "2",
                 "--runs-dir", str(root / "runs"), "--pruner", "none"])
    assert code == 0
    return db


@pytest.mark.parametrize(("files", "argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                               request: pytest.FixtureRequest, files, argv: list[str], code: int, expected: str) -> None:
    monkeypatch.chdir(tmp_path)  # nothing a failing command writes may land outside tmp_path
    db = request.getfixturevalue("study_db") if files == "STUDY" else ""
    for name, content in ({} if files == "STUDY" else files).items():
        path = tmp_path / name
        if isinstance(content, dict):
            path.write_text(yaml.safe_dump(content, sort_keys=False))
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content.replace("{tmp}", str(tmp_path)))
    before = set(tmp_path.rglob("*"))
    args = [a.replace("{tmp}", str(tmp_path)).replace("{db}", db) for a in argv]
    assert main(args) == code
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("tianfeng: error:")]
    assert len(errors) == 1, err
    assert "Traceback" not in err
    assert expected.replace("{tmp}", str(tmp_path)) in errors[0], err
    # a refused command created no database, run directory or report in the working directory
    assert set(tmp_path.rglob("*")) == before, sorted(set(tmp_path.rglob("*")) - before)
    assert not (tmp_path / "PWNED").exists()


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="must be a finite number"):
        main(["--debug", "train", "--set", "optimizer.lr=.inf"])


def test_a_config_refused_while_the_run_is_set_up_leaves_no_run_directory(tmp_path: Path, monkeypatch) -> None:
    """A model module that does not import is found only when the run builds its model: by then
    nothing may have been written, or the folder reads as a run that started."""
    from tests.conftest import make_config
    from tianfeng.core.errors import ConfigError
    from tianfeng.trainers.engine import train

    monkeypatch.chdir(tmp_path)
    cfg = make_config(tmp_path, model={"name": "nosuchmodule:build"})
    with pytest.raises(ConfigError, match="cannot import nosuchmodule"):
        train(cfg)
    assert not cfg.resolved_run_dir.exists()
