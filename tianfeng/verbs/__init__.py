"""The `tianfeng` commands, one module each: what `--help` says of it, its examples, its typed
options (the flags are generated from them), and the function that runs it (imported only when
it runs, so `--help` and a mistyped flag do not pay for torch and Optuna). A new command is one
module here and one name in `NAMES`."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass

NAMES = ("train", "search", "scale", "promote", "runs", "calibrate", "report", "launch", "plan", "export",
         "dashboard", "spaces", "status")


@dataclass(frozen=True)
class Verb:
    name: str
    help: str  # one line, in `tianfeng --help`
    description: str  # the paragraph atop its own `--help`
    run: str  # "module:function" taking the parsed arguments and returning the exit code
    examples: tuple[tuple[str, str], ...]  # (command, what it does), each parsing as written
    options: type | None = None  # the options dataclass its flags are generated from
    arguments: Callable[[argparse.ArgumentParser], None] | None = None  # positionals, and flags not in `options`
    json: bool = False  # `--json`: the result for programs
    source: str | None = None  # the argument naming the file its errors are about ("space", "config")
    default_source: str = ""  # what its errors name when that argument is not given
    storage: str = "reads"  # what it does to --storage: reads, writes, or creates (a study, unless --resume)

    def source_of(self, args: argparse.Namespace) -> str:
        given = getattr(args, self.source, None) if self.source else None
        return str(given) if given else self.default_source

    def handler(self) -> Callable[[argparse.Namespace], int]:
        module, function = self.run.split(":")
        return getattr(importlib.import_module(module), function)

    def examples_text(self) -> str:
        return "examples:\n" + "\n".join(f"  {command}\n      {what}" for command, what in self.examples)


def all_verbs() -> dict[str, Verb]:
    return {name: importlib.import_module(f"tianfeng.verbs.{name}").VERB for name in NAMES}
