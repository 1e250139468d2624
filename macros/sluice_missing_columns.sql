{#
    The merge's columns the current (lake) table does not have yet, with their types in the
    change set: {column (lowercase): type}. Such a column was added to the source since the
    last merge; the merge reads it as null in every current row and the materialization adds
    it to the lake table. Empty at parse time and when the current table's columns are unknown.
    Compiled for the runner's batch path (var sluice_compile) the change set's columns come
    from var sluice_changes_columns ({name: type}): its rows are a view, not a table.
#}
{% macro sluice_missing_columns(current, changes, columns) -%}
    {%- set missing = {} -%}
    {%- if not execute -%}
        {{ return(missing) }}
    {%- endif -%}
    {%- set present = [] -%}
    {%- for column in adapter.get_columns_in_relation(current) -%}
        {%- do present.append(column.name | lower) -%}
    {%- endfor -%}
    {%- set absent = columns | map('lower') | reject('in', present) | list -%}
    {%- if present and absent -%}
        {%- if var('sluice_compile', false) -%}
            {%- for name, dtype in var('sluice_changes_columns', {}).items() -%}
                {%- if name | lower in absent -%}
                    {%- do missing.update({name | lower: dtype}) -%}
                {%- endif -%}
            {%- endfor -%}
        {%- else -%}
            {%- for column in adapter.get_columns_in_relation(changes) -%}
                {%- if column.name | lower in absent -%}
                    {%- do missing.update({column.name | lower: column.dtype}) -%}
                {%- endif -%}
            {%- endfor -%}
        {%- endif -%}
    {%- endif -%}
    {{ return(missing) }}
{%- endmacro %}
