-- Converter of the demo trips changelog: names, types and a few derived columns.
-- Incremental: each run appends exactly the raw batches not converted yet.

with

source as (

    select * from {{ source('demo', 'trips') }}
    {{ sluice_new_batches() }}

),

converted as (

    {{ demo_trips_converted('source') }}

)

select * from converted
