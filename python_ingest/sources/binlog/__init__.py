"""The binlog source: MariaDB/MySQL row changes -> changelog events -> one Kafka topic per
table (the tap, docs/binlog-tap.md), and a table's first load (the bootstrap, docs/bootstrap.md).

Keys, the schema registry, the producer, error records, jobs, checkpoints and the column
vocabulary are the tap core's (sources/tap), shared with the PostgreSQL source; this package
imports nothing of sources/postgres. Modules, one concept each:

- reading the binlog: ``decoding`` (row values exactly as stored, replacing
  mysql-replication's), ``values`` (raw value forms, zero dates, the server's text forms),
  ``charsets`` (text in every charset the server offers), ``columns`` (column types -> Avro
  types and values, docs/types.md), ``event_types`` (events the tap cannot read, named with
  the setting that writes them), ``statements`` (row changes written as statements, #58),
  ``xa`` (only committed XA transactions), ``events`` (one row change -> changelog records);
- the fast path: ``fastpath`` (a rows event's bytes straight to Kafka keys and Avro
  messages), ``fastpath_columns`` (its per-type generated readers);
- where the tap is: ``position`` (binlog positions, ref keys, the checkpoint file), ``gtid``
  (MariaDB GTID positions), ``identity`` (which server and binlog history a checkpoint belongs
  to);
- the tap (``sluice tap``): ``tap`` (its main loop), split into functions of the running tap:
  ``tap_resume`` (where it starts), ``tap_tables`` (a table's schema version, key and topic),
  ``tap_ddl`` (what it does with a followed table's DDL, parsed by ``ddl``; which tables exist
  at its point of the stream: ``existence``), ``tap_failover`` (another server than its
  checkpoint's, a connection lost inside a transaction);
- the bootstrap (``sluice bootstrap``): ``bootstrap`` (a consistent snapshot published to the
  topic, then handed over to the tap), ``bulk_read`` and ``jdbc_read`` (the direct bootstrap's
  read into raw rows, #62);
- the server: ``server`` (talking to it; a private server for tests, the demo and the bench),
  ``tls`` (TLS on every connection).
"""
