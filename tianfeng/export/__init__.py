"""A study taken elsewhere: a table of its trials (csv, parquet, json), MLflow runs and W&B runs."""
