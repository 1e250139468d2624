"""The binlog source (the tap): MariaDB/MySQL row changes -> changelog events -> one Kafka topic
per table.

Modules, one concept each:

- ``columns``: MySQL column types -> Avro types, and values -> Avro values (docs/types.md).
- ``decoding``: reading row values from the binlog exactly (replaces mysql-replication's).
- ``values``: raw binlog values, calendar arithmetic for every year, the server's text forms.
- ``charsets``: text in every charset the server offers, converted as the server does.
- ``keys``: which columns identify a table's rows; full-row identities (copies per row).
- ``registry``: a table's schema versions as ``<id>.avsc`` files (Confluent ids).
- ``position``: binlog positions, ref keys and the tap's checkpoint file.
- ``producer``: the Kafka producer that knows which events the broker acknowledged.
- ``events``: one binlog row change -> changelog records.
- ``errors``: values that cannot be published: left out, reported to the error topic.
- ``tap``: the tap's main loop (``sluice tap``).
- ``bootstrap``: the consistent snapshot of one table (``sluice bootstrap``).
- ``server``: talking to the source server; a private server for tests, demo and bench.
- ``jobs``: the sluice job each tapped table becomes.
"""
