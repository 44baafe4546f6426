-- finalize 0.2.0 to 0.3.0, after the rerunnable parts: the data
-- migrations and constraints that call the functions 0.3.0 brings.

ALTER TABLE @extschema@.tracked_table
    ADD CONSTRAINT tracked_table_period_zone_check CHECK (finalize_internal.zone_valid(period_zone));
CREATE FOREIGN DATA WRAPPER finalize_iceberg
    VALIDATOR finalize_internal.iceberg_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_iceberg IS
    'Iceberg REST catalogs whose tables'' snapshots say how far a pipeline got (finalize.add_consumer(..., iceberg_server => ...))';
GRANT USAGE ON FOREIGN DATA WRAPPER finalize_iceberg TO finalize_admin;

-- Late rows are kept as the span of the event period they landed in
-- (issue 41: purge_facts keeps them, and the periods of such a table may
-- change once its event facts are purged). Until now a table that had late
-- rows kept its periods, so each span is its period in the table's
-- periods of today.
UPDATE @extschema@.late_period l
   SET period_end = @extschema@.period_end(l.event_period, t.granularity, t.period_zone)
  FROM @extschema@.tracked_table t
 WHERE t.table_id = l.table_id;
ALTER TABLE @extschema@.late_period ALTER COLUMN period_end SET NOT NULL,
    ADD CHECK (period_end > event_period);
COMMENT ON COLUMN @extschema@.late_period.period_end IS
    'The end of the period the late rows landed in, in the periods the table had then: the span holds them whatever its periods are now';
UPDATE @extschema@.tracked_table t
   SET period_zone = t.period_zone, event_time_zone = t.event_time_zone
 WHERE t.period_zone IS DISTINCT FROM finalize_internal.check_zone(t.period_zone, 'period_zone')
    OR t.event_time_zone IS DISTINCT FROM CASE WHEN t.event_time_zone IS NOT NULL
                                              THEN finalize_internal.check_zone(t.event_time_zone, 'event_time_zone') END;

-- What each table's sensors answer now is what was announced last: the
-- first notification after the update names it as "old".
UPDATE @extschema@.watermark w
   SET announced_until = finalize_internal.sensor_until(w.table_id, t.kind, w.finalized_until, t.granularity, t.period_zone,
                                                   w.loss_blocked)
  FROM @extschema@.tracked_table t
 WHERE t.table_id = w.table_id;
-- Where each table's observation began: its first range's end, or for a
-- table whose first facts retention removed, the end of the oldest kept.
UPDATE @extschema@.watermark w
   SET tracked_since = (SELECT min(f.end_commit_time) FROM @extschema@.fact f
                         WHERE f.table_id = w.table_id AND f.kind = 'range');

-- The catalog being updated is whole: seal it (a fresh install is sealed
-- by its first tracked table).
INSERT INTO @extschema@.catalog_seal DEFAULT VALUES;

-- Functions 0.3.0 no longer has, or has with another signature: dropped
-- once the functions above that called them have been made again.
DROP FUNCTION finalize_internal.store_offsets(bigint[], @extschema@.lsn[], timestamptz[]);
DROP FUNCTION finalize_internal.consumer_until(text, interval, timestamptz, timestamptz);
DROP FUNCTION finalize_internal.inputs_until(bigint, interval);
DROP FUNCTION finalize_internal.loss_span(timestamptz, timestamptz, interval);
DROP FUNCTION finalize_internal.event_bound(timestamptz, interval, interval);
DROP FUNCTION finalize_internal.period_facts(text, timestamptz);
DROP FUNCTION finalize_internal.late_data_problem(text, text, timestamptz, timestamptz);
DROP FUNCTION finalize_internal.period_final(timestamptz, interval, timestamptz);
DROP FUNCTION finalize_internal.periods(timestamptz, timestamptz, interval);
DROP FUNCTION @extschema@.track_table(text, text, text, interval, text, text, text, text, text, text, interval,
                                      double precision, interval);
DROP FUNCTION finalize_internal.track_table(name, text, text, text, interval, text, text, text, text, text, text,
                                       interval, double precision, interval);
DROP FUNCTION @extschema@.alter_tracked_table(text, interval, text, text, text, text, text, interval,
                                              double precision, interval, interval);
DROP FUNCTION @extschema@.track_derived(text, text[], interval);
DROP FUNCTION finalize_internal.track_derived(name, text, text[], interval);
DROP FUNCTION @extschema@.register_partition(text, text, text);
DROP FUNCTION finalize_internal.register_partition(name, text, text, text);
DROP FUNCTION finalize_internal.record_range(bigint, text, text, timestamptz, bigint, bigint, bigint, timestamptz,
                                        timestamptz, text, text, jsonb, jsonb, bytea, timestamptz, timestamptz);
DROP FUNCTION finalize_internal.refresh_derived(text);
DROP FUNCTION finalize_internal.consumer_resolved(bigint, text, text, text, timestamptz);
DROP FUNCTION finalize_internal.record_ranges(bigint[], text[], text[], timestamptz[], bigint[], bigint[], bigint[],
                                         timestamptz[], timestamptz[], text[]);
DROP FUNCTION finalize_internal.resume_after_loss(bigint, text, timestamptz, timestamptz, text, boolean, jsonb);
DROP FUNCTION finalize_internal.gate_catalog(bigint, text, timestamptz);
DROP FUNCTION finalize_internal.catalog_view(bigint, text, timestamptz);
