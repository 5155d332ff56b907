"""Recipes shipped inside the package, so they work on a machine with nothing else."""

from pathlib import Path

DEFAULT_RECIPE = Path(__file__).resolve().parent / "digits.yaml"
