"""Promotion: from a proxy trial to the full-scale run."""
