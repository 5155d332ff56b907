"""tianfeng: cheap hyper-parameter search for large-batch training, and promotion of the winners."""

__version__ = "0.1.0"
