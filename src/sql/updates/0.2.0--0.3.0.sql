-- finalize 0.2.0 to 0.3.0: the hand-written step, what cannot simply be run
-- again (new tables and columns, changed constraints, functions whose
-- signature changed or that are gone). The Makefile puts it between
-- src/sql/updates/pre-update.sql and the rerunnable parts of src/sql/,
-- which (re)create every function, view and grant; what needs those runs
-- after them, in 0.2.0--0.3.0.post.sql. Every existing table gets
-- period_zone 'UTC', whose periods are the ones 0.2.0 computed.

-- 1. The period arithmetic in a zone (src/core/period.c): the forms of
-- period_start and period_end with a zone, the zone checks, and the
-- internal functions that take the table's zone. _check_granularity and
-- _granularity_valid keep their names and now also take calendar months.

-- 2. A table's zone. The functions with SQL bodies that take a
-- tracked_table row block adding a column to it: they are made again in 5.
DROP FUNCTION @extschema@._final(@extschema@.tracked_table, @extschema@.watermark, timestamptz);
DROP FUNCTION @extschema@._explain_event_time(@extschema@.tracked_table, @extschema@.watermark, timestamptz);
DROP FUNCTION @extschema@._explain_consumers(@extschema@.tracked_table, timestamptz);
DROP FUNCTION @extschema@._explain_losses(@extschema@.tracked_table, timestamptz, timestamptz);
DROP FUNCTION @extschema@._explain_final(@extschema@.tracked_table, @extschema@.watermark, timestamptz, timestamptz);

-- Every existing table's periods stay UTC's. A
-- granularity of whole weeks written in days ('7 days') now means ISO weeks
-- from Monday; 0.2.0 counted it from Saturday 2000-01-01, which the same
-- length written in hours keeps: so such a table keeps its periods.
ALTER TABLE @extschema@.tracked_table
    ADD COLUMN period_zone text NOT NULL DEFAULT 'UTC';
COMMENT ON COLUMN @extschema@.tracked_table.period_zone IS
    'IANA zone the table''s periods are cut in: local days, weeks, months and hours (UTC: as before 0.3.0)';
DO $weeks$
DECLARE
    kept text;
BEGIN
    WITH moved AS (
        UPDATE @extschema@.tracked_table t
           SET granularity = pg_catalog.make_interval(hours => pg_catalog.date_part('day', t.granularity)::integer * 24)
         WHERE pg_catalog.date_part('day', t.granularity)::integer % 7 = 0
           AND pg_catalog.date_part('day', t.granularity) <> 0
           AND t.granularity = pg_catalog.make_interval(days => pg_catalog.date_part('day', t.granularity)::integer)
        RETURNING t.table_name)
    SELECT pg_catalog.string_agg(m.table_name, ', ' ORDER BY m.table_name) INTO kept FROM moved m;
    IF kept IS NOT NULL THEN
        RAISE WARNING 'the granularity of tables % is now written in hours, which keeps their periods', kept
            USING DETAIL = 'Whole weeks written in days are ISO weeks from Monday since 0.3.0; these tables counted theirs from Saturday 2000-01-01.',
                  HINT = 'To cut them in ISO weeks, run finalize.alter_tracked_table(name, granularity => ''1 week'').';
    END IF;
END
$weeks$;

-- 3. Partitions bound to their periods: a registration records the
-- periods its partition holds, an attempt the periods it was checked for.
ALTER TABLE @extschema@.partition_registration
    ADD COLUMN period_start timestamptz,
    ADD COLUMN period_end timestamptz,
    ADD CONSTRAINT partition_registration_period_check
        CHECK ((period_start IS NULL) = (period_end IS NULL) AND period_end > period_start);
COMMENT ON COLUMN @extschema@.partition_registration.period_start IS
    'The periods the partition holds, [period_start, period_end), whole periods of its table (NULL: not registered; the manifest must give them)';
ALTER TABLE @extschema@.release ADD COLUMN period_end timestamptz;
COMMENT ON COLUMN @extschema@.release.period_end IS
    'With period_start: the periods the release held and was checked for, [period_start, period_end)';

-- Whether this process is one of finalize's background workers, whose
-- transactions end within milliseconds (src/core/background.c).

