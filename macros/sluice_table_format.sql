{#
    The table format every sluice table is written in: `hudi` (default) or `iceberg`, from
    SLUICE_TABLE_FORMAT (the runner sets it from sluice.yml's table_format; docs/formats.md).
#}
{% macro sluice_table_format() -%}
    {{ return(env_var('SLUICE_TABLE_FORMAT', 'hudi') | trim | lower) }}
{%- endmacro %}
