"""Where the report templates are: the top-level `reports/` directory installed beside the
`tianfeng` package. Found by path, not imported: a `reports/` folder of generated reports in the
working directory would otherwise shadow it under `python -m`."""

from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[2] / "reports"
