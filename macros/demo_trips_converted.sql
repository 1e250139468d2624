{#
    The demo trips changelog converted: names, types and a few derived columns. One conversion
    for the demo's two converters (stg_demo__trips from its topic, stg_demo__trips_files from
    the same events dropped as files), so that both land the same rows.
#}
{% macro demo_trips_converted(relation) -%}
    select
        cast(trip_id as bigint) as trip_id,
        cast(rider_id as bigint) as rider_id,
        cast(driver_id as bigint) as driver_id,
        initcap(trim(city)) as city_name,
        lower(trim(status)) as trip_status,
        lower(trim(status)) = 'completed' as is_completed,
        cast(fare as decimal(10, 2)) as fare_amount,
        cast(distance_km as decimal(10, 3)) as distance_km,
        requested_at,
        to_date(requested_at) as requested_on,
        {{ sluice_changed_columns({
            'trip_id': 'trip_id',
            'rider_id': 'rider_id',
            'driver_id': 'driver_id',
            'city': 'city_name',
            'status': ['trip_status', 'is_completed'],
            'fare': 'fare_amount',
            'distance_km': 'distance_km',
            'requested_at': ['requested_at', 'requested_on'],
        }) }} as _changed_columns,
        {{ sluice_meta_columns() }}
    from {{ relation }}
{%- endmacro %}
