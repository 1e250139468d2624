{#
    Translate a partial update's _changed_columns (source column names) into the converter's
    column names, so the merge knows which staging columns a partial update sets.
    `mapping` maps each source column to the staging columns derived from it; a derived column
    must be listed under every source column it is computed from (and should depend on one
    source column only: a partial update carries only the columns it changes).
    Full rows (_changed_columns null) stay null.
#}
{% macro sluice_changed_columns(mapping, column='_changed_columns') -%}
    case
        when {{ column }} is null then cast(null as array<string>)
        else filter(
            array(
                {%- for source_column, targets in mapping.items() %}
                {%- for target_column in ([targets] if targets is string else targets) %}
                if(array_contains({{ column }}, '{{ source_column }}'), '{{ target_column }}', null)
                {%- if not loop.last %},{% endif %}
                {%- endfor %}
                {%- if not loop.last %},{% endif %}
                {%- endfor %}
            ),
            changed -> changed is not null
        )
    end
{%- endmacro %}
