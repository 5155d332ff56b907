"""Flags several commands share, defined once, and the flags of a verb generated from its typed
options (`tianfeng.options.option`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tianfeng.options import flag_groups, flag_name, flag_of, option

T = TypeVar("T")


@dataclass(frozen=True)
class SpaceFlag:
    """The search space of a verb that reads one (its API function's first argument)."""
    space: Path | None = option(None, "search-space YAML, e.g. search_spaces/large_batch.yaml, or a shipped space's "
                                "name (tianfeng spaces)", required=True)


@dataclass(frozen=True)
class ConfigFlag:
    """The run config of a verb that reads one and has no default."""
    config: Path | None = option(None, "the run config YAML", required=True)


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON (for programs)")


def emit(args: argparse.Namespace, result: object, lines: list[str]) -> None:
    """The result on stdout: `lines` for a person, or the whole result as JSON with --json."""
    if getattr(args, "json", False):
        print(json.dumps(result, indent=2, default=str))
    else:
        print("\n".join(lines))


def _scalar(kind: Any) -> type:
    """The type argparse parses a field's text as: int, float or Path; str for the rest (a
    union such as `int | str` is parsed by the options' own check)."""
    args = [a for a in typing.get_args(kind) if a is not type(None)] or [kind]
    if len(args) == 1 and args[0] in (int, float, str):
        return args[0]
    if Path in args:
        return Path
    return str


def add_option_flags(parser: argparse.ArgumentParser, cls: type, *, skip: tuple[str, ...] = ()) -> None:
    """A flag for each field of the options class `cls` that declares one (in field order), its
    default the field's: the one place a flag's default, type and choices come from."""
    hints = typing.get_type_hints(cls)
    groups = {title: parser.add_argument_group(title) for title in getattr(cls, "FLAG_GROUPS", {})}
    group_of = flag_groups(cls)
    for field in dataclasses.fields(cls):
        meta = flag_of(field)
        if meta is None or field.name in skip:
            continue
        kwargs: dict[str, Any] = {"dest": field.name}
        default = field.default
        if hints[field.name] is bool:
            kwargs["action"] = "store_true"
        elif meta.repeat:
            kwargs.update(action="append", default=[])
        else:
            kwargs.update(default=default, type=str if meta.from_text else _scalar(hints[field.name]))
            if meta.choices is not None:
                kwargs["choices"] = tuple(meta.choices)
        if meta.metavar or (meta.choices is None and "action" not in kwargs):
            kwargs["metavar"] = meta.metavar or flag_name(field).lstrip("-").replace("-", "_").upper()
        if meta.required:
            kwargs["required"] = True
            kwargs.pop("default", None)
        shown = meta.show_default and default not in (None, False, (), "") and not meta.required
        kwargs["help"] = argparse.SUPPRESS if meta.hidden else (
            f"{meta.help} (default {default:g})" if shown and isinstance(default, float)
            else f"{meta.help} (default {default})" if shown else meta.help)
        names = (meta.short, flag_name(field)) if meta.short else (flag_name(field),)
        groups.get(group_of.get(field.name), parser).add_argument(*names, **kwargs)


def options_from_flags(args: argparse.Namespace, cls: type[T], **given: Any) -> T:
    """A verb's options object from its parsed flags, a field per flag; a field whose flag has
    `from_text` gets the parsed text, and `given` holds fields built from other flags."""
    values = {}
    for field in dataclasses.fields(cls):
        meta = flag_of(field)
        if field.name in given:
            values[field.name] = given[field.name]
        elif hasattr(args, field.name):
            value = getattr(args, field.name)
            if meta is not None and meta.from_text is not None and value is not None:
                value = meta.from_text(value)
            values[field.name] = value
    return cls().changed(**values)
