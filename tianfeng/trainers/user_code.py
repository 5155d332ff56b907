"""`module.path:function` names of the user's own model builders and data sets.

Importing the named module runs its code, as `torchrun script.py` does: a config or study that
names one comes from its author, and is as trusted as a script they would run.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path

from tianfeng.core.errors import ConfigError
from tianfeng.core.names import is_reference

CODE_DIR_ENV = "TIANFENG_CODE_DIR"


def code_dir() -> Path:
    """The folder the user's modules are imported from: $TIANFENG_CODE_DIR, else the folder the
    command runs in (as `python -m` and torchrun scripts import from theirs)."""
    return Path(os.environ.get(CODE_DIR_ENV) or os.getcwd()).resolve()


def put_code_dir_on_path() -> Path:
    """The code folder first on this process's import path and on PYTHONPATH, which every process
    that trains inherits: spawned workers, torchrun ranks, a Slurm job (sbatch exports the
    submitting environment) and a Ray job (its runtime_env carries PYTHONPATH)."""
    folder = str(code_dir())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if folder not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([folder, *paths])
    return Path(folder)


def load_callable(name: str, key: str, **arguments: object) -> Callable:
    """The function `name` (module.path:function) names, checked to accept `arguments` (by
    keyword); one-line errors name `key`."""
    if not is_reference(name):
        raise ConfigError("", key, f"must look like package.module:function; got {name!r}")
    module_name, function_name = name.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError("", key, f"{name}: cannot import {module_name}: {exc} (modules are imported from the "
                                   f"folder the command runs in, {code_dir()}, or ${CODE_DIR_ENV}, and the "
                                   "installed packages)") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ConfigError("", key, f"{name}: {module_name} has no function {function_name}")
    try:
        inspect.signature(function).bind(**arguments)
    except TypeError as exc:
        wanted = ", ".join(arguments) or "no arguments"
        raise ConfigError("", key, f"{name} must accept {wanted}: {exc}") from None
    except ValueError:  # no signature to read (a builtin): let the call decide
        pass
    return function
