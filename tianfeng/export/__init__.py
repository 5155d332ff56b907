"""A study taken elsewhere: a table of its trials (csv, parquet, json) and MLflow runs."""
