"""The Kafka source: work units (offset ranges) planned from a checkpoint, read by Spark tasks."""
