"""Error replay: list a job's error rows by reason and send chosen ones through the pipeline
again once their owner fixed the converter, the suite, the schema or the row
(``sluice errors``, docs/error-replay.md)."""
