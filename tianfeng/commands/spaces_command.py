"""`tianfeng spaces`: the shipped search spaces, their descriptions and how to use them."""

from __future__ import annotations

import argparse

from tianfeng.shipped_spaces import shipped_spaces
from tianfeng.tables import add_plain_row, plain_table
from tianfeng.trainers.yaml_input import read_yaml


def _cluster(path) -> str:
    """The space's cluster and the per-GPU batches it allows (its memory and minimum)."""
    from tianfeng.hpo.space import load_space, per_gpu_range
    from tianfeng.trainers.config import ConfigError

    try:
        space = load_space(path)
    except ConfigError as exc:
        return f"cannot load here: {exc.message}"
    return "; ".join(x for x in (space.cluster.describe(), per_gpu_range(space)) if x)


def run_spaces_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    table = plain_table(title="Shipped search spaces (use as --space NAME)",
                        columns=("name", "description", "parameters", "objective", "cluster", "file"))
    for path in shipped_spaces():
        raw = read_yaml(path)
        objective = (raw.get("objective") or {}).get("mode", "accuracy")
        add_plain_row(table, path.name, str(raw.get("description", "")), str(len(raw.get("parameters") or {})),
                      objective, _cluster(path), str(path))
    Console(width=200, soft_wrap=True).print(table)
    return 0
