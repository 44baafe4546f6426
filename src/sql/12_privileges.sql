-- Privileges. PUBLIC gets nothing; each role gets exactly what it is for.
-- Functions that write run as the extension owner with a pinned search_path;
-- the C verdict functions read the catalog directly, so EXECUTE on them is
-- the whole permission.

REVOKE ALL ON ALL TABLES IN SCHEMA @extschema@ FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA @extschema@ FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA @extschema@ FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA finalize_internal FROM PUBLIC;

-- Sensors: the verdict, its explanation, the status views.
GRANT EXECUTE ON FUNCTION
    @extschema@.finalized_until(text),
    @extschema@.is_final(text, timestamptz),
    @extschema@.finalized_until(text[]),
    @extschema@.is_final(text[], timestamptz),
    @extschema@.wait_final(text, timestamptz, interval),
    @extschema@.wait_final(text[], timestamptz, interval),
    @extschema@.explain_verdict(text, timestamptz),
    @extschema@.period_start(timestamptz, interval),
    @extschema@.period_end(timestamptz, interval),
    @extschema@.period_start(timestamptz, interval, text),
    @extschema@.period_end(timestamptz, interval, text),
    @extschema@.mssql_local_to_instant(timestamp, text),
    @extschema@.dropped_notifications(),
    -- Internal, for finalize.status (whose readers call them): whether a
    -- loss holds a table, its verdict as the sensors tell it, where
    -- tracking began, and an instant in the table's zone.
    finalize_internal.loss_holds(bigint),
    finalize_internal.sensor_until(bigint, text, timestamptz, interval, text, boolean),
    finalize_internal.tracked_since(bigint),
    finalize_internal.local_time(timestamptz, text)
    TO finalize_reader;
GRANT SELECT ON @extschema@.status, @extschema@.consumers TO finalize_reader;

