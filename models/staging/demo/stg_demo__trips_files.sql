-- Converter of the demo trips file drops (job trips_files, source: files): the same changelog
-- events as the demo.trips topic, landed from a partitioned landing dir; the same conversion.
-- Incremental: each run appends exactly the raw batches not converted yet.

with

source as (

    select * from {{ source('demo', 'trips_files') }}
    {{ sluice_new_batches() }}

),

converted as (

    {{ demo_trips_converted('source') }}

)

select * from converted
