"""The change feed: what changed in a job's lake between two points, read from its history
table (``sluice changes``; docs/history.md)."""
