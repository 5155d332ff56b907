"""Every `tianfeng` command in the fenced shell blocks of the README, the tutorial and the how-to
pages parses as written with the real command line (an unknown flag, a retired choice or a
missing command fails here), and each `--space` it names is a file or a shipped space. Each
`search` is resolved as the command resolves it before its first trial (the space read, its options
checked against it, the study's spec built), on the bundled digits where the page names a data
folder this machine lacks: a combination the search refuses fails here. Synopsis lines (with
`[optional]` parts) are left out: they are not commands to paste."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

import pytest
from doc_commands import commands  # noqa: E402

from tianfeng.cli import build_parser
from tianfeng.core.errors import ConfigError
from tianfeng.hpo.space.shipped import resolve_space
from tianfeng.hpo.spec import resolve_search
from tianfeng.verbs.search import search_options

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "docs" / "tutorial.md", *sorted((REPO / "docs" / "how-to").glob("*.md"))]


DOCUMENTED = [(page.relative_to(REPO).as_posix(), cmd) for page in PAGES for cmd in commands(page.read_text())]


def test_the_pages_hold_the_commands_a_user_pastes() -> None:
    shown = {cmd.split()[0] for _, cmd in DOCUMENTED}
    assert {"search", "promote", "status", "runs", "launch", "calibrate"} <= shown, shown
    assert len(DOCUMENTED) >= 25


def test_a_retired_flag_in_a_page_would_be_refused() -> None:
    page = "```bash\ntianfeng search --space large_batch.yaml --no-such-flag\n```\n"
    (cmd,) = commands(page)
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        build_parser().parse_args(shlex.split(cmd))


@pytest.mark.parametrize(("page", "cmd"), DOCUMENTED, ids=[f"{p}: {c[:60]}" for p, c in DOCUMENTED])
def test_every_documented_command_parses_as_written(page: str, cmd: str) -> None:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = build_parser().parse_args(shlex.split(cmd))
    except SystemExit:
        pytest.fail(f"{page}: `tianfeng {cmd}` is refused: {err.getvalue().strip().splitlines()[-1]}")
    if getattr(args, "space", None):
        assert resolve_space(args.space).is_file(), (page, args.space)


def _planned(cmd: str, here: Path) -> None:
    """What `tianfeng search` checks before its first trial, run in the folder `here` (the
    caller's cwd, so that no study or report of the checkout's own takes part); raises
    ConfigError where it refuses. A space path of the checkout is read from the checkout."""
    cmd = re.sub(r"--data imagefolder:\S+", "--data digits", cmd)
    cmd = re.sub(r"--storage postgresql://\S+", f"--storage sqlite:///{here / 'docs-commands.db'}", cmd)  # no server here
    args = build_parser().parse_args(shlex.split(cmd))
    if not Path(args.space).is_absolute() and (REPO / args.space).exists():
        args.space = str(REPO / args.space)
    resolve_search(args.space, search_options(args).checked())


def test_a_refused_combination_in_a_page_would_fail_the_planning(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="--promote: leader: needs one best trial"):
        _planned("search --space large_batch.yaml --fidelity proxy --promote leader", tmp_path)  # a pareto space


SEARCHES = [(page, cmd) for page, cmd in DOCUMENTED if cmd.split()[0] == "search"]


@pytest.mark.parametrize(("page", "cmd"), SEARCHES, ids=[f"{p}: {c[:60]}" for p, c in SEARCHES])
def test_every_documented_search_is_planned_without_refusal(page: str, cmd: str, tmp_path: Path,
                                                              monkeypatch) -> None:
    """In a folder of its own: a README search the user ran first in the checkout leaves a report
    of another study there, which must not refuse the pages' commands (it did)."""
    monkeypatch.chdir(tmp_path)
    try:
        _planned(cmd, tmp_path)
    except ConfigError as e:
        pytest.fail(f"{page}: `tianfeng {cmd}` is refused: {e}")


CLUSTER_FLAGS = re.compile(r"--launcher |--backend ray|--address |--master-addr |--nodes \d+ --gpus-per-node \d+(?! --device cpu)")
DRY_RUN_VERBS = {"search", "promote", "launch"}
HERE_VERBS = {"search", "promote", "status", "runs", "report", "calibrate", "export", "spaces", "launch"}


