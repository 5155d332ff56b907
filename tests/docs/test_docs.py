"""The documentation: the site builds with `mkdocs build --strict` (broken links, missing pages
and bad anchors fail it), its generated reference covers every command, option and run-config
key, and no document speaks of anything outside the project."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _hook():
    spec = importlib.util.spec_from_file_location("generate_docs", REPO / "scripts" / "generate_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                           cwd=REPO, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert build.returncode == 0, build.stderr[-3000:]
    return out


def test_every_page_in_the_navigation_is_built(site: Path) -> None:
    pages = sorted(p.relative_to(DOCS).with_suffix("") for p in DOCS.rglob("*.md"))
    assert len(pages) >= 20
    for page in pages:
        built = site / ("index.html" if page.name == "index" else page / "index.html")
        assert built.is_file(), page


def test_the_cli_reference_lists_every_command_and_every_option(site: Path) -> None:
    from tianfeng.cli import build_parser

    html = (site / "reference" / "cli" / "index.html").read_text()
    for name, sub in build_parser().commands.items():
        assert f"tianfeng {name}" in html, name
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for flag in action.option_strings:
                assert f"<code>{flag}</code>" in html, (name, flag)


def test_the_run_config_reference_lists_every_key(site: Path) -> None:
    from tianfeng.core.run_config import RunConfig

    html = (site / "reference" / "run-config" / "index.html").read_text()

    def keys(cls, prefix=""):
        for f in dataclasses.fields(cls):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(default):
                yield from keys(type(default), f"{prefix}{f.name}.")
            else:
                yield f"{prefix}{f.name}"

    found = list(keys(RunConfig))
    assert len(found) >= 60
    for key in found:
        assert f"<code>{key}</code>" in html, key
    assert "means runs/&lt;name&gt;" in html  # a placeholder in a comment is shown, not taken for HTML
    for key in ("phases.N.epochs", "phases.N.resolution", "phases.N.batch_size"):
        assert f"<code>{key}</code>" in html, key


def test_the_api_reference_renders_the_docstrings(site: Path) -> None:
    import tianfeng.api

    html = (site / "reference" / "api" / "index.html").read_text()
    for name in ("search", "promote", "scale", "report", "train", "predict"):
        assert f'id="tianfeng.api.{name}"' in html, name
        first = getattr(tianfeng.api, name).__doc__.split("`")[0].split("\n")[0].strip()
        assert first[:30] in html, (name, first)


def test_every_generated_part_of_the_docs_is_what_the_code_and_results_give_now() -> None:
    import difflib

    generate = _hook()
    stale = generate.stale()
    diff = "".join(line for page in stale for line in list(difflib.unified_diff(
        page.read_text().splitlines(keepends=True), generate.refresh(page.read_text()).splitlines(keepends=True),
        str(page.relative_to(REPO)), "generated now", n=0))[:30])
    assert not stale, f"run `python scripts/generate_docs.py`: stale generated parts:\n{diff}"
    parts = {m.group(1) for p in generate.pages() for m in generate.PART.finditer(p.read_text())}
    assert parts == set(generate.GENERATORS), set(generate.GENERATORS) ^ parts  # each part is on a page


def test_a_hand_edited_generated_part_is_stale() -> None:
    generate = _hook()
    page = (DOCS / "reference" / "space.md").read_text()
    edited = page.replace("`cluster:` keys:", "`cluster:` keys (edited):")
    assert edited != page and generate.refresh(edited) == page


def test_the_generator_reads_a_comment_above_and_beside_a_field() -> None:
    @dataclasses.dataclass
    class Example:
        # what the first one is,
        # on two lines
        first: int = 1
        second: str = "x"  # beside it
        third: bool = False

    comments = _hook()._comments(Example)
    assert comments == {"first": "what the first one is, on two lines", "second": "beside it", "third": ""}


def test_documents_speak_of_the_project_alone() -> None:
    texts = {p: p.read_text() for p in [REPO / "README.md", *DOCS.rglob("*.md")]}
    outside = re.compile(r"\.\./shared|recipes\.md|\bsession \d|\bsessions?\b|\bissue (#|\d)|/work/|/tmp/tut", re.I)
    for path, text in texts.items():
        found = outside.search(text)
        assert not found, f"{path.relative_to(REPO)}: {found.group(0)!r}"


def test_the_readme_is_short_and_keeps_the_two_quick_start_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 120
    assert "bash scripts/setup.sh && source .venv/bin/activate\ntianfeng search --space large_batch.yaml" in readme
    assert "bash scripts/setup.sh --dev && bash scripts/test.sh" in readme
    assert "bash scripts/setup.sh --dev && bash scripts/test.sh" in (REPO / ".ci" / "run").read_text()
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / link).is_file(), link


def test_every_option_of_every_command_says_what_it_does() -> None:
    from tianfeng.cli import build_parser

    silent = [(name, a.option_strings or a.dest) for name, sub in build_parser().commands.items()
              for a in sub._actions if not isinstance(a, argparse._HelpAction) and not a.help]
    assert not silent, silent


def test_code_and_shipped_files_speak_of_the_project_alone() -> None:
    files = [p for folder in ("tianfeng", "benchmarks", "scripts", "tests") for p in (REPO / folder).rglob("*")
             if p.suffix in (".py", ".yaml", ".sh", ".j2", ".toml") and p.name != "test_docs.py"]
    outside = re.compile(r"\.\./shared|recipes\.md|\bdevelopment sessions?\b|\bsession \d|\bissue (#|\d)|/work/")
    assert len(files) > 100
    for path in files:
        found = outside.search(path.read_text(errors="replace"))
        assert not found, f"{path.relative_to(REPO)}: {found.group(0)!r}"
