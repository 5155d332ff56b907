"""The search spaces shipped inside the package, found by bare name when no such file exists."""

from __future__ import annotations

from pathlib import Path

from tianfeng.core.errors import ConfigError

SPACES_DIR = Path(__file__).resolve().parents[2] / "spaces"  # tianfeng/spaces


def shipped_spaces() -> list[Path]:
    return sorted(SPACES_DIR.glob("*.yaml"))


def resolve_space(path: str | Path) -> Path:
    """`path` itself when it exists; else, for a bare name such as `large_batch.yaml` or
    `large_batch`, the shipped space of that name."""
    given = Path(path)
    if given.exists() or given.parent != Path("."):
        return given
    for candidate in (SPACES_DIR / given.name, SPACES_DIR / f"{given.name}.yaml"):
        if candidate.is_file():
            return candidate
    names = ", ".join(p.name for p in shipped_spaces())
    raise ConfigError(str(path), "", f"no such file, and no shipped space of that name; shipped: {names} "
                                     f"(tianfeng spaces lists them)")
