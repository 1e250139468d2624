"""Kafka: client helpers (offsets, reads) and the embedded Apache Kafka broker."""
