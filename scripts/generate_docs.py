"""MkDocs hook: the reference pages are generated from the code at build time, so they cannot
drift from it. A page asks for a part with a marker line:

    <!-- reference: cli -->          every command's usage, description and options (argparse)
    <!-- reference: run-config -->   every run-config key: type or allowed values, default, bounds,
                                     and the comment beside it in the dataclass
    <!-- reference: space -->        the keys and names a search-space file may use
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import typing
from typing import Any, Literal

MARKER = re.compile(r"^<!-- reference: ([a-z-]+) -->$", re.M)


def on_page_markdown(markdown: str, page: Any = None, config: Any = None, files: Any = None) -> str:
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)


def _cell(text: str) -> str:
    """Text for a table cell: `<name>` and pipes shown as written, on one line."""
    return text.replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|").replace("\n", " ")


# --- the command line ------------------------------------------------------------------------

def _option_row(action: argparse.Action) -> str:
    names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.nargs == 0:
        takes = ""
    else:
        takes = f"`{action.metavar or action.dest.upper()}`"
        if action.choices:
            takes = " \\| ".join(f"`{c}`" for c in action.choices)
    default = action.default
    shown = "" if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
    return f"| {names} | {takes} | {shown} | {_cell(action.help or '')} |"


def cli_reference() -> str:
    from tianfeng.cli import build_parser

    parser = build_parser()
    out = [f"`tianfeng [--debug] COMMAND ...`: {parser.description}", ""]
    for name, sub in parser.commands.items():
        out += [f"## `tianfeng {name}`", "", "```", sub.format_usage().removeprefix("usage: ").strip(), "```", ""]
        if sub.description:
            out += [sub.description, ""]
        actions = [a for a in sub._actions if not isinstance(a, argparse._HelpAction)]
        if actions:
            out += ["| option | takes | default | what |", "| --- | --- | --- | --- |"]
            out += [_option_row(a) for a in actions]
            out.append("")
    return "\n".join(out)


# --- the run config --------------------------------------------------------------------------

def _comments(cls: type) -> dict[str, str]:
    """The comment lines above a field and the one beside it, joined, by field name."""
    lines, _ = inspect.getsourcelines(cls)
    found: dict[str, str] = {}
    above: list[str] = []
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# "))
            continue
        field = re.match(r"(\w+)\s*:", stripped)
        if field and not stripped.startswith(("def ", "class ", "@")):
            beside = line.split("  # ", 1)[1].strip() if "  # " in line else ""
            found[field.group(1)] = " ".join([*above, beside]).strip()
        above = []
    return found


def _type_text(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return " \\| ".join(f"`{v}`" for v in typing.get_args(hint))
    if origin in (typing.Union, __import__("types").UnionType):
        return " or ".join(_type_text(a) for a in typing.get_args(hint))
    if origin is tuple:
        return f"list of {_type_text(typing.get_args(hint)[0])}"
    if hint is type(None):
        return "`null`"
    return getattr(hint, "__name__", str(hint)).replace("Kwargs", "mapping")


def _default_text(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return ""
    if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
        return "; ".join(", ".join(f"{k}: {v}" for k, v in dataclasses.asdict(p).items()) for p in value)
    if value is None:
        return "`null`"
    return '`""`' if value == "" else f"`{value}`"


def _bounds_text(field: dataclasses.Field) -> str:
    words = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
    return ", ".join(f"{words[k]} {v}" for k, v in field.metadata.items() if v is not None)


def _config_rows(cls: type, prefix: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    comments = _comments(cls)
    rows: list[str] = []
    nested: list[tuple[type, str]] = []
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        key = f"{prefix}{field.name}"
        inner = typing.get_args(hint)[0] if typing.get_origin(hint) is tuple else hint
        if dataclasses.is_dataclass(inner):
            nested.append((inner, f"{key}.N." if inner is not hint else f"{key}."))
            if inner is hint:
                continue
        rows.append(f"| `{key}` | {_type_text(hint)} | {_cell(_default_text(field))} | {_bounds_text(field)} | "
                    f"{_cell(comments.get(field.name, ''))} |")
    for inner, inner_prefix in nested:
        rows += _config_rows(inner, inner_prefix)
    return rows


def run_config_reference() -> str:
    from tianfeng.trainers.config import RunConfig

    return "\n".join(["| key | type or values | default | bounds | what |", "| --- | --- | --- | --- | --- |",
                      *_config_rows(RunConfig, "")])


# --- the search-space file -------------------------------------------------------------------

def _parameter_keys() -> dict[str, tuple[str, ...]]:
    """The keys each parameter type allows, read from the parser's own table."""
    from tianfeng.hpo.space import read as space

    source = inspect.getsource(space)
    table = re.search(r"allowed = (\{\"float\".*?\})\[kind\]", source, re.S).group(1)
    return ast.literal_eval(table)


def space_reference() -> str:
    from tianfeng.cost.cluster import KEYS as CLUSTER_KEYS
    from tianfeng.hpo.space.expressions import ALLOWED
    from tianfeng.hpo.space.read import CONSTANTS, PARAMETER_TYPES

    out = ["| parameter type | keys |", "| --- | --- |"]
    out += [f"| `{kind}` | {', '.join(f'`{k}`' for k in keys)} |" for kind, keys in _parameter_keys().items()
            if kind in PARAMETER_TYPES]
    out += ["", f"`cluster:` keys: {', '.join(f'`{k}`' for k in CLUSTER_KEYS)}.", "",
            f"Names every expression and range bound may read: {', '.join(f'`{c}`' for c in CONSTANTS)}.", "",
            f"Expressions allow {ALLOWED}."]
    return "\n".join(out)


GENERATORS = {"cli": cli_reference, "run-config": run_config_reference, "space": space_reference}
