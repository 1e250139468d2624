"""Ingest: a job's source into ``raw.<job>`` and ``errors.<job>__raw``, exactly once
(``land``: Kafka work units, and the entry point for every job; ``files``: a files job's
ready partitions; ``outcome``: what a run did, for either)."""
