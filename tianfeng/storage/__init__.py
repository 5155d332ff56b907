"""The study database beside Optuna's tables: its URL checked, the promoted runs kept, and which
study owns a run folder or report."""
