"""Names that become paths, job names and rendezvous ids: studies, runs, spaces. One pattern, so
no name can reach outside its directory or into a shell: letters, digits, '-', '_' and '.',
starting with a letter or digit; at most 64 characters for a study (run names add a suffix to
it), 128 for a run. And the `package.module:function` form that names the user's own code."""

from __future__ import annotations

import re

from tianfeng.core.errors import ConfigError

MAX_LENGTH = 128
STUDY_MAX_LENGTH = 64
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_REFERENCE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")


def rule(max_length: int = MAX_LENGTH) -> str:
    return f"letters, digits, '-', '_' and '.', starting with a letter or digit, at most {max_length} characters"


def is_safe_name(name: object, max_length: int = MAX_LENGTH) -> bool:
    return isinstance(name, str) and len(name) <= max_length and _SAFE.fullmatch(name) is not None


def check_name(name: object, source: str, key: str, *, max_length: int = MAX_LENGTH) -> str:
    """`name` if it follows the rule, else a ConfigError naming `source` and `key`."""
    if not is_safe_name(name, max_length):
        shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "..."
        raise ConfigError(source, key, f"must be {rule(max_length)}; got {shown}")
    return name


def is_reference(name: str) -> bool:
    """Whether `name` has the `package.module:function` form of a user's model builder or data set."""
    return bool(_REFERENCE.match(name))
