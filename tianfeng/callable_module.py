"""`tianfeng.search(...)`, `tianfeng.scale(...)` and `tianfeng.report(...)` are API functions
whose names are also subpackages (tianfeng/search/, ...). Once a subpackage is imported, Python
binds its name on `tianfeng` to the module; making that module callable keeps
`tianfeng.search(...)` the API call either way."""

from __future__ import annotations

import sys
import types


def callable_as(module_name: str, function_name: str) -> None:
    """Make module `module_name`, when called, call tianfeng.api.<function_name>."""

    class CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):
            from tianfeng import api

            return getattr(api, function_name)(*args, **kwargs)

    sys.modules[module_name].__class__ = CallableModule
