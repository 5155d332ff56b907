"""Running a study: its storage, sampler and workers (here, on Ray, or as a scheduler's job
array), one trial's proxy run, the budget, progress and Ctrl-C."""
