"""The one gate for every value that reaches a scheduler: a batch script's directives, a
scheduler's command line, a Ray job's entrypoint. A value passes only if it fits the scheduler's
own grammar for that field and holds no control character; job ids read back from storage pass
the scheduler's id grammar before any command sees them. Each refusal is one line naming the
flag, what it holds and what is allowed."""

from __future__ import annotations

import re

from tianfeng.core.errors import LaunchError

# Slurm's names of accounts, partitions, QOS and reservations: letters, digits, `_`, `.`, `-`
# (slurmdbd refuses other characters in accounts and QOS; partitions follow the same rule here)
_SLURM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
# a job name may hold more, but not what the #SBATCH parser or a shell treats specially
_JOB_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")
# `sbatch --parsable` prints JOBID or JOBID;CLUSTER; a task of an array is JOBID_TASK
_SLURM_JOB = re.compile(r"[1-9][0-9]{0,12}(?:_[0-9]{1,9})?")
# what RayJobs.submit names its jobs (Ray's own ids are raysubmit_ plus letters and digits)
_RAY_JOB = re.compile(r"(?:tianfeng-[0-9a-f]{12}|raysubmit_[A-Za-z0-9]{1,64})")
# Slurm's time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
_TIME = re.compile(r"(?:(\d{1,3})-(\d{1,2})(?::(\d{1,2})(?::(\d{1,2}))?)?|(\d{1,6})(?::(\d{1,2})(?::(\d{1,2}))?)?)")
MAX_TIME_S = 365 * 86400  # beyond a year a limit is a typo (Slurm caps at its INFINITE)
_MEM = re.compile(r"[1-9][0-9]{0,9}[KMGT]?")
_PATH_UNSAFE = re.compile(r"[\s\"'\\$`%;&|<>*?!#]")


def no_control(flag: str, value: str) -> str:
    """`value` unchanged, or a refusal if it holds a control character (a newline ends a
    directive and starts a shell line)."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise LaunchError(f"{flag}: must not hold control characters (a newline or tab); got {value!r}")
    return value


def _matching(flag: str, value: str, pattern: re.Pattern, expected: str) -> str:
    """`value` unchanged, or a refusal naming `flag` and what it must be (`expected`)."""
    no_control(flag, value)
    if not pattern.fullmatch(value):
        raise LaunchError(f"{flag}: must be {expected}; got {value!r}")
    return value


def slurm_name(flag: str, value: str) -> str:
    """An account, partition, QOS or reservation name as Slurm allows it."""
    return _matching(flag, value, _SLURM_NAME, "a Slurm name (letters, digits, '_', '.', '-', at most 64)")


def job_name(flag: str, value: str) -> str:
    return _matching(flag, value, _JOB_NAME, "letters, digits, '_', '.', '+', '-' (at most 128)")


def slurm_time_s(value: str, flag: str = "--time") -> int:
    """Seconds of a Slurm time limit, every field within its range: MM, MM:SS, HH:MM:SS, D-HH,
    D-HH:MM, D-HH:MM:SS (minutes and seconds below 60, hours below 24 after a day count), more
    than zero and at most a year."""
    no_control(flag, value)
    m = _TIME.fullmatch(value.strip())
    bad = f"{flag}: must be a Slurm time limit (MM, HH:MM:SS or D-HH:MM:SS, fields in range, at most 365 days); got {value!r}"
    if not m:
        raise LaunchError(bad)
    days, dh, dm, ds, a, b, c = (int(g) if g is not None else None for g in m.groups())
    if days is not None:
        if dh > 23 or (dm or 0) > 59 or (ds or 0) > 59:
            raise LaunchError(bad)
        seconds = days * 86400 + dh * 3600 + (dm or 0) * 60 + (ds or 0)
    elif c is not None:  # HH:MM:SS
        if b > 59 or c > 59:
            raise LaunchError(bad)
        seconds = a * 3600 + b * 60 + c
    else:  # MM or MM:SS
        if b is not None and b > 59:
            raise LaunchError(bad)
        seconds = a * 60 + (b or 0)
    if not 0 < seconds <= MAX_TIME_S:
        raise LaunchError(bad)
    return seconds


def memory(flag: str, value: str) -> str:
    """A Slurm memory size: a positive integer with an optional K, M, G or T."""
    return _matching(flag, value, _MEM, "a size such as 64G, 512M or 8000 (megabytes)")


def script_path(flag: str, value: str) -> str:
    """A path written into an #SBATCH directive: sbatch splits directives at white space and
    reads `%` as a pattern, so such paths are refused rather than half-read."""
    no_control(flag, value)
    if _PATH_UNSAFE.search(value):
        raise LaunchError(f"{flag}: {value!r}: a path that goes into a Slurm batch script must not hold white "
                          "space, quotes or any of $`%;&|<>*?!#\\; choose another folder")
    return value


def sbatch_arg(value: str) -> str:
    """A --sbatch-arg: passed to sbatch as one argument (no shell reads it), so only control
    characters are refused."""
    no_control("--sbatch-arg", value)
    if not value.startswith("-"):
        raise LaunchError(f"--sbatch-arg: must be an sbatch option such as --mem=64G; got {value!r}")
    return value


def job_id(launcher: str, value: object) -> str:
    """A job id read back from storage, as the scheduler `launcher` writes its ids; anything
    else (planted or corrupted) is refused before a command sees it."""
    text = str(value)
    grammar = {"slurm": _SLURM_JOB, "ray": _RAY_JOB}.get(launcher)
    if grammar is None or not grammar.fullmatch(text):
        raise LaunchError(f"job id {text!r} recorded for launcher {launcher!r} is not one that {launcher} "
                          "gives; refusing to pass it to the scheduler (was the study edited?)")
    return text


def port(flag: str, value: int) -> int:
    if not 1 <= int(value) <= 65535:
        raise LaunchError(f"{flag}: must be a port between 1 and 65535; got {value}")
    return int(value)
