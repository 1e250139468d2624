"""The tap core: what the binlog tap (sources/binlog) and the PostgreSQL tap
(sources/postgres) share. Each database keeps only its stream decoding, its snapshot and its
server checks; this package holds the rest, as Debezium's debezium-connector-binlog does under
its MySQL and MariaDB connectors.

Modules, one concept each:

- ``keys``: which columns identify a table's rows; full-row identities (copies per row).
- ``registry``: a table's schema versions as ``<id>.avsc`` files (Confluent ids).
- ``producer``: the Kafka producer that knows which events the broker acknowledged, and the
  barrier a checkpoint waits on.
- ``errors``: values that cannot be published: left out, reported to the error topic.
- ``columns``, ``values``: the column vocabulary (ColumnSpec, the kinds) and shared value forms.
- ``checkpoints``: an ordered stream Position, the CheckpointStore base, the AckWindow.
- ``truncation``: a table's deletes from its topic (TRUNCATE, DROP TABLE).
- ``kinds``: the registry from a source's kind to its tap, bootstrap and catalog.

The kind packages import this one; it imports none of them (tests/test_layers.py).
"""