CREATE TABLE @extschema@.consumer_hold (
    table_id          bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    consumer          text COLLATE "C" NOT NULL,
    since             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_id, consumer)
);
COMMENT ON TABLE @extschema@.consumer_hold IS
    'Consumers whose row another transaction held when the worker had to write it, since when (condition consumer_locked)';
ALTER TABLE @extschema@.alert DROP CONSTRAINT alert_kind_check,
    ADD CONSTRAINT alert_kind_check
        CHECK (kind IN ('unreachable', 'timeout', 'tls_failed', 'configuration', 'sql_error',
                        'no_max_lsn', 'internal_error', 'server_dropped', 'timezone_mismatch',
                        'clock_skew', 'commit_time_ahead', 'capture_stalled', 'no_access',
                        'read_failed', 'record_failed', 'lock_timeout', 'lsn_regressed',
                        'no_capture_instance', 'source_replaced', 'event_column_invalid',
                        'data_loss', 'schema_blocked', 'schema_change', 'consumer_stalled',
                        'late_data', 'release_rejected', 'freshness', 'consumer_locked',
                        'start_unreadable', 'catalog_unreachable', 'catalog_auth_failed',
                        'table_not_found', 'property_malformed', 'metadata_malformed',
                        'report_ahead', 'clock_stepped_back'));

-- 4c. Tracking from an LSN (track_table's start_from: where a lake's copy
-- ends, e.g. a Debezium snapshot's commit_lsn), and the table condition
-- start_unreadable when SQL Server no longer holds what follows it.
ALTER TABLE @extschema@.tracked_table DROP CONSTRAINT tracked_table_start_from_check,
    ADD CONSTRAINT tracked_table_start_from_check
        CHECK (start_from IN ('max_lsn', 'capture_start') OR start_from ~ '^0x[0-9A-F]{20}$');
ALTER TABLE @extschema@.table_condition DROP CONSTRAINT table_condition_condition_check,
    ADD CONSTRAINT table_condition_condition_check
        CHECK (condition IN ('no_access', 'read_failed', 'no_capture_instance', 'source_replaced',
                             'lsn_regressed', 'record_failed', 'lock_timeout', 'event_column_invalid',
                             'start_unreadable'));

-- 4d. Every announcement of a verdict is the verdict the sensors give
-- (issue 41): watermark.announced_until keeps the verdict last announced on
-- channel "finalize", _sensor_until is the sensors' rule for SQL, and
-- _announce sends what moved (see docs/design/announcements.md). Made here,
-- before the functions and views below that call them; the verdicts of the
-- tables there are recorded as announced in section 9f.
ALTER TABLE @extschema@.watermark ADD COLUMN announced_until timestamptz;
COMMENT ON COLUMN @extschema@.watermark.announced_until IS
    'The verdict last announced on channel "finalize": what finalized_until() answered then (losses, consumers, inputs applied)';

-- Where finalize began observing a table, and its verdicts shown in its
-- zone (issue 41, first contact: docs/periods.md).
ALTER TABLE @extschema@.watermark ADD COLUMN tracked_since timestamptz;
COMMENT ON COLUMN @extschema@.watermark.tracked_since IS
    'Where finalize began observing the table: the commit time its first recorded range ends at (every change of a period before it was committed before tracking began); NULL until then';
ALTER TYPE @extschema@.verdict ADD ATTRIBUTE period_zone text,
    ADD ATTRIBUTE local_period_start text, ADD ATTRIBUTE local_finalized_until text,
    ADD ATTRIBUTE tracked_since timestamptz;

-- 5. Every function and view that names a period cuts it in the table's
-- zone. _loss_ackers returns each acknowledging table's zone too: a new
-- row type, so it and the two functions whose SQL bodies use it are made
-- again.
DROP FUNCTION @extschema@._refresh_loss_blocked(bigint);
DROP FUNCTION @extschema@._has_open_loss(bigint);
DROP FUNCTION @extschema@._loss_ackers(bigint);

-- (The wrapper finalize_iceberg is made in the post file, once its validator exists.)

-- The consumers whose progress is an Iceberg table's: where to read it and
-- what the lake worker saw last.
CREATE TABLE @extschema@.lake_consumer (
    lake_id           bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    table_id          bigint NOT NULL,
    consumer          text COLLATE "C" NOT NULL,
    server_name       text NOT NULL,
    iceberg_table     text NOT NULL,
    ref               text NOT NULL,
    lsn_property      text NOT NULL,
    seen_snapshot_id  bigint,
    seen_head_id      bigint,
    seen_head_sequence bigint,
    seen_lsn          @extschema@.lsn,
    seen_table_uuid   text,
    seen_at           timestamptz,
    polled_at         timestamptz,
    loaded_at         timestamptz,
    condition         text
                      CONSTRAINT lake_consumer_condition_check
                      CHECK (condition IN ('catalog_unreachable', 'catalog_auth_failed', 'table_not_found',
                                           'property_malformed', 'metadata_malformed')),
    condition_since   timestamptz,
    last_error        text,
    PRIMARY KEY (table_id, consumer),
    FOREIGN KEY (table_id, consumer) REFERENCES @extschema@.consumer ON DELETE CASCADE,
    CHECK ((condition IS NULL) = (condition_since IS NULL))
);
COMMENT ON TABLE @extschema@.lake_consumer IS
    'Consumers whose progress is the LSN property of an Iceberg table''s snapshots, read through a finalize_iceberg catalog';
COMMENT ON COLUMN @extschema@.lake_consumer.lake_id IS
    'Which declaration a lake worker''s observation is for: a consumer dropped and added again mid-poll gets none of the old one''s';
COMMENT ON COLUMN @extschema@.lake_consumer.seen_snapshot_id IS
    'The snapshot whose LSN property was recorded last';
COMMENT ON COLUMN @extschema@.lake_consumer.seen_head_id IS
    'The ref''s head when the recorded LSN was last proven: the next poll checks that the ref still descends from it';
COMMENT ON COLUMN @extschema@.lake_consumer.polled_at IS
    'When the lake worker last looked (written when something changed, else at most once a minute)';
CREATE INDEX lake_consumer_server_idx ON @extschema@.lake_consumer (server_name);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.lake_consumer', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.lake_consumer_lake_id_seq', '');

