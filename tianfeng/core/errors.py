"""The one error every bad input becomes: `file: key.path: what is allowed, got X`."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad configuration value; prints as `file: key.path: what is allowed, got X`."""

    def __init__(self, source: str, key_path: str, message: str) -> None:
        self.source = source
        self.key_path = key_path
        self.message = message
        super().__init__(str(self))

    def with_source(self, source: str) -> ConfigError:
        """The same error attributed to `source` when it was raised without knowing the file."""
        return self if self.source else ConfigError(source, self.key_path, self.message)

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        key = f"{self.key_path}: " if self.key_path else ""
        return f"{where}{key}{self.message}"


class LaunchError(ConfigError):
    """A scheduler's refusal or a bad launcher option: one line, exit 2, nothing recorded."""

    def __init__(self, message: str) -> None:
        super().__init__("", "", message)