def typed_here(cmd: str, studies: set[str]) -> tuple[str | None, str]:
    """A documented command as a newcomer runs it on this machine, after the commands before it
    (which made `studies`), or None and why it cannot run here. The data is the bundled digits; a
    command that would reach a cluster or trains on a data set this machine lacks runs as its
    `--dry-run` (a search's touches no database), and one without a dry run is left out, as is one
    reading a cluster's database (no dry run here makes it)."""
    verb = cmd.split()[0]
    if verb not in HERE_VERBS:
        return None, f"{verb} runs in the foreground for good or needs a GPU"
    if "--storage postgresql://" in cmd and verb != "search":
        return None, "reads the cluster's database, which a dry run does not make"
    typed = re.sub(r"--data imagefolder:\S+", "--data digits", cmd)
    typed = re.sub(r" --follow( \d+)?", "", typed)
    if CLUSTER_FLAGS.search(typed) or typed != cmd and "--data digits" in typed:
        if verb not in DRY_RUN_VERBS:
            return None, "reaches a cluster and has no --dry-run"
        typed += " --dry-run"  # a cluster, or a data set this machine lacks
    config = re.search(r"--config (\S+)", typed)
    if config and not Path(config.group(1)).exists():
        return None, f"reads {config.group(1)}, which no page makes"
    if "--cancel" in typed:
        return None, "cancels a run of the cluster's"
    study = re.search(r"--study (\S+)", typed)
    if verb != "search" and study and study.group(1) not in studies:
        return None, f"study {study.group(1)} is made on a cluster"
    return typed, ""


def _made_study(typed: str) -> str | None:
    """The study a search that ran (not a dry run) leaves: its --study, else the space's name."""
    if typed.split()[0] != "search" or "--dry-run" in typed:
        return None
    named = re.search(r"--study (\S+)", typed) or re.search(r"--space (?:\S*/)?([^/\s.]+)", typed)
    return named.group(1)


def test_commands_reaching_a_cluster_are_typed_as_dry_runs_or_left_out() -> None:
    studies = {"large_batch"}
    cluster_search = ("search --space imagenet_resnet50 --data imagefolder:/data/imagenet --storage "
                      "postgresql://u@h/db --launcher slurm --workers 8")
    assert typed_here(cluster_search, studies)[0] == ("search --space imagenet_resnet50 --data digits --storage "
                                                      "postgresql://u@h/db --launcher slurm --workers 8 --dry-run")
    assert typed_here("status --study large_batch --storage postgresql://u@h/db --follow", studies)[0] is None
    assert typed_here("status --study large_batch --follow", studies)[0] == "status --study large_batch"
    assert typed_here("calibrate --study large_batch --launcher slurm --nodes 2", studies)[0] is None
    assert typed_here("promote 14 --study large_batch --nodes 2 --gpus-per-node 2 --device cpu", studies)[0] == \
        "promote 14 --study large_batch --nodes 2 --gpus-per-node 2 --device cpu"
    assert typed_here("promote 14 --study large_batch --nodes 16 --gpus-per-node 8", studies)[0].endswith("--dry-run")
    assert typed_here("status --study imagenet_resnet50", studies)[0] is None
    assert typed_here("search --space large_batch.yaml --data imagefolder:/data/x", studies)[0] == \
        "search --space large_batch.yaml --data digits --dry-run"
    assert _made_study("search --space large_batch.yaml --study leaders") == "leaders"
    assert _made_study("search --space search_spaces/large_batch.yaml") == "large_batch"


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.timeout(2400)
def test_the_readme_then_the_tutorial_then_the_how_tos_run_in_order_in_one_fresh_folder(tmp_path) -> None:
    """The README's commands, then the tutorial's, then the how-tos' (as `typed_here` types them),
    one after another in one new folder with the installed `tianfeng`, as a newcomer types them:
    none is refused (a study an earlier page made must not stand in a later page's way). W&B stays
    offline."""
    import os
    import subprocess

    tianfeng = str(Path(sys.executable).parent / "tianfeng")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_ERROR_REPORTING": "false"}
    studies: set[str] = set()
    ran, left_out = [], []
    for page in PAGES:
        for cmd in commands(page.read_text()):
            typed, why = typed_here(cmd, studies)
            if typed is None:
                left_out.append(f"{page.name}: {cmd[:70]}: {why}")
                continue
            out = subprocess.run([tianfeng, *shlex.split(typed)], capture_output=True, text=True, cwd=tmp_path,
                                 env=env, timeout=900)
            assert out.returncode == 0, f"{page.name}: `tianfeng {typed}` exited {out.returncode}: {out.stderr[-1500:]}"
            ran.append(typed)
            studies.add(_made_study(typed) or "")
    print("left out:", *left_out, sep="\n  ")
    how_tos = len(ran) - len([c for page in PAGES[:2] for c in commands(page.read_text())])
    assert how_tos >= 12, (ran, left_out)
    assert {"large_batch", "tutorial", "leaders"} <= studies
