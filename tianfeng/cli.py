"""The `tianfeng` command: parses arguments and calls the function behind each subcommand."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import NoReturn

from tianfeng.core.errors import ConfigError
from tianfeng.verbs import Verb, all_verbs
from tianfeng.verbs._flags import add_json, add_option_flags


class _Parser(argparse.ArgumentParser):
    """argparse with a "did you mean" for a mistyped command, flag or choice, and the usage of
    the command the mistake was made in."""

    def error(self, message: str) -> NoReturn:
        import difflib

        target, hint = self, ""
        commands = getattr(self, "commands", {})
        argv = sys.argv[1:] if self._argv is None else self._argv
        given = next((a for a in argv if a in commands), None)
        if given is not None:
            target = commands[given]
        unknown = re.search(r"unrecognized arguments: (\S+)", message)
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if unknown:
            flags = [o for action in target._actions for o in action.option_strings]
            close = difflib.get_close_matches(unknown.group(1).split("=")[0], flags, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
        elif choice:
            options = [c.strip().strip("'") for c in choice.group(2).split(",")]
            close = difflib.get_close_matches(choice.group(1), options, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
        target.print_usage(sys.stderr)
        self.exit(2, f"{target.prog}: error: {message}{hint}\n")

    _argv: list[str] | None = None


def _study_from_positional(args: argparse.Namespace) -> None:
    given = getattr(args, "study_positional", None)
    if given is None:
        return
    if args.study is not None and args.study != given:
        raise ConfigError("--study", args.study, f"and STUDY {given} name two studies: give it once, as --study")
    args.study, args.study_flag = given, "STUDY"
    print(f"tianfeng: warning: the study as a positional argument is deprecated and goes in the next release; "
          f"write `tianfeng {args.command} --study {given}`", file=sys.stderr)


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's, except that the examples keep their lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def build_parser() -> argparse.ArgumentParser:
    """`tianfeng` and a subcommand for each verb, its flags generated from the verb's options."""
    parser = _Parser(
        prog="tianfeng",
        description="Find hyper-parameters for large-batch training with cheap proxy runs, "
                    "then run the winners at scale.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    parser.commands = sub.choices
    for verb in all_verbs().values():
        command = sub.add_parser(verb.name, help=verb.help, description=verb.description,
                                 epilog=verb.examples_text(), formatter_class=_HelpFormatter)
        if verb.arguments is not None:
            verb.arguments(command)
        for options in verb.options:
            add_option_flags(command, options)
        if verb.json:
            add_json(command)
    return parser


def _check_inputs(args: argparse.Namespace, verb: Verb) -> None:
    """The flags every command shares, checked before anything is opened or written."""
    from tianfeng.core.names import STUDY_MAX_LENGTH, check_name
    from tianfeng.storage.url import check_storage

    _study_from_positional(args)
    if getattr(args, "space", None) is not None:
        from tianfeng.hpo.space.shipped import resolve_space

        args.space = resolve_space(args.space)  # a bare name: the shipped space
    flags = {"study": getattr(args, "study_flag", "--study"), "scale": "--scale", "name": "--name"}
    for attr, flag in flags.items():
        value = getattr(args, attr, None)
        if value is not None:
            check_name(value, flag, "", max_length=STUDY_MAX_LENGTH)
    if getattr(args, "storage", None) is not None and not getattr(args, "throughput", False):
        from tianfeng.storage.url import as_url

        args.storage = as_url(args.storage)
        use = verb.storage
        if use == "creates" and getattr(args, "dry_run", False):
            return  # a search's dry run touches no database
        creates = use == "creates" and not args.resume
        writes = use in ("creates", "writes") and not (getattr(args, "dry_run", False) or getattr(args, "front", False))
        check_storage(args.storage, must_exist=not creates, writes=writes)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush does not fail a second time."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    from tianfeng.terminal import interrupts

    interrupts.install()
    try:
        parser = build_parser()
        parser._argv = argv
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        return _interrupted_before_start()
    from tianfeng.terminal.logs import setup_logging
    from tianfeng.trainers.user_code import put_code_dir_on_path

    put_code_dir_on_path()  # the user's model and data modules import here and in every process that trains
    from tianfeng.hpo.space.read import PRIORS_TOLD_ENV

    os.environ.pop(PRIORS_TOLD_ENV, None)  # a new command: its warnings are said once again, then not by its workers
    verb = all_verbs()[args.command]
    source = verb.source_of(args)
    try:
        try:  # nothing is opened or written before the command's handler runs
            setup_logging(args.debug)
            _check_inputs(args, verb)
        except KeyboardInterrupt:
            raise _InterruptedBeforeStart from None
        code = _dispatch(args, verb)
        sys.stdout.flush()  # here, where a closed pipe is handled, not at the interpreter's exit
        return code
    except ConfigError as exc:
        if args.debug:
            raise
        print(f"tianfeng: error: {exc.with_source(source)}", file=sys.stderr)
        return 2
    except _InterruptedBeforeStart:
        return _interrupted_before_start()
    except KeyboardInterrupt:
        interrupts.clear()  # handled: a later command in this process does not see it again
        print("tianfeng: interrupted; completed epochs and checkpoints are saved", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `tianfeng status --json | head -1`: the reader has all it wanted
        _silence_stdout()
        return 141  # what a shell reports for a process ended by SIGPIPE, as `ls | head` is
    except OSError as exc:  # a path we cannot read or write: the environment, not the input
        if args.debug:
            raise
        where = f" {exc.filename}" if exc.filename else ""
        print(f"tianfeng: error: cannot use{where}: {exc.strerror or _one_line(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:  # database, data and engine failures: one line, --debug for more
        if args.debug:
            raise
        if type(exc).__module__.startswith("sqlalchemy"):  # it wraps the driver's message
            origin = getattr(exc, "orig", None) or exc
            text = f"database {getattr(args, 'storage', '')}: {_one_line(origin)}"
        elif isinstance(exc, RuntimeError) and "compatible with the table schema" in str(exc):
            newer = "Please try updating" in str(exc)  # a schema this Optuna does not know: a newer one wrote it
            text = (f"--storage: {getattr(args, 'storage', '')}: its tables were written by "
                    + ("a newer Optuna than this tianfeng's; upgrade tianfeng (pip install -U tianfeng) to read it"
                       if newer else "an older Optuna; upgrade them with `optuna storage upgrade --storage URL`"))
        elif isinstance(exc, RuntimeError):
            text = _one_line(exc)
        else:
            text = f"{type(exc).__name__}: {_one_line(exc)} (--debug shows the traceback)"
        print(f"tianfeng: error: {text}", file=sys.stderr)
        return 1


class _InterruptedBeforeStart(Exception):
    pass


def _interrupted_before_start() -> int:
    from tianfeng.terminal import interrupts

    interrupts.clear()
    print("tianfeng: interrupted before anything started; nothing was saved", file=sys.stderr)
    return 130


def _dispatch(args: argparse.Namespace, verb: Verb) -> int:
    try:  # importing torch and optuna takes seconds: a Ctrl-C then has nothing to save
        verb.load()
    except KeyboardInterrupt:
        raise _InterruptedBeforeStart from None
    return verb.run(args)


if __name__ == "__main__":
    sys.exit(main())
