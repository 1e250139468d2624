"""Pipeline steps: ingest (land raw rows), stage (dbt converters), fork (GE suites), merge."""
