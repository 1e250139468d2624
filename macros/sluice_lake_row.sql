{#
    The select list of the rows a merge writes into a Hudi lake: `columns` (name, type) as
    they are, but `_ref_key`, which a delete takes as the largest bigint, so that every delete
    outranks the row it removes. `_ref_key` is the lake's ordering (preCombine) field, and Hudi
    1.0.2 orders a delete by it when it meets the key's record in an earlier log file of the
    same file slice (HoodieMergedLogRecordScanner: a delete whose ordering value is below that
    record's is dropped, whatever the table's merge mode). The change set already decided that
    the delete applies (a forced delete may be older than the row), so only commit order may
    count, as COMMIT_TIME_ORDERING says. A deleted row is not read back, so the value shows
    nowhere; the index keeps the delete's own ref key (docs/formats.md). batch.py's upsert
    writes the same (python_ingest/steps/batch.py, DELETE_REF_KEY).
#}
{% macro sluice_lake_row(columns, action='_merge_action') -%}
    {%- for name, type in columns %}
    {%- if name == '_ref_key' %}
    case when {{ action }} in ('delete', 'tombstone') then cast(9223372036854775807 as bigint)
         else _ref_key end as `_ref_key`
    {%- else %}
    `{{ name }}`
    {%- endif %}{% if not loop.last %},{% endif %}
    {%- endfor %}
{%- endmacro %}
