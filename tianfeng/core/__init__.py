"""What every layer shares, the engine included, and what imports neither torch nor Optuna: the
one error bad input becomes, safe names, bounded YAML input, the run configuration every layer
speaks (the engine trains it, the search and promotion build it, the cost model prices it), the
words for how runs, trials and jobs stand, free ports and usable cores."""
