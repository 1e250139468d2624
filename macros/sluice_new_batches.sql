{#
    The incremental filter of a converter: only raw batches the staging table does not hold yet.
    The staging table's highest _batch_id is its checkpoint: the append of a batch and the
    checkpoint are one commit, so a rerun after a crash neither skips nor repeats a batch.
    Put it in the converter's import CTE: `from {{ source(...) }} {{ sluice_new_batches() }}`.

    Compiled for the runner's batch path (var sluice_compile, python_ingest/steps/batch.py):
    a range of raw batches with placeholders the runner fills in for each batch, so the
    converter runs as a view over the batch's raw rows without a dbt invocation.

    In a plain `dbt run` it first takes the job's lease (python_ingest/steps/transform.py):
    when another run holds the job (a runner, `sluice run`), the converter adds nothing and
    the log says who holds it, so the two never stage, fork or merge a batch twice.
#}
{% macro sluice_new_batches(batch_column='_batch_id') -%}
    {#- only commands that write (not compile, show, docs): they must not take a lease -#}
    {%- set writes = execute and flags.WHICH in ['run', 'build', 'retry'] -%}
    {%- set job = sluice_job_of(model) if writes else none -%}
    {%- set held_by = adapter.sluice_hold(job)
                      if job is not none and adapter.sluice_hold is defined else none -%}
    {%- if var('sluice_compile', false) -%}
        where {{ batch_column }} between __SLUICE_BATCH_FROM__ and __SLUICE_BATCH_TO__
    {%- elif held_by is not none -%}
        {{ log("leaving " ~ this ~ " as it is: " ~ held_by, info=true) }}
        where false
    {%- elif is_incremental() -%}
        where {{ batch_column }} > (select coalesce(max({{ batch_column }}), 0) from {{ this }})
    {%- endif -%}
{%- endmacro %}
