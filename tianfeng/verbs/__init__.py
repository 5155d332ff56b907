"""The `tianfeng` commands, one module each: what `--help` says of it, its examples, its typed
options (the flags are generated from them), its API function (re-exported by `tianfeng.api`) and
what it prints. A verb module imports torch, Optuna and the packages that need them inside its
functions, so `--help` and a mistyped flag do not pay for them. A new command is one module here
and one name in `NAMES`."""

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
    run: Callable[[argparse.Namespace], int]  # the command: the parsed arguments in, the exit code out
    examples: tuple[tuple[str, str], ...]  # (command, what it does), each parsing as written
    options: tuple[type, ...] = ()  # the options dataclasses its flags are generated from, the command's own first
    arguments: Callable[[argparse.ArgumentParser], None] | None = None  # its positionals
    json: bool = False  # `--json`: the result for programs
    source: str | None = None  # the argument naming the file its errors are about ("space", "config")
    default_source: str = ""  # what its errors name when that argument is not given
    storage: str = "reads"  # what it does to --storage: reads, writes, or creates (a study, unless --resume)
    loads: tuple[str, ...] = ("optuna",)  # what `run` imports first: loaded before it, where a Ctrl-C saves nothing

    def source_of(self, args: argparse.Namespace) -> str:
        given = getattr(args, self.source, None) if self.source else None
        return str(given) if given else self.default_source

    def load(self) -> None:
        """Import what the command needs first (seconds for torch and Optuna)."""
        for module in self.loads:
            importlib.import_module(module)

    def examples_text(self) -> str:
        return "examples:\n" + "\n".join(f"  {command}\n      {what}" for command, what in self.examples)


def all_verbs() -> dict[str, Verb]:
    return {name: importlib.import_module(f"tianfeng.verbs.{name}").VERB for name in NAMES}
