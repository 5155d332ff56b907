"""Report templates (shipped with the package); generated reports are written beside them."""

from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent
