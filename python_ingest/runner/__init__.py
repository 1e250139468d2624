"""The job manager: many jobs in one long-running Spark application (``sluice run
--continuous``), in parallel by priority, and where each job stands (``sluice status``).

- ``config``: the ``runner:`` section of sluice.yml (parallelism, poll interval, back-off).
- ``offsets``: end offsets of every job's topic from one long-lived Kafka connection, so an
  idle job costs a metadata request, never a Spark job.
- ``status``: the status file every run updates and ``sluice status`` reads without a JVM.
- ``scheduler``: the runner's loop: which job runs next, on which session, and stopping.
"""