-- ===========================================================================
-- 9d. Sharded tables (issue 31, part 2): one lake table fed by many shards
-- (src/sql/08c_sharded.sql, docs/sharding.md). A sharded table (kind
-- sharded) is derived from its shards through derived_input; each shard is
-- a tracked table of kind source named <table>/<shard> (shard_of, shard).
-- This section runs after every other change above, so the functions it
-- replaces end as the parts define them.
-- ===========================================================================

ALTER TABLE @extschema@.tracked_table
    DROP CONSTRAINT tracked_table_kind_check,
    ADD CONSTRAINT tracked_table_kind_check CHECK (kind IN ('source', 'derived', 'sharded')),
    DROP CONSTRAINT tracked_table_event_time_check,
    ADD CONSTRAINT tracked_table_event_time_check
        CHECK (event_time_column IS NULL OR kind IN ('source', 'sharded')),
    ADD COLUMN shard_of bigint,
    ADD COLUMN shard text COLLATE "C"
        CONSTRAINT tracked_table_shard_label_check CHECK (length(shard) BETWEEN 1 AND 63 AND shard !~ '[/[:cntrl:]]'),
    ADD CONSTRAINT tracked_table_shard_check
        CHECK ((shard_of IS NULL) = (shard IS NULL) AND (shard_of IS NULL OR kind = 'source'));

COMMENT ON COLUMN @extschema@.tracked_table.kind IS
    'source: fed by a SQL Server table through the worker; derived: computed from other tracked tables (finalize.track_derived); sharded: one lake table fed by many shards (finalize.track_sharded), final for a period once every shard is';

COMMENT ON COLUMN @extschema@.tracked_table.shard_of IS
    'A shard: the sharded table it is part of (finalize.add_shard); NULL for every other table';

COMMENT ON COLUMN @extschema@.tracked_table.shard IS
    'A shard: its label, unique in its sharded table, as the lake''s partition paths write it (shard=<label>)';

