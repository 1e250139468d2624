"""The DBEvents changelog format: raw columns, a job's Avro schema, decoding one message."""
