{#
    dbt-spark's `using <format>` of a model's create statement, overridden so that a model in
    one of the lakehouse formats is created in the format of the session it runs on
    (sluice_table_format, read while the model runs): a job whose own table_format differs from
    the project's (docs/formats.md) gets its staging tables in its own format, although dbt
    rendered the project's format into every model's config when it parsed the project once.
    Any other file_format a model sets (parquet, delta, ...) is used as it is.
#}
{% macro spark__file_format_clause() %}
    {%- set file_format = config.get('file_format', validator=validation.any[basestring]) -%}
    {%- if file_format in ('hudi', 'iceberg') %}
    using {{ sluice_table_format() }}
    {%- elif file_format is not none %}
    using {{ file_format }}
    {%- endif %}
{%- endmacro %}
