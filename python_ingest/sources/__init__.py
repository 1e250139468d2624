"""Sources: each turns a checkpoint into work units and reads them (Kafka topics, binlog)."""