-- A shard label names one shard of its sharded table, and two shards never
-- read the same SQL Server table (its changes would count twice).
CREATE UNIQUE INDEX tracked_table_shard_idx
    ON @extschema@.tracked_table (shard_of, shard) WHERE untracked_at IS NULL;
CREATE UNIQUE INDEX tracked_table_shard_source_idx
    ON @extschema@.tracked_table (shard_of, server_name, source_schema, source_name)
    WHERE shard_of IS NOT NULL AND untracked_at IS NULL;

-- The consumers declared on a sharded table (finalize.add_consumer on it):
-- each is a consumer of every shard, declared on a shard when it is added.
CREATE TABLE @extschema@.shard_consumer (
    table_id       bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    consumer       text COLLATE "C" NOT NULL
                   CHECK (length(consumer) BETWEEN 1 AND 255),
    required       boolean NOT NULL DEFAULT true,
    reporter       regrole,
    reporter_name  name,
    created_at     timestamptz NOT NULL DEFAULT now(),
    created_by     name NOT NULL,
    PRIMARY KEY (table_id, consumer)
);
COMMENT ON TABLE @extschema@.shard_consumer IS
    'Consumers declared on a sharded table: each is a consumer of every shard, now and when one is added';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.shard_consumer', '');

-- ===========================================================================
-- 9g. First contact (issue 41): a report beyond SQL Server's max LSN stays
-- pending (condition report_ahead, an incident after finalize.alert_after)
-- and one SQL Server cannot have reached is refused; a reset forgets it.
-- track_table and add_shard check the SQL Server table when called.
-- ===========================================================================
ALTER TABLE @extschema@.consumer DROP CONSTRAINT consumer_condition_check,
    ADD CONSTRAINT consumer_condition_check CHECK (condition IN ('consumer_stalled', 'report_ahead'));
COMMENT ON COLUMN @extschema@.consumer.condition IS
    'consumer_stalled (no report for finalize.consumer_stall_threshold while the source moved on), or report_ahead (its reported LSN lies beyond SQL Server''s max LSN: pending, not resolved)';
-- ===========================================================================
-- End of 9g (first contact).
-- ===========================================================================

-- ===========================================================================
-- 9h. SQL Server's clock stepped back (issue 41): the worker's verdicts hold
-- back by the source's clock_tolerance (a finalize_mssql server option; see
-- _store_offsets, _record_range, _record_ranges, _consumer_resolved and
-- _resume_after_loss above), and a read whose commits went back across a
-- period boundary is recorded as an event that makes those periods inexact
-- (changes_by_period) and opens an incident (clock_stepped_back).
-- ===========================================================================
ALTER TABLE @extschema@.fact DROP CONSTRAINT fact_event_check,
    ADD CONSTRAINT fact_event_check
        CHECK (event IN ('tracking_started', 'schema_change', 'instance_switch', 'data_loss', 'schema_blocked',
                         'resume_requested', 'resumed', 'loss_acknowledged', 'late_data', 'clock_stepped_back'));

-- Commits that SQL Server's clock, stepped back, stamped in periods already
-- final are late rows of a commit-time table (_store_late_commits).
COMMENT ON TABLE @extschema@.late_period IS
    'Periods that received rows after they were declared final: event-time tables'' late rows, commit-time tables'' commits stamped there by a clock stepped back (see the view finalize.late_data)';
-- ===========================================================================
-- End of 9h (clock steps).
-- ===========================================================================

-- ===========================================================================
-- 9j. Dump, restore and pg_upgrade (issue 42): the catalog says whether it
-- is whole (finalize.catalog_seal and the id sequences, restored after the
-- rows), and finalize's workers leave it alone while it is not (see
-- src/sql/11d_catalog_seal.sql); a
-- source's hold that waits for a person is dumped with the catalog.
-- ===========================================================================
-- Of the sources' status pg_dump keeps only a hold that waits for a person
-- (release_source): the rest is the workers' and is written again. (Marked
-- here, last, as the update to 0.3.0 marks it.)
SELECT pg_catalog.pg_extension_config_dump('@extschema@.source_status', 'WHERE held_by IS NOT NULL');

