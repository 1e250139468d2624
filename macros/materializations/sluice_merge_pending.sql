{#-
    A plain `dbt run` of a lake model (lake_merge without the runner's vars): sluice takes the
    job's lease, forks what the converter staged and names the batches the lake has yet to
    merge (adapter.sluice_plan_lake; a job another run holds is left as it is); each batch is
    merged by sluice_apply_change_set, its commits carrying the runner's merge checkpoint; a
    model with history: true then gets its history's missing batches; sluice_finish records
    the run and releases the lease (python_ingest/steps/transform.py).
-#}
{% macro sluice_merge_pending(target) -%}
    {%- if adapter.sluice_plan_lake is not defined -%}
        {{ log("skipping " ~ this ~ ": lake models are merged by `sluice run <job>` (or a "
               ~ "`dbt run` with sluice's dbt_sluice plugin installed)", info=true) }}
        {{ return(none) }}
    {%- endif -%}
    {%- set staging_nodes = [] -%}
    {%- for node_id in model.depends_on.nodes if node_id.startswith('model.') -%}
        {%- set node = graph.nodes[node_id] -%}
        {%- if sluice_job_of(node) is not none -%}
            {%- do staging_nodes.append(node) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- if staging_nodes | length != 1 -%}
        {{ exceptions.raise_compiler_error(this ~ " must depend on exactly one converter (a "
           ~ "model reading a raw table); found " ~ staging_nodes | length) }}
    {%- endif -%}
    {%- set job = sluice_job_of(staging_nodes[0]) -%}
    {%- set plan = adapter.sluice_plan_lake(job, staging_nodes[0].name, this.identifier) -%}
    {%- if plan.skip is defined -%}
        {{ log("leaving " ~ this ~ " as it is: " ~ plan.skip, info=true) }}
        {{ return(none) }}
    {%- endif -%}
    {%- for step in plan.batches -%}
        {%- do adapter.sluice_begin_merge(job, step.batch_id, step.skip) -%}
        {%- set counts = sluice_apply_change_set(render(model.raw_code), target, step.skip,
                                                 job) -%}
        {{ log("merged batch " ~ step.batch_id ~ " of job " ~ job ~ " into " ~ target ~ ": "
               ~ counts, info=true) }}
    {%- endfor -%}
    {%- if config.get('history', false) -%}
        {#- the history table (python_ingest/steps/history/): every merged batch it lacks -#}
        {%- do adapter.sluice_history(job, {
                'history': true, 'hard_deletes': config.get('hard_deletes', 'invalidate'),
                'track_history_on': config.get('track_history_on', none),
                'track_history_except': config.get('track_history_except', none),
                'valid_to_current': config.get('valid_to_current', none)}) -%}
    {%- endif -%}
    {%- set totals = adapter.sluice_finish(job) -%}
    {{ log(target ~ ": " ~ plan.batches | length ~ " batch(es) merged " ~ totals, info=true) }}
{%- endmacro %}
