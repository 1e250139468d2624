-- The current state of the demo trips table: one row per trip, merged batch by batch; and
-- its history, lake.trips__history: every change of a trip a version (docs/history.md).
-- depends_on: {{ ref('stg_demo__trips') }}
{{ config(keep_tombstones=false, history=true) }}

{{ sluice_merge_changes(
    changes=source('fork', 'stg_demo__trips__valid'),
    columns=['trip_id', 'rider_id', 'driver_id', 'city_name', 'trip_status', 'is_completed',
             'fare_amount', 'distance_km', 'requested_at', 'requested_on'],
    batch_id=var('sluice_batch_id'),
    current=(this if sluice_has_target() else none),
    tombstones=sluice_tombstone_relation(),
) }}
