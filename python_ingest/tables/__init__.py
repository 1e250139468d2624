"""Tables: names (one place for Python and dbt), Iceberg access, checkpoints, run bookkeeping."""
