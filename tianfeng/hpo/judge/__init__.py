"""Judging trials: their scores, the Pareto front and its floor, outcomes, the peer rule and the
screening forecasts."""
