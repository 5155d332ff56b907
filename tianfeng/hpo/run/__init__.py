"""Running a study: its storage, sampler and workers, one trial's proxy run, the budget, progress,
Ctrl-C, and what a finished search prints."""
