"""HTML reports of studies and scaling curves."""
