"""Every error sluice raises on purpose, each with a message that says what to do.

The CLI prints these without a traceback: they are the user's to act on, not bugs.
"""

from __future__ import annotations


class SluiceError(Exception):
    """Base of all errors sluice raises for the user to act on."""


class ConfigError(SluiceError):
    """The configuration is invalid; raised before any data moves."""

    def __init__(self, field: str, problem: str, hint: str = "") -> None:
        self.field = field
        message = f"config error in '{field}': {problem}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)


class SetupError(SluiceError):
    """Something set-up should have provided is missing (jars, broker binary, ...)."""


class BrokerError(SluiceError):
    """The Kafka broker could not be reached or answered with an error."""


class MessageTooLargeError(BrokerError):
    """The Kafka client refused one message as too large (raised by the tap's producer for the
    caller to report that one change; never a reason to stop)."""


class DataLossError(SluiceError):
    """The checkpoint points below the earliest offset the broker still retains."""

    def __init__(self, topic: str, partition: int, checkpoint: int, earliest: int) -> None:
        self.topic = topic
        self.partition = partition
        self.missing = (checkpoint, earliest)
        super().__init__(
            f"data loss on topic '{topic}' partition {partition}: the checkpoint is at offset "
            f"{checkpoint} but the broker's earliest retained offset is {earliest}, so offsets "
            f"{checkpoint}..{earliest - 1} ({earliest - checkpoint} messages) are gone. "
            "To accept the loss and continue from the earliest offset, set "
            "'on_data_loss: accept' on the job or pass --accept-data-loss; the loss is "
            "recorded in the run."
        )


class OffsetResetError(SluiceError):
    """The checkpoint is beyond the end of the partition (topic deleted and recreated?)."""

    def __init__(self, topic: str, partition: int, checkpoint: int, end: int) -> None:
        super().__init__(
            f"topic '{topic}' partition {partition}: the checkpoint is at offset {checkpoint} "
            f"but the partition ends at {end}. The topic was probably deleted and recreated. "
            "Nothing was read. Reset the job's checkpoint deliberately (drop the raw table, or "
            "point the job at a new topic) once you know which data the lake should hold."
        )


class TopicRecreatedError(OffsetResetError):
    """The topic was deleted and recreated since the checkpoint (its topic id changed)."""

    def __init__(self, topic: str, was: str, now: str) -> None:
        SluiceError.__init__(
            self,
            f"topic '{topic}' was deleted and recreated since the last checkpoint (topic id "
            f"{was} then, {now} now): its offsets start over and no longer match the "
            "checkpoint. Nothing was read. Decide which data the lake should hold, then reset "
            "the job deliberately (drop its raw table, or point the job at a new topic).")


class ReadError(SluiceError):
    """A work unit could not be read completely from the broker."""


class PipelineError(SluiceError):
    """A pipeline step (dbt, the fork, the merge) failed; checkpoints after it did not move."""


class CheckpointLostError(SluiceError):
    """A table holds rows but no snapshot in its history carries sluice's checkpoint."""

    def __init__(self, table: str) -> None:
        super().__init__(
            f"table {table} holds rows but no snapshot in its current history carries a sluice "
            "checkpoint: maintenance (expire_snapshots after a compaction) probably removed it. "
            "Nothing was read, so nothing is duplicated. When expiring snapshots, keep the "
            "newest one with the 'sluice.checkpoint' property (docs/architecture.md, "
            "Maintenance); to start the table over deliberately, drop it.")


class StepCheckpointLostError(SluiceError):
    """The commit carrying a step's checkpoint has left the table's history (Iceberg snapshot
    expiry): restarting the step from batch 0 would duplicate its rows."""

    def __init__(self, table: str, step: str) -> None:
        self.table, self.step = table, step
        super().__init__(
            f"table {table}: no commit in its history carries the {step} step's checkpoint "
            f"(sluice.{step}.batch_id), and older snapshots have been expired, so where {step} "
            "stopped is unknown. Nothing was run, so nothing is duplicated. Restore the table to "
            "a snapshot that still has it (CALL <catalog>.system.rollback_to_snapshot), or drop "
            "the table and the tables after it to rebuild them; when expiring snapshots, keep "
            "the newest one of each step (docs/reliability.md).")


