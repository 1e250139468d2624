"""The job manager: many jobs in one long-running Spark application (``sluice run
--continuous``), in parallel by priority (``scheduler``).

Its parts below this layer: the ``runner:`` settings (``config/runner.py``), end offsets of
many topics over one connection (``kafka/offsets.py``), and the status file every run updates
and ``sluice status`` reads without a JVM (``tables/status.py``). docs/runner.md.
"""
