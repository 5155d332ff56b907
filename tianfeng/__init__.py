"""tianfeng: cheap hyper-parameter search for large-batch training, and promotion of the winners.

The Python API (tianfeng.api) is reachable from here: tianfeng.search, promote, scale, report,
train, predict, with SearchOptions and SearchInterrupted, and ConfigError, the one error bad input
raises; it is imported on first use, so `import tianfeng` (and `tianfeng --help`) stays light."""

from tianfeng.version import __version__

__all__ = ["__version__", "ConfigError", "SearchInterrupted", "SearchOptions", "predict", "promote", "report", "scale", "search",
           "train"]


def __getattr__(name: str):
    if name in __all__[1:]:
        from tianfeng import api

        return getattr(api, name)
    raise AttributeError(f"module 'tianfeng' has no attribute {name!r}")