class RowKeyEncodingError(SluiceError):
    """A raw table's rows were keyed with another row key encoding than the job's (#9.7)."""

    def __init__(self, table: str, job: str, stored: str, configured: str) -> None:
        self.table, self.job, self.stored, self.configured = table, job, stored, configured
        super().__init__(
            f"raw table {table} was keyed with row_key_encoding '{stored}' but job {job} uses "
            f"'{configured}': the same row would get another _row_key and the lake two rows "
            f"for it. Nothing was read. Set jobs.{job}.row_key_encoding: {stored} to keep the "
            "table's keys ('joined' joins a composite key's columns with '|', so a value "
            "holding '|' can collide with another row), or start the job over to key it with "
            f"'{configured}': drop its raw, staging and lake tables and run it again (the "
            "topic still holds the changes; docs/architecture.md, \"Row keys\").")


class ReplayError(SluiceError):
    """An error replay cannot be done as asked (nothing to replay, a bad --set)."""


class TapError(SluiceError):
    """The tap cannot go on; its checkpoint stays at the last safe transaction end."""


class IncompatibleSchemaChange(SluiceError):
    """A table's columns changed in a way older readers cannot follow."""


class ColumnTypeChangeError(IncompatibleSchemaChange):
    """New rows carry a column in a type the table's column cannot widen to without loss
    (tables/evolve.py): the job stops before writing, its checkpoint unchanged."""


class PartialRowImage(SluiceError):
    """A rows event leaves out columns the tap cannot do without (a session's
    ``binlog_row_image=MINIMAL`` or ``NOBLOB``): the table stops, naming the setting."""


class UnsupportedColumn(SluiceError):
    """A column the tap cannot represent; stops that table with this message."""


class SchemaRegistryError(SluiceError):
    """A Schema Registry over HTTP cannot be reached, refuses sluice, or lacks a subject; the
    batch stops before any data moves (an unknown schema id is one message's error row)."""


class DecodeError(Exception):  # not a SluiceError: one record's fault, caught per record
    """One message could not become a raw row; the message text goes to the error table."""


class FileParseError(Exception):  # not a SluiceError: one landed file's fault (an error row)
    """A landed file cannot be read as records of its format (sources/files/reader.py)."""


class DispersalError(SluiceError):
    """Copying a lake table's changes to an online store failed; the target's position did
    not move, so the next dispersal sends the same changes again (docs/dispersal.md)."""


class DispersalPositionError(DispersalError):
    """The target's stored position is one the lake no longer has, or another dispersal moved
    it while this one ran."""

    def __init__(self, target: str, problem: str) -> None:
        super().__init__(
            f"dispersal target {target}: {problem}. Nothing was written. If the target was "
            "rebuilt or the lake started over, delete the target's row in sluice_dispersal "
            "(PostgreSQL) or its position file (Kafka): the next dispersal then copies the "
            "whole lake table (docs/dispersal.md).")


class NoHistoryTableError(SluiceError):
    """A job asked for its history (``sluice changes``, ``sluice verify --history``) has
    none."""

    def __init__(self, job: str, lake_model: str | None, table: str | None) -> None:
        if lake_model is None:
            what = (f"job {job} has no lake model, so no history table: add one "
                    "(docs/write-a-converter.md) with history: true in its config")
        else:
            what = (f"job {job} has no history table ({table} does not exist): turn history "
                    f"on in its lake model, {{{{ config(history=true) }}}} in "
                    f"models/lake/.../{lake_model}.sql (or `sluice tap --scaffold "
                    f"--history` for new tables), then run the job: `sluice run {job}`")
        super().__init__(f"{what} (docs/history.md)")
