"""What the typed options objects of the verbs (search, promote, scale, plan) share: each field
that is also a flag of the verb's command says so with `option(...)` (its help, choices, the
flag's name when it differs), and the command's flags are generated from those fields
(`tianfeng.verbs._flags.add_option_flags`), so a default or a choice is written once."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tianfeng.core.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class Flag:
    """How an options field appears on the command line. `from_text` turns the flag's text into
    the field's value (a duration, a list) after parsing, so its mistakes are ConfigErrors naming
    the flag; `repeat` collects a flag given many times into a tuple."""
    help: str
    name: str | None = None  # default: --field-name
    choices: Sequence[str] | None = None
    metavar: str | None = None
    from_text: Callable[[str], Any] | None = None
    repeat: bool = False
    hidden: bool = False
    required: bool = False
    show_default: bool = True
    short: str | None = None  # a one-letter alias, e.g. -o


def option(default: Any, help: str, **flag: Any) -> Any:
    """A field of a verb's options that is also its command's flag: `default` the value both
    take, `help` the flag's help (its default is appended), `flag` the rest of `Flag`."""
    return dataclasses.field(default=default, metadata={"flag": Flag(help, **flag)})


SCHEDULER_FLAGS = ("launcher", "partition", "account", "time", "qos", "job_name", "mem", "cpus_per_task",
                   "scheduler_args", "jobs_address", "working_dir")


def flag_groups(cls: type) -> dict[str, str]:
    """Field name -> the `--help` section its flag is listed in, from the class's `FLAG_GROUPS`
    (section title -> field names, in the order the sections are shown)."""
    return {name: title for title, names in getattr(cls, "FLAG_GROUPS", {}).items() for name in names}


def flag_of(field: dataclasses.Field) -> Flag | None:
    return field.metadata.get("flag")


def flag_name(field: dataclasses.Field) -> str:
    meta = flag_of(field)
    return (meta and meta.name) or "--" + field.name.replace("_", "-")


def option_args(options: Any) -> list[str]:
    """The command-line flags that give `options` again: one for each flag field whose value is
    not its default (a repeated flag once per value, a tuple joined by commas)."""
    args: list[str] = []
    for field in dataclasses.fields(options):
        meta, value = flag_of(field), getattr(options, field.name)
        if meta is None or value == field.default:
            continue
        name = flag_name(field)
        if isinstance(value, bool):
            args += [name] if value else []
        elif meta.repeat:
            args += [a for v in value for a in (name, str(v))]
        elif isinstance(value, tuple):
            args += [name, ",".join(map(str, value))]
        elif value is not None:
            args += [name, str(value)]
    return args


def with_changes(options: T, verb: str, changes: dict[str, Any]) -> T:
    """A copy of the frozen dataclass `options` with `changes` (lists become tuples); an unknown
    name is one line naming `verb` and the closest known name."""
    known = [f.name for f in dataclasses.fields(options)]
    for name in changes:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(known)}"
            raise ConfigError(verb, name, f"unknown option{hint}")
    return dataclasses.replace(options, **{k: tuple(v) if isinstance(v, list) else v for k, v in changes.items()})
