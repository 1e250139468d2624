-- Completed trips with their fare per kilometre: a mart on lake.trips that a plain `dbt run`
-- keeps current, incrementally. Each run takes the lake rows that batches it has not seen yet
-- changed (the lake's _batch_id above the mart's highest) and the trips deleted since (the
-- delete entries of the job's global index: the lake drops deleted rows); a trip that is
-- deleted or no longer
-- completed leaves the mart (macros/spark__get_merge_sql.sql, sluice_delete_when).
{{ config(
    materialized='incremental',
    incremental_strategy='merge',
    unique_key='_row_key',
    sluice_delete_when='dbt_internal_source._is_deleted',
) }}

{%- set lake_ready = sluice_relation_exists(ref('trips'))
    and sluice_relation_exists(source('sluice_meta', 'trips__index')) %}

with

{% if lake_ready %}
lake as (

    select * from {{ ref('trips') }}

),

tombstones as (

    select _row_key, _batch_id from {{ source('sluice_meta', 'trips__index') }}
    where _is_deleted

),
{% else %}
-- the lake table is not built yet (its job was held by another run): the mart starts empty
-- and its next run takes every lake row
    lake as (

        select
            cast(null as string) as _row_key,
            cast(null as bigint) as trip_id,
            cast(null as string) as city_name,
            cast(null as date) as requested_on,
            cast(null as decimal(10, 2)) as fare_amount,
            cast(null as decimal(10, 3)) as distance_km,
            cast(null as boolean) as is_completed,
            cast(null as bigint) as _batch_id
        where false

    ),

    tombstones as (

        select
            cast(null as string) as _row_key,
            cast(null as bigint) as _batch_id
        where false

    ),
{% endif %}

{% if is_incremental() %}
seen as (

    select coalesce(max(_lake_batch_id), 0) as batch_id from {{ this }}

),
{% endif %}

changed as (

    select
        _row_key,
        trip_id,
        city_name,
        requested_on,
        fare_amount,
        distance_km,
        _batch_id as _lake_batch_id,
        not is_completed as _is_deleted
    from lake
    {% if is_incremental() %}
    where _batch_id > (select batch_id from seen)
    {% endif %}

),

deleted as (

    select
        _row_key,
        cast(null as bigint) as trip_id,
        cast(null as string) as city_name,
        cast(null as date) as requested_on,
        cast(null as decimal(10, 2)) as fare_amount,
        cast(null as decimal(10, 3)) as distance_km,
        _batch_id as _lake_batch_id,
        true as _is_deleted
    from tombstones
    {% if is_incremental() %}
    where _batch_id > (select batch_id from seen)
    {% else %}
        where false
    {% endif %}

),

latest as (

    -- a trip deleted, then inserted again (or the reverse): its latest batch decides
    select * from changed
    union all
    select * from deleted

),

ranked as (

    select
        *,
        row_number() over (
            partition by _row_key order by _lake_batch_id desc, trip_id is null
        ) as _rank
    from latest

),

final as (

    select
        _row_key,
        trip_id,
        city_name,
        requested_on,
        fare_amount,
        distance_km,
        cast(fare_amount / nullif(distance_km, 0) as decimal(12, 2)) as fare_per_km,
        _lake_batch_id,
        _is_deleted
    from ranked
    where
        _rank = 1
        {% if not is_incremental() %}
            and not _is_deleted
        {% endif %}

)

select * from final