CREATE TABLE @extschema@.catalog_seal (
    sealed           boolean PRIMARY KEY DEFAULT true CHECK (sealed),
    sealed_at        timestamptz NOT NULL DEFAULT now(),
    -- Each key orders the restore after a table's rows (and, through its
    -- own keys, after the tables that table references). None references
    -- a table that purge_facts or its cascades empty in bulk (event_fact,
    -- lateness_hour, alert_delivery; late_period, with its table): a key
    -- queues a check of the seal for every row deleted from the table it
    -- references. Those are covered by the sequence check instead (see
    -- _catalog_restoring).
    watermark        bigint REFERENCES @extschema@.watermark,
    derived_input    bigint,
    derived_input_of bigint,
    lake_consumer    bigint REFERENCES @extschema@.lake_consumer (lake_id),
    shard_consumer   bigint,
    shard_consumer_name text COLLATE "C",
    loss             bigint REFERENCES @extschema@.loss,
    loss_ack         bigint REFERENCES @extschema@.loss_ack,
    projection       bigint REFERENCES @extschema@.projection,
    registration     bigint,
    registered_partition text,
    published        bigint,
    published_partition text,
    source_status    text REFERENCES @extschema@.source_status,
    FOREIGN KEY (derived_input, derived_input_of) REFERENCES @extschema@.derived_input,
    FOREIGN KEY (shard_consumer, shard_consumer_name) REFERENCES @extschema@.shard_consumer,
    FOREIGN KEY (registration, registered_partition) REFERENCES @extschema@.partition_registration,
    FOREIGN KEY (published, published_partition) REFERENCES @extschema@.published,
    CHECK (num_nonnulls(watermark, derived_input, derived_input_of, lake_consumer, shard_consumer,
                        shard_consumer_name, loss, loss_ack, projection, registration, registered_partition,
                        published, published_partition, source_status) = 0)
);
COMMENT ON TABLE @extschema@.catalog_seal IS
    'One row once the catalog is in use; restored after the tables its foreign keys reference, so finalize''s workers wait while it is missing (and while an id sequence is behind its table)';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.catalog_seal', '');
-- ===========================================================================
-- End of 9j (dump, restore and pg_upgrade).
-- ===========================================================================

-- 10. Last: objects this script created belong to whoever ran it. Hand them to
-- the extension's owner, as a fresh install has them: a role that ran the
-- update must not own code that the owner's functions run.

-- Late rows are kept as the span of the event period they landed in
-- (filled in and made NOT NULL in the post file).
ALTER TABLE @extschema@.late_period ADD COLUMN period_end timestamptz;

-- Functions whose result changed: dropped before they are made again.
DROP FUNCTION @extschema@.changes_by_period(text, timestamptz, timestamptz);

-- The internal functions move to their own schema, named without the
-- leading underscore (finalize._record_range is finalize_internal.record_range):
-- moved, not dropped, so the triggers, constraints and grants that name them
-- keep them. The rerunnable parts then make each as 0.3.0 has it.
CREATE SCHEMA finalize_internal;
COMMENT ON SCHEMA finalize_internal IS
    'Internal functions of extension finalize: not an API, they change between versions';
DO $internal$
DECLARE
    fn record;
BEGIN
    FOR fn IN
        SELECT p.oid, p.proname, CASE p.prokind WHEN 'a' THEN 'AGGREGATE' WHEN 'p' THEN 'PROCEDURE'
                                               ELSE 'FUNCTION' END AS kind
          FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_proc p ON p.oid = d.objid
         WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.deptype = 'e'
           AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'finalize')
           AND p.pronamespace = '@extschema@'::pg_catalog.regnamespace AND p.proname ~ '^_'
    LOOP
        EXECUTE pg_catalog.format('ALTER %s %s SET SCHEMA finalize_internal', fn.kind, fn.oid::pg_catalog.regprocedure);
        EXECUTE pg_catalog.format('ALTER %s %s RENAME TO %I', fn.kind, fn.oid::pg_catalog.regprocedure,
                                  pg_catalog.substr(fn.proname, 2));
    END LOOP;
END
$internal$;
COMMENT ON COLUMN @extschema@.watermark.loss_blocked IS
    'True while the table or one of its inputs (transitively) has a loss not covered by acknowledgements: then finalize_internal.loss_blocks() decides whether a period is final';
