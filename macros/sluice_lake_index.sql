{#
    The bucket-index settings of a Hudi lake table, empty for a record-index lake (and on
    Iceberg). A new lake (`existing` none) takes them from the model's config: `lake_index`
    (`bucket`, the default, or `record`) and `lake_buckets` (4, Hudi's default bucket count;
    fixed for the table's life). A lake with `keep_tombstones` keeps the record index: its
    deletes update the row in place, which the bucket lake's upsert cannot. An existing lake
    answers from its catalog entry (python_ingest/runtime/catalog.py register gives it the
    settings kept in its .hoodie/sluice_write.properties). docs/index.md, "The lake's own
    index".
#}
{% macro sluice_lake_index(existing) -%}
    {%- if sluice_table_format() != 'hudi' -%}
        {{ return({}) }}
    {%- endif -%}
    {%- if existing is not none -%}
        {%- set found = {} -%}
        {%- for row in run_query('show tblproperties ' ~ existing).rows -%}
            {%- do found.update({row[0]: row[1]}) -%}
        {%- endfor -%}
        {{ return({'hoodie.index.type': 'BUCKET'}
                  if found.get('hoodie.index.type') == 'BUCKET' else {}) }}
    {%- endif -%}
    {%- set index = config.get('lake_index', 'bucket') -%}
    {%- set buckets = config.get('lake_buckets', 4) -%}
    {%- if index not in ('bucket', 'record') -%}
        {{ exceptions.raise_compiler_error(
            "lake model " ~ this ~ ": lake_index is '" ~ index ~ "'; set it to 'bucket' "
            ~ "(Hudi's bucket index, the default) or 'record' (Hudi's record-level index)") }}
    {%- endif -%}
    {%- if buckets is not number or buckets < 1 or buckets != (buckets | int) -%}
        {{ exceptions.raise_compiler_error(
            "lake model " ~ this ~ ": lake_buckets is '" ~ buckets ~ "'; set it to a whole "
            ~ "number of buckets, 1 or more (4 by default; about one per 1-2 GB of the table)") }}
    {%- endif -%}
    {%- if index == 'record' or config.get('keep_tombstones', false) -%}
        {{ return({}) }}
    {%- endif -%}
    {{ return(adapter.sluice_bucket_index(buckets | int)) }}
{%- endmacro %}