-- Pipelines report how far they got, and nothing else that writes (they
-- also read what readers read). Whether a role may report for a given
-- consumer is checked by the functions (the consumer's reporter).
GRANT EXECUTE ON FUNCTION
    @extschema@.report_progress(text, text, text),
    @extschema@.report_processed(text, text, timestamptz)
    TO finalize_pipeline;

-- Publishers also read the facts behind a partition.
GRANT SELECT ON @extschema@.facts TO finalize_publisher;
GRANT EXECUTE ON FUNCTION
    @extschema@.changes_by_period(text, timestamptz, timestamptz)
    TO finalize_publisher;

-- Admins manage tracked tables, may record ranges by hand (the worker's write
-- path) and read the catalog tables.
GRANT EXECUTE ON FUNCTION
    @extschema@.track_table(text, text, text, interval, text, text, text,
                            text, text, text, interval, double precision, interval, text),
    @extschema@.untrack_table(text, boolean, boolean),
    @extschema@.alter_tracked_table(text, interval, text, text, text, text, text, interval,
                                    double precision, interval, interval, text),
    @extschema@.resume_table(text),
    @extschema@.release_source(text),
    @extschema@.record_range(text, text, text, timestamptz, bigint, bigint, bigint,
                             timestamptz, timestamptz, text, text, jsonb,
                             jsonb, bytea, timestamptz, timestamptz),
    @extschema@.purge_facts(interval),
    @extschema@.quote_mssql_ident(text)
    TO finalize_admin;
GRANT SELECT ON @extschema@.tracked_table, @extschema@.watermark,
                @extschema@.fact, @extschema@.source_status, @extschema@.table_condition
    TO finalize_admin;
GRANT SELECT ON @extschema@.source_workers TO finalize_admin;
-- A view's functions run with the reader's privileges: the admin needs its function too.
GRANT EXECUTE ON FUNCTION finalize_internal.source_workers() TO finalize_admin;

-- Admins declare consumers and derived tables and acknowledge losses (and,
-- as members of finalize_pipeline, may report for any consumer).
GRANT EXECUTE ON FUNCTION
    @extschema@.add_consumer(text, text, boolean, regrole),
    @extschema@.add_consumer(text, text, text, text, text, text, boolean),
    @extschema@.add_consumer(text, text, @extschema@.delta_location, text, text, boolean),
    @extschema@.alter_consumer(text, text, boolean, regrole, boolean),
    @extschema@.drop_consumer(text, text),
    @extschema@.track_derived(text, text[], interval, text),
    @extschema@.acknowledge_loss(text, timestamptz, timestamptz, text)
    TO finalize_admin;
GRANT SELECT ON @extschema@.consumer, @extschema@.consumer_hold, @extschema@.derived_input, @extschema@.loss,
                @extschema@.loss_ack, @extschema@.lake_consumer
    TO finalize_admin;

-- Admins track sharded tables and their shards.
GRANT EXECUTE ON FUNCTION
    @extschema@.track_sharded(text, interval, text, text, text, text, text, interval,
                              double precision, interval, text),
    @extschema@.add_shard(text, text, text, text, text),
    @extschema@.drop_shard(text, text, boolean)
    TO finalize_admin;
GRANT SELECT ON @extschema@.shard_consumer TO finalize_admin;

-- The release gate: publishers release and read releases; readers see the
-- published generation; admins manage the catalog view.
GRANT EXECUTE ON FUNCTION
    @extschema@.released_generation(text, text),
    @extschema@.render_location(text, timestamptz),
    @extschema@.render_location(text, timestamptz, text),
    @extschema@.render_location(text, timestamptz, text, text)
    TO finalize_reader;
GRANT EXECUTE ON FUNCTION
    @extschema@.release_gate(jsonb),
    @extschema@.compare_inventories(jsonb, jsonb, text),
    @extschema@.register_partition(text, text, text, timestamptz, timestamptz),
    @extschema@.retired_generations(text, interval),
    @extschema@.release_iceberg(jsonb)
    TO finalize_publisher;
GRANT SELECT ON @extschema@.releases TO finalize_publisher;
GRANT EXECUTE ON FUNCTION
    @extschema@.set_projection(text, text, timestamptz, timestamptz),
    @extschema@.release_report(bigint)
    TO finalize_admin;
GRANT SELECT ON @extschema@.partition_registration, @extschema@.projection,
                @extschema@.release, @extschema@.published
    TO finalize_admin;

-- Event time: readers see late data and the lateness their verdict uses,
-- publishers the rows per event period, admins the tables behind them.
GRANT SELECT ON @extschema@.late_data TO finalize_reader;
GRANT EXECUTE ON FUNCTION
    @extschema@.lateness(text, double precision, interval)
    TO finalize_reader;
GRANT EXECUTE ON FUNCTION
    @extschema@.changes_by_event_period(text, timestamptz, timestamptz)
    TO finalize_publisher;
GRANT SELECT ON @extschema@.event_fact, @extschema@.lateness_hour, @extschema@.late_period
    TO finalize_admin;

-- Alerts: readers see the incidents, admins acknowledge them.
GRANT SELECT ON @extschema@.alerts TO finalize_reader;
GRANT EXECUTE ON FUNCTION @extschema@.acknowledge_alert(bigint, text) TO finalize_admin;
GRANT SELECT ON @extschema@.alert TO finalize_admin;
-- Webhook deliveries: readers see them (what reached whom), admins the
-- queue and the targets' breakers.
GRANT SELECT ON @extschema@.alert_deliveries TO finalize_reader;
GRANT SELECT ON @extschema@.alert_delivery, @extschema@.alert_target_state TO finalize_admin;

-- Publications (docs/publishing.md): admins declare and watch them.
GRANT EXECUTE ON FUNCTION
    @extschema@.add_publication(text, text, text, jsonb, timestamptz),
    @extschema@.drop_publication(text, text),
    @extschema@.retry_publication(text, text)
    TO finalize_admin;
GRANT SELECT ON @extschema@.publications, @extschema@.publication, @extschema@.publication_event TO finalize_admin;
