-- The demo trips as the file drops tell them (job trips_files): one row per trip.
-- depends_on: {{ ref('stg_demo__trips_files') }}
{{ config(keep_tombstones=false) }}

{{ sluice_merge_changes(
    changes=source('fork', 'stg_demo__trips_files__valid'),
    columns=['trip_id', 'rider_id', 'driver_id', 'city_name', 'trip_status', 'is_completed',
             'fare_amount', 'distance_km', 'requested_at', 'requested_on'],
    batch_id=var('sluice_batch_id'),
    current=(this if sluice_has_target() else none),
    tombstones=sluice_tombstone_relation(),
) }}
