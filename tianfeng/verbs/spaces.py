"""`tianfeng spaces`: the search spaces shipped with tianfeng."""

from __future__ import annotations

import argparse
import json

from tianfeng.core.errors import ConfigError
from tianfeng.defaults import ObjectiveMode
from tianfeng.verbs import Verb


def spaces() -> list[dict]:
    """The shipped search spaces (use a name as `search(name)`): name, description, number of
    parameters, objective, the cluster and per-GPU batches it searches for (or why it cannot be
    loaded here), and the file. As `tianfeng spaces`."""
    from tianfeng.core.yaml_input import read_yaml
    from tianfeng.hpo.space.read import load_space, per_gpu_range
    from tianfeng.hpo.space.shipped import shipped_spaces

    rows = []
    for path in shipped_spaces():
        raw = read_yaml(path)
        try:
            space = load_space(path)
            cluster = "; ".join(x for x in (space.cluster.describe(), per_gpu_range(space)) if x)
        except ConfigError as exc:
            cluster = f"cannot load here: {exc.message}"
        rows.append({"name": path.name, "description": str(raw.get("description", "")),
                     "parameters": len(raw.get("parameters") or {}),
                     "objective": (raw.get("objective") or {}).get("mode", ObjectiveMode.ACCURACY.value),
                     "cluster": cluster, "file": str(path)})
    return rows


def command(args: argparse.Namespace) -> int:
    from tianfeng.terminal.tables import add_plain_row, plain_table, table_console

    if args.json:
        print(json.dumps(spaces(), indent=2, default=str))
        return 0
    table = plain_table(title="Shipped search spaces (use as --space NAME)",
                        columns=("name", "description", "parameters", "objective", "cluster", "file"))
    for row in spaces():
        add_plain_row(table, row["name"], row["description"], str(row["parameters"]), row["objective"],
                      row["cluster"], row["file"])
    table_console().print(table)
    return 0


VERB = Verb(
    "spaces", "list the search spaces shipped with tianfeng",
    "List the shipped search spaces: --space takes each by its bare name (e.g. --space large_batch.yaml) when no "
    "such file is in the working directory.",
    command,
    (("tianfeng spaces", "the shipped spaces and their per-GPU batch ranges"),
     ("tianfeng search --space imagenet_resnet50", "search one by its bare name")),
    json=True)
