"""The binlog source (the tap): MariaDB/MySQL row changes -> changelog events -> one Kafka topic
per table.

Modules, one concept each:

- ``columns``: MySQL column types -> Avro types, and values -> Avro values (docs/types.md);
  ColumnSpec and the kinds are in sources/tap/columns.py.
- ``decoding``: reading row values from the binlog exactly (replaces mysql-replication's).
- ``values``: raw binlog values, zero dates, the server's text forms (the calendar: tap/values).
- ``charsets``: text in every charset the server offers, converted as the server does.
- ``position``: binlog positions, ref keys and the tap's checkpoint (on tap/checkpoints.py).
- ``ddl``: the table DDL the tap follows (TRUNCATE, DROP, RENAME, CREATE).
- ``events``: one binlog row change -> changelog records.
- ``tap``: the tap's main loop (``sluice tap``).
- ``bootstrap``: the consistent snapshot of one table (``sluice bootstrap``).
- ``server``: talking to the source server; a private server for tests, demo and bench.

Keys, the schema registry, the producer, error records, jobs and the column vocabulary are the
tap core's (sources/tap), shared with the PostgreSQL source.
"""
