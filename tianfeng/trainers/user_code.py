"""`module.path:function` names of the user's own model builders and data sets.

Importing the named module runs its code, as `torchrun script.py` does: a config or study that
names one comes from its author, and is as trusted as a script they would run.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable

from tianfeng.trainers.config_error import ConfigError

REFERENCE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")


def is_reference(name: str) -> bool:
    return bool(REFERENCE.match(name))


def load_callable(name: str, key: str, **arguments: object) -> Callable:
    """The function `name` (module.path:function) names, checked to accept `arguments` (by
    keyword); one-line errors name `key`."""
    if not is_reference(name):
        raise ConfigError("", key, f"must look like package.module:function; got {name!r}")
    module_name, function_name = name.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError("", key, f"{name}: cannot import {module_name}: {exc}") from None
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
