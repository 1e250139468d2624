"""The PostgreSQL source: logical replication (pgoutput) -> changelog events -> one Kafka topic
per table, and a consistent snapshot from the slot's exported snapshot
(docs/postgres-source.md). The tap core (python_ingest/sources/tap: registry, producer, keys,
columns, checkpoints, error records) is shared with the binlog source; this package imports
nothing of sources/binlog.

Modules, one concept each:

- ``pgoutput``: the replication messages, decoded (protocol 1, and 2 with streaming).
- ``columns``: PostgreSQL types -> Avro types, text values -> Avro values (docs/types.md).
- ``shapes``: a table's columns, converters and key, from a Relation message or the catalog.
- ``events``: one row change -> changelog records (partial updates for unchanged TOAST).
- ``position``: LSNs, ref keys and the tap's checkpoint file.
- ``server``: connections, checks, the publication and slots, the catalog.
- ``slot``: where the tap starts (its checkpoint, or the slot created when missing).
- ``tap``: the tap's main loop (``sluice tap``).
- ``snapshot``: the consistent snapshot and hand-over (``sluice bootstrap``).
- ``status``: the slot's lag for ``sluice status``.
"""
