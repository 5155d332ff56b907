"""Every `tianfeng` command in the fenced shell blocks of the README, the tutorial and the how-to
pages parses as written with the real command line (an unknown flag, a retired choice or a
missing command fails here), and each `--space` it names is a file or a shipped space. Each
`search` is planned as the command plans it before its first trial (the space read, its options
checked against it, the study's plan built), on the bundled digits where the page names a data
folder this machine lacks: a combination the search refuses fails here. Synopsis lines (with
`[optional]` parts) are left out: they are not commands to paste."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from tianfeng.cli import build_parser
from tianfeng.commands.search_command import search_options
from tianfeng.hpo.plan import plan_search
from tianfeng.hpo.space.shipped import resolve_space
from tianfeng.trainers.config_error import ConfigError

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", REPO / "docs" / "tutorial.md", *sorted((REPO / "docs" / "how-to").glob("*.md"))]
SHELL = {"bash", "sh", "console", ""}


def _blocks(text: str) -> Iterator[tuple[str, str]]:
    """(language, body) of each fenced block, openers and closers paired in order."""
    lang, lines = None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if lang is None:
                lang, lines = line[3:].strip(), []
            else:
                yield lang, "\n".join(lines)
                lang = None
        elif lang is not None:
            lines.append(line)


def commands(text: str) -> list[str]:
    """The arguments of each `tianfeng` (or `.venv/bin/tianfeng`) command in the shell blocks."""
    found = []
    for lang, body in _blocks(text):
        if lang not in SHELL:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            for part in re.split(r"&&|\|\||;", line):
                m = re.match(r"(?:[A-Z_]+=\S+ )*(?:\S*/)?tianfeng (.*)$", part.strip())  # after VAR=value
                if m and "[" not in m.group(1):
                    found.append(m.group(1))
    return found


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
    plan_search(args.space, search_options(args).checked())


def test_a_refused_combination_in_a_page_would_fail_the_planning(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="--promote: leader: needs one best trial"):
        _planned("search --space large_batch.yaml --fidelity screen --promote leader", tmp_path)  # a pareto space


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


def _runnable(cmd: str) -> bool:
    """A command a newcomer runs on this machine as written: no cluster, no data folder."""
    return cmd.split()[0] in {"search", "promote", "status", "runs", "report", "calibrate", "export", "spaces"} \
        and not any(flag in cmd for flag in ("--launcher", "--nodes", "--data", "--storage postgresql"))


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.timeout(1800)
def test_the_readme_then_the_tutorial_run_in_order_in_one_fresh_folder(tmp_path) -> None:
    """The README's commands and then the tutorial's, typed as a newcomer types them, one after
    another in one new folder with the installed `tianfeng`: none is refused (a study the README
    made must not stand in the tutorial's way)."""
    import os
    import subprocess
    import sys

    typed = [cmd for page in PAGES[:2] for cmd in commands(page.read_text()) if _runnable(cmd)]
    assert [c.split()[0] for c in typed].count("search") >= 2, typed
    tianfeng = str(Path(sys.executable).parent / "tianfeng")
    for cmd in typed:
        out = subprocess.run([tianfeng, *shlex.split(cmd)], capture_output=True, text=True, cwd=tmp_path,
                             env=dict(os.environ), timeout=900)
        assert out.returncode == 0, f"`tianfeng {cmd}` exited {out.returncode}: {out.stderr[-1500:]}"
