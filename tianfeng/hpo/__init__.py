"""Hyper-parameter search: spaces, sampling, proxy trials, pruning, the wall-time model, studies
and their summaries."""
