"""A JSON Debezium job follows a column added or widened at the source, in the same run.

Every JsonConverter message (``schemas.enable=true``) carries its row's schema; a read task
that meets one adding a column or widening one (changelog/debezium_json.py) stops the read
with a ``ReadError`` naming the new Avro fields. The ingest step (steps/ingest/land.py) hands that
error to ``follow``, which widens the job's ``.avsc`` as ``sluice debezium scaffold`` would
(a new column appended; a wider type taken, the former one kept in the field's
``sluice.older_types`` so the batch's older messages still read), and the step then reads the
batch again with the widened schema: the raw table gains or widens the columns before the
append (``ensure_table``), the staging and lake tables in the same run's dbt models, as for
an Avro job's new registry version. Nothing of the stopped read was committed (its checkpoint
did not move; Hudi rolls back the pending write before the ALTER).

The ``.avsc`` is replaced whole (a new file renamed over the old): a reader of the project
sees the old schema or the new one. Only a job whose ``.avsc`` is the row record (what the
scaffold writes) is followed; one holding the whole envelope stops with the error.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from python_ingest.changelog.debezium_json import followed, widened_row
from python_ingest.config import DEBEZIUM, JobConfig, Settings
from python_ingest.exceptions import SluiceError

log = logging.getLogger(__name__)

MAX_FOLLOWS = 16  # changes one batch follows before it stops (each read costs a pass)


def schema_file(settings: Settings, job: JobConfig) -> Path | None:
    """The job's ``.avsc`` when it is one ``follow`` may widen."""
    if job.source != DEBEZIUM or job.value_format != "json" or not job.schema:
        return None
    path = Path(job.schema)
    return path if path.is_absolute() else settings.root / path


def follow(settings: Settings, job: JobConfig, error: SluiceError) -> list[str]:
    """Widen ``job``'s ``.avsc`` with the columns ``error`` (a read stopped by a message of a
    newer schema) names; what changed (empty: nothing to follow, the error stands)."""
    fields = followed(str(error))
    path = schema_file(settings, job)
    if fields is None or path is None:
        return []
    row = json.loads(path.read_text())
    if {"op", "after"} <= {f.get("name") for f in row.get("fields", [])}:
        return []  # a whole envelope: the user's own file
    widened, changes = widened_row(row, fields, job.name)
    if not changes:
        return []
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(json.dumps(widened, indent=2) + "\n")
        os.replace(temporary, path)
    except OSError as exc:  # a read-only project: the stop stands, the change said
        log.error("job %s: cannot widen %s (%s): %s", job.name, job.schema, exc,
                  "; ".join(changes))
        return []
    log.warning("job %s: its Debezium events changed at the source: %s; %s follows them "
                "(the batch is read again)", job.name, "; ".join(changes), job.schema)
    return changes
