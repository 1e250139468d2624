{#
    The row keys a batch of `changes` updates partially (changes naming _changed_columns):
    the only keys whose current lake row the merge reads. A list of at most 1000 keys (the
    merge then reads the lake with a literal IN list, which the formats prune files by),
    [] when there are none (the lake is not read at all), else a subquery. Compiled for the
    runner's batch path (var sluice_compile): a placeholder the runner fills in per batch.
#}
{% macro sluice_partial_keys(changes, batch_id) -%}
    {%- set query -%}
        select distinct _row_key from {{ changes }}
        where _batch_id = {{ batch_id }}
            and _changed_columns is not null
            and not coalesce(_is_deleted, false)
    {%- endset -%}
    {%- if not execute -%}
        {{ return(query) }}
    {%- endif -%}
    {%- if var('sluice_compile', false) -%}
        {{ return('__SLUICE_PARTIAL_KEYS__') }}
    {%- endif -%}
    {%- set found = run_query(query ~ ' limit 1001').columns[0].values() | list -%}
    {{ return(found if found | length <= 1000 else query) }}
{%- endmacro %}
