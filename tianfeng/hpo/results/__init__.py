"""What a study's trials say, read from the study alone: the rows `status` and `--json` print,
what a finished search prints, following a study, and the curves optuna-dashboard draws."""
