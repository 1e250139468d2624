"""sluice's ingestion layer: Kafka (and binlog) change events into Iceberg tables on Spark."""

__version__ = "0.1.0"
