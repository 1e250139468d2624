{#
    The job a converter belongs to: the raw table (source with schema raw) the model reads;
    none for a model that reads none.
#}
{% macro sluice_job_of(node) -%}
    {%- for node_id in node.depends_on.nodes if node_id.startswith('source.') -%}
        {%- set source_node = graph.sources[node_id] -%}
        {%- if source_node.schema == 'raw' -%}
            {{ return(source_node.identifier) }}
        {%- endif -%}
    {%- endfor -%}
    {{ return(none) }}
{%- endmacro %}
