"""The package's import graph, read from the source (imports inside functions included): no
circles, and no module imports a layer above its own. A new circle or upward import fails here.

Layers, lowest first: the shared basics (tianfeng.core: errors, names, YAML input, states); the
engine (tianfeng.trainers), which never imports the platform; the platform's policies (the
terminal, storage, the cost model, launch plans and schedulers); the search (spaces, studies,
workers); studies built on searches (scale, promotion, calibration, tracking); reports; the verbs (each
command's API function and printing); the Python API that gathers them; the command line."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tianfeng"
LAYERS = (
    ("core", ("tianfeng.core", "tianfeng.version")),
    ("engine", ("tianfeng.trainers",)),
    ("platform", ("tianfeng.terminal", "tianfeng.storage", "tianfeng.defaults", "tianfeng.options", "tianfeng.cost", "tianfeng.launch",
              "tianfeng.recipes", "tianfeng.spaces")),
    ("search", ("tianfeng.hpo",)),
    ("studies", ("tianfeng.scaling", "tianfeng.promotion", "tianfeng.export")),
    ("report", ("tianfeng.reporting",)),
    ("verbs", ("tianfeng.verbs",)),
    ("api", ("tianfeng.api",)),
    ("cli", ("tianfeng.cli", "tianfeng")),
)


def _modules() -> dict[str, Path]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        parts = f.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        package = m if f.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                # `from a import b`: the module a.b when b is one, else a
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                r = resolve(t)
                if r and r != m:
                    edges[m].add(r)
    return edges


def _layer(module: str) -> int:
    best = (-1, -1)
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best[1]:
                best = (i, len(p))
    return best[0]


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_every_module_has_a_layer() -> None:
    assert [m for m in _modules() if _layer(m) < 0] == []


def test_no_import_circles() -> None:
    assert _circles(_graph(_modules())) == []


def test_no_upward_imports() -> None:
    edges = _graph(_modules())
    upward = {(m, t) for m, targets in edges.items() for t in targets if _layer(t) > _layer(m)}
    assert upward == set()


def test_the_checker_sees_circles_and_function_local_imports(tmp_path) -> None:
    """The oracle for the checker itself: a circle through an import inside a function."""
    mods = {"tianfeng.a": tmp_path / "a.py", "tianfeng.b": tmp_path / "b.py"}
    mods["tianfeng.a"].write_text("from tianfeng.b import x\n")
    mods["tianfeng.b"].write_text("def f():\n    from tianfeng import a\n    return a\nx = 1\n")
    assert _circles(_graph(mods)) == [["tianfeng.a", "tianfeng.b"]]


def test_every_import_of_a_tianfeng_name_resolves() -> None:
    """`from tianfeng.x import y` anywhere in the package (inside functions too, where nothing
    runs it at import time) names a module or an attribute that exists: a move or rename that
    left a caller behind fails here, not in a user's run."""
    import importlib

    mods = _modules()
    missing = []
    for m, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("tianfeng"):
                continue
            if node.module not in mods:
                missing.append(f"{m}: {node.module}")
                continue
            target = importlib.import_module(node.module)
            missing += [f"{m}: {node.module}.{a.name}" for a in node.names
                        if not hasattr(target, a.name) and f"{node.module}.{a.name}" not in mods]
    assert missing == []


def test_the_search_package_points_no_way_but_down() -> None:
    """Inside tianfeng.hpo the spaces, judges, samplers, options and the plan sit below what the
    trials say (hpo.results), which sits below the running study (hpo.running): none imports a
    room above its own."""
    edges = _graph(_modules())

    def room(m: str) -> int:
        return 2 if m.startswith("tianfeng.hpo.running") else 1 if m.startswith("tianfeng.hpo.results") else 0

    upward = sorted((m, t) for m, targets in edges.items() for t in targets
                    if m.startswith("tianfeng.hpo.") and t.startswith("tianfeng.hpo.") and room(t) > room(m))
    assert not upward, upward


def test_the_tests_mirror_the_packages() -> None:
    """A test file sits in the folder of the package it tests (`search` for tianfeng.hpo), or in
    distributed/ (several processes), benchmarks/ or docs/; at the top only what checks the
    whole tree."""
    tests = Path(__file__).resolve().parent
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    folders = {p.parent.name for p in tests.rglob("test_*.py") if p.parent != tests}
    assert folders - packages <= {"search", "distributed", "benchmarks", "docs"}, folders - packages
    top = {p.stem for p in tests.glob("test_*.py")}
    assert top <= {"test_layers", "test_lint", "test_call_paths", "test_gpu_check", "test_suite_timing"}, top


ENGINE_DOORS = 35  # import lines from outside the engine into it, at most


def test_the_engine_is_entered_only_to_train_measure_or_build() -> None:
    """What every layer shares (the run config, its LR schedule, the record of an epoch, errors,
    names) lives in core: the layers above import the engine only to train, measure or build
    with it. A shared basic put back into trainers/ and imported from around the package pushes
    the count past the bound."""
    lines = []
    for m, f in _modules().items():
        if m.startswith("tianfeng.trainers"):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            lines += [f"{m}:{node.lineno}" for n in names if n == "tianfeng.trainers" or n.startswith("tianfeng.trainers.")]
    assert len(lines) <= ENGINE_DOORS, lines
