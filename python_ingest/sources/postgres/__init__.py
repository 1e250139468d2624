"""The PostgreSQL source: logical replication (pgoutput) -> changelog events -> one Kafka topic
per table, and a consistent snapshot from the slot's exported snapshot
(docs/postgres-source.md). The tap core (python_ingest/sources/tap: registry, producer, keys,
columns, checkpoints, error records) is shared with the binlog source; this package imports
nothing of sources/binlog.

Modules, one concept each:

- the stream: ``pgoutput`` (the replication messages, decoded: protocol 1, and 2 with
  streaming), ``wire`` (the replication connection's traffic, read and acknowledged through
  libpq), ``streams`` (large transactions streamed before their commit);
- rows: ``columns`` (PostgreSQL types -> Avro types, text values -> Avro values, docs/types.md),
  ``shapes`` (a table's columns, converters and key, from a Relation message or the catalog),
  ``events`` (one row change -> changelog records, partial updates for unchanged TOAST),
  ``moves`` (key changes whose update left TOASTed values out), ``partitions`` (TRUNCATE of one
  partition);
- the fast path: ``fastpath`` (a row change straight to its Kafka key and Avro message),
  ``native`` (its per-row work in C, tuplecodec.c, built when a compiler is there);
- where the tap is: ``position`` (LSNs, ref keys, the checkpoint file), ``slot`` (where the tap
  starts: its checkpoint or the slot, created when missing), ``rowlog`` (row copies of keyless
  tables beside the checkpoint);
- the tap (``sluice tap``): ``tap`` (its main loop), with its state in ``tap_state`` and the
  work on it in ``tap_tables`` (Relation messages, TRUNCATEs, stopped tables; which table a
  name stands for: ``tables``; tables joining the publication: ``publication``) and
  ``tap_checkpoints`` (the producer's barrier, the checkpoint file, then the slot confirmed);
- ``server`` (connections, checks, the publication and slots, the catalog); ``snapshot`` (the
  consistent snapshot and hand-over, ``sluice bootstrap``); ``status`` (the slot's lag for
  ``sluice status``).
"""
