"""The pipeline's steps, one subpackage per stage of a job's path (docs/architecture.md):

- ``ingest/``: land a batch in ``raw.<job>`` and ``errors.<job>__raw`` (``land``: Kafka
  topics; ``files``: a landing dir's partitions; ``outcome``: what a run did);
- ``fork/``: the staging model's Great Expectations suite compiled to SQL (``expectations``),
  valid rows apart from error rows in one pass (``split``), its Data Docs page (``docs``);
- ``merge/``: the lake model's change set on the driver (``changeset``, ``driver``) and the
  global index (``index``, held in memory by ``index_cache``);
- ``history/``: the lake's history table (``rules``: what is kept; ``fold``: the rules in
  Python; ``writer``: one commit per batch).

The paths that chain them stay at the top: ``batch`` (the batch path, in memory),
``pipeline`` (the step tables' path, dbt in-process), ``transform`` (the same inside a plain
``dbt run``), ``dbt``, ``jobs`` (runs recorded), ``services`` (table services), and the direct
bootstrap (``bootstrap``, ``bulk``).
"""
