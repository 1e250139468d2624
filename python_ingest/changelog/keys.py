"""The last step of every row key sluice makes: a key's text never empty (issue #50.2).

Hudi refuses an empty record key (``HoodieKeyException: recordKey value: "" ... cannot be null
or empty``), and the lake tables are keyed by ``_row_key``: one source row whose key text is
the empty string (a text primary key holding ``''``, an empty bytes key) failed every later
merge of its job, so none of the table's rows reached the lake. Every ``_row_key`` of a Hudi
job (the ingestion decoder's, for Kafka and file sources and replays) and every tap's Kafka key
(binlog and PostgreSQL, equal to the ``_row_key`` the decoder makes of the event) goes through
``row_key_text`` after the key's text is made (one column's text, a composite key's joined
or JSON text, ``sluice_row_id``):

- the empty text becomes ``EMPTY_KEY`` (U+2205, ``∅``);
- a text made only of ``EMPTY_KEY`` characters gets one more (``∅`` becomes ``∅∅``), so no
  other key lands where the empty one does;
- every other text is itself.

The encoding is total, injective and never empty, and it leaves every key that could land
before as it was, except texts made only of ``∅`` (docs/architecture.md, "Row keys"). Iceberg
takes an empty key, and its lakes hold such keys: an Iceberg job's ``_row_key`` stays the text
as it is (``ChangelogSchema.empty_key``). Nothing maps ``_row_key`` back to key values
(`sluice verify` compares the key columns themselves), so nothing decodes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

EMPTY_KEY = "\u2205"  # ∅ EMPTY SET: the row key of the empty text
# a UTF-8 key that ``key.strip(EMPTY_KEY_BYTES)`` leaves empty may change (the PostgreSQL tap's
# fast path hands such keys to the general path, which calls row_key_text)
EMPTY_KEY_BYTES = EMPTY_KEY.encode("utf-8")


def row_key_text(text: str) -> str:
    """``text`` as a row key: ``''`` is ``∅``, a text of ``∅`` only gets one more, any other
    text is itself (the module doc)."""
    if text.strip(EMPTY_KEY):
        return text
    return text + EMPTY_KEY


def row_key_column(texts: pa.Array) -> pa.Array:
    """``row_key_text`` of every value of a string column (nulls stay null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    marked = pc.equal(pc.utf8_length(pc.utf8_trim(texts, EMPTY_KEY)), 0)
    if not pc.any(marked).as_py():
        return texts
    more = pc.binary_join_element_wise(texts, pa.scalar(EMPTY_KEY), "")
    return pc.if_else(marked, more, texts)
