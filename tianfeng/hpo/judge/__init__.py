"""Judging trials: their scores, the Pareto front and its floor, outcomes and the peer rule."""
