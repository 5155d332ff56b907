"""The command-line layer (tianfeng/cli.py, tianfeng/commands/) sits on top: no library module
imports it, so the library (and tianfeng.api) works without argparse objects, and there is no
import circle through the commands."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tianfeng"
CLI_LAYER = ("tianfeng.cli", "tianfeng.commands")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside functions (absolute imports only: the
    project uses no relative ones, which test_no_relative_imports checks)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def library_files() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py")
            if p.name != "cli.py" or p.parent != PACKAGE
            if "commands" not in p.relative_to(PACKAGE).parts]


def test_no_library_module_imports_the_cli_layer() -> None:
    files = library_files()
    assert len(files) > 30 and not any(p.name.endswith("_command.py") for p in files)
    offenders = {str(p.relative_to(PACKAGE)): sorted(m for m in imported_modules(p) if m.startswith(CLI_LAYER))
                 for p in files}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_walker_sees_imports_inside_functions(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("def f():\n    from tianfeng.commands.search_command import run_search_command\n")
    assert "tianfeng.commands.search_command" in imported_modules(sample)
