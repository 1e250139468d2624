{#
    The incremental filter of a converter: only raw batches the staging table does not hold yet.
    The staging table's highest _batch_id is its checkpoint: the append of a batch and the
    checkpoint are one Iceberg commit, so a rerun after a crash neither skips nor repeats a batch.
    Put it in the converter's import CTE: `from {{ source(...) }} {{ sluice_new_batches() }}`.
#}
{% macro sluice_new_batches(batch_column='_batch_id') -%}
    {%- if is_incremental() -%}
        where {{ batch_column }} > (select coalesce(max({{ batch_column }}), 0) from {{ this }})
    {%- endif -%}
{%- endmacro %}
