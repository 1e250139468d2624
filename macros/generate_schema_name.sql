{#
    Use a model's custom schema as is (staging, lake) instead of dbt's default
    "<target schema>_<custom schema>": sluice's namespaces are fixed (raw, errors, staging,
    lake, meta) and shared with the Python side.
#}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {%- if custom_schema_name is none -%}
        {{ target.schema }}
    {%- else -%}
        {{ custom_schema_name | trim }}
    {%- endif -%}
{%- endmacro %}
