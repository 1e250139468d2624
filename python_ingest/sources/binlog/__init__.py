"""The binlog source (the tap): MariaDB/MySQL row changes -> changelog events -> one Kafka topic
per table.

Modules, one concept each:

- ``columns``: MySQL column types -> Avro types, and values -> Avro values.
- ``registry``: a table's schema versions as ``<id>.avsc`` files (Confluent ids).
- ``position``: binlog positions, ref keys and the tap's checkpoint file.
- ``producer``: the Kafka producer that knows which events the broker acknowledged.
- ``events``: one binlog row change -> changelog records.
- ``tap``: the tap's main loop (``sluice tap``).
- ``bootstrap``: the consistent snapshot of one table (``sluice bootstrap``).
- ``server``: talking to the source server; a private server for tests, demo and bench.
- ``jobs``: the sluice job each tapped table becomes.
"""
