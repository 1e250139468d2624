"""Debezium topics: what they hold, for the scaffold (docs/debezium.md)."""
