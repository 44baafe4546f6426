-- finalize install script, assembled by the Makefile from src/sql/*.sql in
-- name order. The user's API lives in schema finalize (not relocatable),
-- the internal functions in schema finalize_internal, which is on no one's
-- search_path (as TimescaleDB keeps its own in _timescaledb_functions).

\echo Use "CREATE EXTENSION finalize" to load this file. \quit

CREATE SCHEMA finalize_internal;
COMMENT ON SCHEMA finalize_internal IS
    'Internal functions of extension finalize: not an API, they change between versions';

-- An LSN as SQL Server prints it: 0x and 20 upper-case hex digits. Text in the
-- "C" collation, so string order is LSN order and JSON carries it unchanged.
CREATE DOMAIN @extschema@.lsn AS text COLLATE "C"
    CONSTRAINT lsn_format CHECK (VALUE ~ '^0x[0-9A-F]{20}$');
COMMENT ON DOMAIN @extschema@.lsn IS
    'SQL Server log sequence number as 0x followed by 20 upper-case hex digits';

-- Four group roles, created once per cluster and kept when the extension is
-- dropped (roles are cluster-wide; other databases may use them):
--   finalize_reader     sensors: verdict functions and the status views only
--   finalize_pipeline   pipelines that write the lake: report_progress and
--                       report_processed, nothing else that writes; includes
--                       finalize_reader (a pipeline waits on its inputs)
--   finalize_publisher  release gate; includes finalize_reader
--   finalize_admin      sources, tracked tables, facts; includes the others
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'finalize_reader') THEN
        CREATE ROLE finalize_reader NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'finalize_publisher') THEN
        CREATE ROLE finalize_publisher NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'finalize_admin') THEN
        CREATE ROLE finalize_admin NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'finalize_pipeline') THEN
        CREATE ROLE finalize_pipeline NOLOGIN;
    END IF;
END
$roles$;
GRANT finalize_reader TO finalize_publisher;
GRANT finalize_publisher TO finalize_admin;
GRANT finalize_reader TO finalize_pipeline;
GRANT finalize_pipeline TO finalize_admin;

-- Nothing in the schema is usable by PUBLIC; the grants at the end of the
-- script open exactly what each role needs.
REVOKE ALL ON SCHEMA @extschema@ FROM PUBLIC;
GRANT USAGE ON SCHEMA @extschema@ TO finalize_reader;
GRANT USAGE ON SCHEMA @extschema@ TO finalize_pipeline;
-- The internal functions: the same roles may reach them (the status views
-- and the C sensors call some as the caller); EXECUTE on each is granted
-- in 12_privileges.sql, exactly as before 0.3.0.
REVOKE ALL ON SCHEMA finalize_internal FROM PUBLIC;
GRANT USAGE ON SCHEMA finalize_internal TO finalize_reader;
GRANT USAGE ON SCHEMA finalize_internal TO finalize_pipeline;
-- Period arithmetic and time conversion, in C so the sensors, the write
-- path and the catalog share one implementation (src/core/period.c).
-- A table's periods are its granularity cut in its zone (period_zone): a
-- fixed stride of local time counted from 2000-01-01 00:00 (whole weeks
-- from Monday 2000-01-03: ISO weeks), or calendar months (1, 2, 3, 4, 6
-- months, whole years) from January; local boundaries resolve to the
-- earliest instant that shows them, or to the end of the DST gap that
-- skips them. In UTC a stride is date_bin's arithmetic with origin
-- 2000-01-01.

CREATE OR REPLACE FUNCTION @extschema@.period_start(ts timestamptz, granularity interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_period_start'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.period_start(timestamptz, interval) IS
    'Start of the period of the given granularity (in UTC) that contains ts';

CREATE OR REPLACE FUNCTION @extschema@.period_end(ts timestamptz, granularity interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_period_end'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.period_end(timestamptz, interval) IS
    'End (exclusive) of the period of the given granularity (in UTC) that contains ts';

CREATE OR REPLACE FUNCTION @extschema@.period_start(ts timestamptz, granularity interval, zone text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_period_start'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.period_start(timestamptz, interval, text) IS
    'Start of the period of the given granularity, cut in the given zone, that contains ts';

CREATE OR REPLACE FUNCTION @extschema@.period_end(ts timestamptz, granularity interval, zone text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_period_end'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.period_end(timestamptz, interval, text) IS
    'End (exclusive) of the period of the given granularity, cut in the given zone, that contains ts';

-- Checks that a granularity can define periods (a positive length that fits
-- in 64 bits of microseconds, or months that tile a year): the C code that
-- computes periods decides; the error names the argument.
CREATE OR REPLACE FUNCTION finalize_internal.check_granularity(granularity interval, argname text)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_check_granularity'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- The same rule as a boolean, for the CHECK constraint of
-- finalize.tracked_table.granularity: the table and the functions that take
-- a granularity cannot disagree.
CREATE OR REPLACE FUNCTION finalize_internal.granularity_valid(granularity interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_granularity_valid'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- A zone name of the zone database, as it spells it ('asia/seoul' is
-- 'Asia/Seoul'), or the error that names the argument.
CREATE OR REPLACE FUNCTION finalize_internal.check_zone(zone text, argname text)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_check_zone'
LANGUAGE C STABLE PARALLEL SAFE;

-- For the CHECK constraint of finalize.tracked_table.period_zone: a zone
-- the server knows, spelt as _check_zone spells it.
CREATE OR REPLACE FUNCTION finalize_internal.zone_valid(zone text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_zone_valid'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- The verdict for the period containing ts under a watermark, as is_final
-- gives it (false while there is no watermark). Every SQL function that
-- reports finality uses this: adding a granularity to a timestamptz in SQL
-- would be calendar arithmetic in the session's TimeZone.
CREATE OR REPLACE FUNCTION finalize_internal.period_final(ts timestamptz, granularity interval, zone text,
                                          finalized_until timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_period_final'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- The periods that intersect [from_time, to_time), at most 100000.
CREATE OR REPLACE FUNCTION finalize_internal.periods(from_time timestamptz, to_time timestamptz, granularity interval,
                                     zone text, OUT period_start timestamptz, OUT period_end timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'finalize_periods'
LANGUAGE C IMMUTABLE PARALLEL SAFE ROWS 24;

-- The end of a span of whole periods [period_start, period_end) of a
-- table (period_end NULL: the one period at period_start), or the error
-- that names the boundary that is off, the object (what) and the nearest
-- boundaries: a partition holds whole periods.
CREATE OR REPLACE FUNCTION finalize_internal.check_period_span(period_start timestamptz, period_end timestamptz,
                                               granularity interval, zone text, what text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_check_period_span'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- An instant as PostgreSQL writes a timestamptz in ISO style with TimeZone
-- set to zone ("2026-12-06 00:00:00+09"), whatever the session's: how
-- finalize.status and explain_verdict show a verdict in its table's zone.
-- Readers may call it (finalize.status does).
CREATE OR REPLACE FUNCTION finalize_internal.local_time(ts timestamptz, zone text)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_local_time'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

-- SQL Server local commit time to an instant, as the worker converts it: an
-- ambiguous local time (DST fall-back) is the earlier instant, a skipped one
-- (spring-forward) the earliest any nearby offset gives.
CREATE OR REPLACE FUNCTION @extschema@.mssql_local_to_instant(local_time timestamp, zone text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_local_to_instant'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.mssql_local_to_instant(timestamp, text) IS
    'Instant of a SQL Server local time in the given zone, the earliest when ambiguous';

-- An instant rounded down to a start of a table's periods (infinite and
-- NULL ones stay): how a verdict is kept when its periods change.
CREATE OR REPLACE FUNCTION finalize_internal.round_down(ts timestamptz, granularity interval, zone text)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN isfinite(ts) THEN @extschema@.period_start(ts, granularity, zone) ELSE ts END;

-- The version this library was built as; every update script compares it
-- with the version it updates to (src/sql/updates/pre-update.sql).
CREATE OR REPLACE FUNCTION finalize_internal.library_version()
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_library_version'
LANGUAGE C IMMUTABLE PARALLEL SAFE;
-- The catalog: tracked tables, their verdicts, the facts behind them and the
-- runtime status of each source. All writes go through functions of this
-- extension or its worker; roles only read through views and functions.

-- A logical table (what the lake calls it) fed by one SQL Server table
-- (kind source), or derived from other tracked tables (kind derived: no
-- server, no source table; its inputs are in derived_input).
-- Untracking keeps the row (and its facts) until retention removes them; a
-- name can be tracked again, as a new table_id with a fresh verdict.
CREATE TABLE @extschema@.tracked_table (
    table_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_name        text COLLATE "C" NOT NULL
                      CHECK (length(table_name) BETWEEN 1 AND 255),
    server_name       text,
    source_schema     text,
    source_name       text,
    capture_instance  text,
    -- The rule of the C period arithmetic (as in _check_granularity), not a copy.
    granularity       interval NOT NULL
                      CONSTRAINT tracked_table_granularity_check
                      CHECK (finalize_internal.granularity_valid(granularity)),
    state             text NOT NULL DEFAULT 'active'
                      CHECK (state IN ('active', 'paused', 'data_lost', 'schema_blocked', 'resuming')),
    state_detail      text,
    state_since       timestamptz NOT NULL DEFAULT now(),
    -- max_lsn, capture_start, or the LSN the lake's copy ends at (stored
    -- as 0x and 20 upper-case hex digits): its facts begin right after it.
    start_from        text NOT NULL DEFAULT 'max_lsn'
                      CONSTRAINT tracked_table_start_from_check
                      CHECK (start_from IN ('max_lsn', 'capture_start') OR start_from ~ '^0x[0-9A-F]{20}$'),
    ddl_policy        text NOT NULL DEFAULT 'warn'
                      CHECK (ddl_policy IN ('warn', 'block')),
    on_data_loss      text NOT NULL DEFAULT 'stop'
                      CHECK (on_data_loss IN ('stop', 'resume')),
    created_at        timestamptz NOT NULL DEFAULT now(),
    created_by        name NOT NULL,
    untracked_at      timestamptz,
    kind              text NOT NULL DEFAULT 'source'
                      CONSTRAINT tracked_table_kind_check CHECK (kind IN ('source', 'derived', 'sharded')),
    CONSTRAINT tracked_table_source_check
        CHECK ((kind = 'source') = (server_name IS NOT NULL AND source_schema IS NOT NULL AND source_name IS NOT NULL)),
    event_time_column text
                      CONSTRAINT tracked_table_event_time_column_check
                      CHECK (length(event_time_column) BETWEEN 1 AND 128),
    event_time_zone   text,
    lateness_policy   text NOT NULL DEFAULT 'exact'
                      CONSTRAINT tracked_table_lateness_policy_check
                      CHECK (lateness_policy IN ('exact', 'quantile')),
    allowed_lateness  interval NOT NULL DEFAULT interval '0'
                      CONSTRAINT tracked_table_allowed_lateness_check
                      CHECK (allowed_lateness >= interval '0'),
    lateness_quantile double precision
                      CONSTRAINT tracked_table_lateness_quantile_check
                      CHECK (lateness_quantile > 0 AND lateness_quantile < 1),
    lateness_window   interval NOT NULL DEFAULT interval '7 days'
                      CONSTRAINT tracked_table_lateness_window_check
                      CHECK (lateness_window > interval '0'),
    CONSTRAINT tracked_table_event_time_check
        CHECK (event_time_column IS NULL OR kind IN ('source', 'sharded')),
    CONSTRAINT tracked_table_quantile_check
        CHECK ((lateness_policy = 'quantile') = (lateness_quantile IS NOT NULL)),
    max_lag           interval
                      CONSTRAINT tracked_table_max_lag_check CHECK (max_lag > interval '0'),
    -- The zone its periods are cut in, as the zone database spells it.
    period_zone       text NOT NULL DEFAULT 'UTC'
                      CONSTRAINT tracked_table_period_zone_check CHECK (finalize_internal.zone_valid(period_zone)),
    -- A shard (finalize.add_shard): a source table that is one part of a
    -- sharded table (its table_id), named <sharded table>/<shard>. No
    -- foreign key: a restore (pg_dump keeps this table's rows, in no
    -- particular order) could load a shard before its sharded table. The
    -- functions keep it: a sharded table's row goes only with its shards'
    -- (untrack_table, purge_facts).
    shard_of          bigint,
    shard             text COLLATE "C"
                      CONSTRAINT tracked_table_shard_label_check
                      CHECK (length(shard) BETWEEN 1 AND 63 AND shard !~ '[/[:cntrl:]]'),
    CONSTRAINT tracked_table_shard_check
        CHECK ((shard_of IS NULL) = (shard IS NULL) AND (shard_of IS NULL OR kind = 'source'))
);
COMMENT ON TABLE @extschema@.tracked_table IS
    'Logical tables whose completeness finalize tracks, and their SQL Server source';
COMMENT ON COLUMN @extschema@.tracked_table.kind IS
    'source: fed by a SQL Server table through the worker; derived: computed from other tracked tables (finalize.track_derived); sharded: one lake table fed by many shards (finalize.track_sharded), final for a period once every shard is';
COMMENT ON COLUMN @extschema@.tracked_table.shard_of IS
    'A shard: the sharded table it is part of (finalize.add_shard); NULL for every other table';
COMMENT ON COLUMN @extschema@.tracked_table.shard IS
    'A shard: its label, unique in its sharded table, as the lake''s partition paths write it (shard=<label>)';
COMMENT ON COLUMN @extschema@.tracked_table.event_time_column IS
    'A captured date/time column of the source table that partitions the lake table (event time); NULL: partitioned by commit time';
COMMENT ON COLUMN @extschema@.tracked_table.event_time_zone IS
    'IANA zone the event column''s values are written in (NULL: the server''s timezone option; unused for datetimeoffset)';
COMMENT ON COLUMN @extschema@.tracked_table.period_zone IS
    'IANA zone the table''s periods are cut in: local days, weeks, months and hours (UTC: as before 0.3.0)';
COMMENT ON COLUMN @extschema@.tracked_table.max_lag IS
    'Freshness SLA: an incident opens when now() - finalized_until exceeds it (NULL: none)';
COMMENT ON COLUMN @extschema@.tracked_table.lateness_policy IS
    'exact: an event period is final once the commit-time verdict passed its end plus allowed_lateness; quantile: plus the lateness_quantile of the lateness observed in lateness_window (at least allowed_lateness)';

-- Sensors and the write path look tables up by name among the tracked ones.
CREATE UNIQUE INDEX tracked_table_active_name_idx
    ON @extschema@.tracked_table (table_name) WHERE untracked_at IS NULL;
-- The worker lists the tables of one source.
CREATE INDEX tracked_table_server_idx
    ON @extschema@.tracked_table (server_name) WHERE untracked_at IS NULL;
-- A shard label names one shard of its sharded table, and two shards never
-- read the same SQL Server table (its changes would count twice).
CREATE UNIQUE INDEX tracked_table_shard_idx
    ON @extschema@.tracked_table (shard_of, shard) WHERE untracked_at IS NULL;
CREATE UNIQUE INDEX tracked_table_shard_source_idx
    ON @extschema@.tracked_table (shard_of, server_name, source_schema, source_name)
    WHERE shard_of IS NOT NULL AND untracked_at IS NULL;

-- The verdict of each table: finalized_until and the offset it came from.
-- One row per tracked table, created with it.
CREATE TABLE @extschema@.watermark (
    table_id            bigint PRIMARY KEY
                        REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    finalized_until     timestamptz,
    offset_lsn          @extschema@.lsn,
    offset_commit_time  timestamptz,
    advanced_at         timestamptz,
    recorded_at         timestamptz,
    schema_ack_lsn      @extschema@.lsn,
    blocked_ddl_lsn     @extschema@.lsn,
    source_until        timestamptz,
    loss_blocked        boolean NOT NULL DEFAULT false,
    commit_until        timestamptz,
    event_allowance     interval,
    announced_until     timestamptz,
    tracked_since       timestamptz
);
COMMENT ON TABLE @extschema@.watermark IS
    'Per table: every period ending at or before finalized_until is complete; offset_lsn is the end of the last recorded range';
COMMENT ON COLUMN @extschema@.watermark.schema_ack_lsn IS
    'DDL recorded at or before this LSN was reviewed (finalize.resume_table) and no longer blocks the table';
COMMENT ON COLUMN @extschema@.watermark.blocked_ddl_lsn IS
    'While the table is schema_blocked: the LSN of the DDL that blocked it, which finalize.resume_table() acknowledges';
COMMENT ON COLUMN @extschema@.watermark.offset_lsn IS
    'Inclusive end of the last recorded range; the next range must start (exclusively) here';
COMMENT ON COLUMN @extschema@.watermark.source_until IS
    'The source verdict: for a tracked table what SQL Server has captured (period start of the last range''s commit time), for a derived one the period start of its inputs'' least finalized_until; finalized_until is at most this and every required consumer''s verdict';
COMMENT ON COLUMN @extschema@.watermark.loss_blocked IS
    'True while the table or one of its inputs (transitively) has a loss not covered by acknowledgements: then finalize_internal.loss_blocks() decides whether a period is final';
COMMENT ON COLUMN @extschema@.watermark.commit_until IS
    'The commit-time verdict (source verdict and required consumers, monotonic); equal to finalized_until unless the table is partitioned by event time, whose finalized_until is the event-time verdict drawn from it';
COMMENT ON COLUMN @extschema@.watermark.announced_until IS
    'The verdict last announced on channel "finalize": what finalized_until() answered then (losses, consumers, inputs applied)';
COMMENT ON COLUMN @extschema@.watermark.tracked_since IS
    'Where finalize began observing the table: the commit time its first recorded range ends at (every change of a period before it was committed before tracking began); NULL until then';
COMMENT ON COLUMN @extschema@.watermark.event_allowance IS
    'Event-time tables: the lateness allowance the verdict was last computed with (allowed_lateness, or the observed quantile)';

-- What the worker observed. kind = 'range': one CDC range (start exclusive,
-- end inclusive) with its row counts; ranges of a table chain without gaps or
-- overlaps. kind = 'event': something that happened (data loss, a blocked
-- schema change, a resume), which never moves the verdict.
CREATE TABLE @extschema@.fact (
    fact_id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_id           bigint NOT NULL
                       REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    kind               text NOT NULL CHECK (kind IN ('range', 'event')),
    start_lsn          @extschema@.lsn,
    end_lsn            @extschema@.lsn,
    end_commit_time    timestamptz,
    inserts            bigint NOT NULL DEFAULT 0 CHECK (inserts >= 0),
    updates            bigint NOT NULL DEFAULT 0 CHECK (updates >= 0),
    deletes            bigint NOT NULL DEFAULT 0 CHECK (deletes >= 0),
    first_commit_time  timestamptz,
    last_commit_time   timestamptz,
    capture_instance   text,
    event              text CHECK (event IN ('tracking_started', 'schema_change', 'instance_switch',
                                             'data_loss', 'schema_blocked', 'resume_requested', 'resumed',
                                             'loss_acknowledged', 'late_data', 'clock_stepped_back')),
    detail             jsonb,
    ranges             integer NOT NULL DEFAULT 1 CHECK (ranges >= 1),
    recorded_at        timestamptz NOT NULL DEFAULT now(),
    sketch             bytea,
    first_event_time   timestamptz,
    last_event_time    timestamptz,
    late_rows          bigint NOT NULL DEFAULT 0 CONSTRAINT fact_late_rows_check CHECK (late_rows >= 0),
    CHECK (start_lsn < end_lsn),
    CHECK (first_commit_time <= last_commit_time),
    CHECK ((first_commit_time IS NULL) = (inserts + updates + deletes = 0)),
    CHECK (kind = 'event' OR (end_lsn IS NOT NULL AND end_commit_time IS NOT NULL)),
    CHECK (kind = 'range' OR event IS NOT NULL)
);
COMMENT ON TABLE @extschema@.fact IS
    'Facts recorded per CDC range (counts, LSN and commit-time spans) and events (data loss, schema change, ...)';
COMMENT ON COLUMN @extschema@.fact.sketch IS
    'Event-time tables: the lateness sketch of the range (commit time minus event time, DDSketch at 1% relative accuracy; finalize.lateness_quantile reads it)';
COMMENT ON COLUMN @extschema@.fact.late_rows IS
    'Event-time tables: rows of the range whose event period was already final when it was recorded';

-- Ranges chain by end LSN: the write path finds the previous range and
-- re-recorded ranges through this index.
CREATE UNIQUE INDEX fact_range_end_idx
    ON @extschema@.fact (table_id, end_lsn) WHERE kind = 'range';
-- Per-period questions ("what changed in hour 14") scan by commit time.
CREATE INDEX fact_commit_time_idx
    ON @extschema@.fact (table_id, end_commit_time);
-- Status and explanations look up a table's latest events.
CREATE INDEX fact_event_idx
    ON @extschema@.fact (table_id, fact_id) WHERE event IS NOT NULL;
-- Status shows each table's latest schema change: DDL events are rare, so
-- an index of them alone makes that a join over a few rows rather than a
-- probe per table (which, over thousands of tables, also costs the view
-- past jit_above_cost).
CREATE INDEX fact_ddl_idx
    ON @extschema@.fact (table_id, fact_id DESC)
    WHERE event IS NOT NULL AND detail OPERATOR(pg_catalog.?) 'ddl';
-- Retention deletes by age.
CREATE INDEX fact_recorded_at_idx
    ON @extschema@.fact (recorded_at);

-- Why the worker could not read or record a table on its last attempt: one
-- row while there is a reason, none once it could. Kept apart from the
-- watermark so that a session holding the watermark's row lock (an open
-- transaction that called resume_table, say) cannot keep the worker from
-- saying so, and so that a condition never invalidates cached verdicts.
-- The condition codes here and in source_status are the worker's (one enum
-- and its names in src/core/condition.c): a new code goes into both, and
-- into an upgrade script.
CREATE TABLE @extschema@.table_condition (
    table_id          bigint PRIMARY KEY
                      REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    condition         text NOT NULL
                      CONSTRAINT table_condition_condition_check
                      CHECK (condition IN ('no_access', 'read_failed', 'no_capture_instance', 'source_replaced',
                                           'lsn_regressed', 'record_failed', 'lock_timeout', 'event_column_invalid',
                                           'start_unreadable')),
    detail            text,
    since             timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE @extschema@.table_condition IS
    'Per table: why the worker could not read or record it on its last attempt (no row when it could)';

-- Runtime status of each source, written by its worker once per cycle.
CREATE TABLE @extschema@.source_status (
    server_name       text PRIMARY KEY,
    worker_pid        integer,
    condition         text NOT NULL DEFAULT 'starting'
                      CONSTRAINT source_status_condition_check
                      CHECK (condition IN ('starting', 'ok', 'capture_stalled', 'no_worker', 'server_dropped',
                                           'configuration', 'commit_time_ahead', 'unreachable', 'timeout',
                                           'cancelled', 'sql_error', 'no_max_lsn', 'timezone_mismatch',
                                           'clock_skew', 'internal_error', 'tls_failed')),
    condition_since   timestamptz NOT NULL DEFAULT now(),
    last_poll         timestamptz,
    last_success      timestamptz,
    last_error        text,
    last_error_at     timestamptz,
    failures          integer NOT NULL DEFAULT 0,
    cycles            bigint NOT NULL DEFAULT 0,
    next_attempt      timestamptz,
    max_lsn           @extschema@.lsn,
    max_lsn_time      timestamptz,
    max_lsn_changed   timestamptz,
    server_time       timestamptz,
    clock_skew        interval,
    held_by           text
                      CONSTRAINT source_status_held_by_check
                      CHECK (held_by IN ('commit_time_ahead')),
    held_since        timestamptz,
    cycle_time        interval
);
COMMENT ON COLUMN @extschema@.source_status.condition IS
    'ok, or why the last cycle could not read the source (unreachable, sql_error, no_max_lsn, timezone_mismatch, ...)';
COMMENT ON COLUMN @extschema@.source_status.cycle_time IS
    'How long the last successful cycle took, from reading the tracked tables to committing their facts: keep it below finalize.poll_interval';
COMMENT ON COLUMN @extschema@.source_status.held_by IS
    'A condition that stops the source until finalize.release_source() (commit_time_ahead): it may not show on every cycle, but once seen no commit time of the source can be trusted';
COMMENT ON COLUMN @extschema@.source_status.cycles IS
    'Cycles the worker has recorded for this source, successful or not';
COMMENT ON TABLE @extschema@.source_status IS
    'Per source: what its worker saw on its last cycle';

-- The inputs of each derived table: a DAG (finalize.track_derived refuses
-- cycles). A derived table is final for a period only when every input is.
CREATE TABLE @extschema@.derived_input (
    table_id   bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    input_id   bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    PRIMARY KEY (table_id, input_id),
    CHECK (table_id <> input_id)
);
COMMENT ON TABLE @extschema@.derived_input IS
    'The inputs (tracked or derived tables) of each derived table';
-- An input's advance finds the derived tables that use it.
CREATE INDEX derived_input_input_idx ON @extschema@.derived_input (input_id);

-- The pipelines that write a table. A required consumer caps the verdict
-- with its own: on a tracked table the commit time of the LSN it reported
-- (report_progress), as the worker resolved it on SQL Server; on a derived
-- table the input watermark it processed (report_processed).
CREATE TABLE @extschema@.consumer (
    table_id          bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    consumer          text COLLATE "C" NOT NULL
                      CHECK (length(consumer) BETWEEN 1 AND 255),
    required          boolean NOT NULL DEFAULT true,
    reporter          regrole,
    reporter_name     name,
    reported_lsn      @extschema@.lsn,
    reported_at       timestamptz,
    processed_until   timestamptz,
    resolved_for_lsn  @extschema@.lsn,
    mapped_lsn        @extschema@.lsn,
    commit_time       timestamptz,
    resolved_at       timestamptz,
    resolve_error     text,
    condition         text
                      CONSTRAINT consumer_condition_check
                      CHECK (condition IN ('consumer_stalled', 'report_ahead')),
    condition_since   timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    created_by        name NOT NULL,
    PRIMARY KEY (table_id, consumer)
);
COMMENT ON TABLE @extschema@.consumer IS
    'Pipelines that write a table; a required one holds the verdict until it has applied (or processed) a period';
COMMENT ON COLUMN @extschema@.consumer.reporter IS
    'Only members of this role (and finalize_admin) may report for the consumer; NULL: only finalize_admin members';
COMMENT ON COLUMN @extschema@.consumer.reporter_name IS
    'The reporter role''s name when it was named: a report is refused once the OID names another role (dropped, renamed)';
COMMENT ON COLUMN @extschema@.consumer.reported_lsn IS
    'Tracked tables: every change with commit LSN at or below it is durably in the lake (finalize.report_progress)';
COMMENT ON COLUMN @extschema@.consumer.processed_until IS
    'Derived tables: the input watermark the consumer''s job has fully processed (finalize.report_processed)';
COMMENT ON COLUMN @extschema@.consumer.resolve_error IS
    'Why the worker could not resolve the reported LSN when it last tried (SQL Server''s message, for example); NULL once resolved';
COMMENT ON COLUMN @extschema@.consumer.condition IS
    'consumer_stalled (no report for finalize.consumer_stall_threshold while the source moved on), or report_ahead (its reported LSN lies beyond SQL Server''s max LSN: pending, not resolved)';
COMMENT ON COLUMN @extschema@.consumer.commit_time IS
    'Commit time of mapped_lsn, the greatest mapping row at or below min(reported LSN, max LSN) when the worker resolved resolved_for_lsn: every commit before it is applied';

-- Consumers whose row another transaction held when the worker had to
-- write it (a pipeline's report_progress, or an admin's change, left
-- uncommitted): the worker skips such a row (SKIP LOCKED) instead of
-- waiting, which would cost every table of the source its cycle time, and
-- tries again next cycle. Written once when the hold is first seen and
-- deleted once it is over, it shows as the consumer's condition
-- consumer_locked in finalize.consumers and opens an incident after
-- finalize.alert_after (_check_consumers). No foreign key to consumer:
-- checking one would lock the very row the other transaction holds.
CREATE TABLE @extschema@.consumer_hold (
    table_id          bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    consumer          text COLLATE "C" NOT NULL,
    since             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_id, consumer)
);
COMMENT ON TABLE @extschema@.consumer_hold IS
    'Consumers whose row another transaction held when the worker had to write it, since when (condition consumer_locked)';

-- Commit-time ranges lost to CDC retention (or a dropped capture instance)
-- before the worker read them: [lost_from, lost_to], both included, and the
-- LSN range (from_lsn, to_lsn]. A period that intersects one is not final
-- until acknowledgements recorded after the loss cover it.
CREATE TABLE @extschema@.loss (
    loss_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_id    bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    fact_id     bigint REFERENCES @extschema@.fact ON DELETE SET NULL,
    lost_from   timestamptz NOT NULL,
    lost_to     timestamptz NOT NULL,
    from_lsn    @extschema@.lsn,
    to_lsn      @extschema@.lsn,
    created_at  timestamptz NOT NULL DEFAULT now(),
    commit_from timestamptz,
    CHECK (lost_from <= lost_to)
);
COMMENT ON TABLE @extschema@.loss IS
    'Commit-time ranges (event times on an event-time table) whose changes were lost before finalize read them; their periods are not final until acknowledged';
COMMENT ON COLUMN @extschema@.loss.fact_id IS
    'The data_loss event fact (NULL once retention removed it; the loss stays)';
COMMENT ON COLUMN @extschema@.loss.commit_from IS
    'Event-time tables: the commit time the lost range starts at; lost_from reaches back from it by the lateness allowance, and further when the allowance grows';
CREATE INDEX loss_table_idx ON @extschema@.loss (table_id);

-- Acknowledgements of losses (finalize.acknowledge_loss): the periods in
-- [period_from, period_to) count as repaired for the losses recorded before.
CREATE TABLE @extschema@.loss_ack (
    ack_id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_id         bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    period_from      timestamptz NOT NULL,
    period_to        timestamptz NOT NULL,
    note             text NOT NULL,
    acknowledged_by  name NOT NULL,
    acknowledged_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (period_from < period_to)
);
COMMENT ON TABLE @extschema@.loss_ack IS
    'Acknowledged losses: who said the periods in [period_from, period_to) were repaired (for example re-snapshotted), when and why';
CREATE INDEX loss_ack_table_idx ON @extschema@.loss_ack (table_id);

-- Event-time tables: the rows of each recorded range per event period (the
-- period of the table's granularity that holds the event time; NULL for
-- rows without one), and how many of them arrived after their period was
-- already final (late).
CREATE TABLE @extschema@.event_fact (
    fact_id       bigint NOT NULL REFERENCES @extschema@.fact ON DELETE CASCADE,
    table_id      bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    event_period  timestamptz,
    inserts       bigint NOT NULL DEFAULT 0 CHECK (inserts >= 0),
    updates       bigint NOT NULL DEFAULT 0 CHECK (updates >= 0),
    deletes       bigint NOT NULL DEFAULT 0 CHECK (deletes >= 0),
    late_rows     bigint NOT NULL DEFAULT 0 CHECK (late_rows >= 0),
    CHECK (late_rows <= inserts + updates + deletes)
);
COMMENT ON TABLE @extschema@.event_fact IS
    'Event-time tables: rows per event period of each recorded range, and how many were late';
CREATE UNIQUE INDEX event_fact_fact_period_idx
    ON @extschema@.event_fact (fact_id, event_period) NULLS NOT DISTINCT;
-- Per-period questions (changes_by_event_period, the release gate).
CREATE INDEX event_fact_period_idx ON @extschema@.event_fact (table_id, event_period);

-- Event-time tables: the lateness sketches of the ranges recorded, merged
-- per hour of their commit time, so that a quantile over a window of days
-- merges a few hundred sketches rather than every range's.
CREATE TABLE @extschema@.lateness_hour (
    table_id  bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    hour      timestamptz NOT NULL,
    sketch    bytea NOT NULL,
    rows      bigint NOT NULL CHECK (rows >= 0),
    PRIMARY KEY (table_id, hour)
);
COMMENT ON TABLE @extschema@.lateness_hour IS
    'Event-time tables: lateness sketches merged per commit-time hour (the window of lateness_policy quantile)';

-- Periods that received rows after they were final: an event-time
-- table's event periods, or a commit-time table's periods that SQL
-- Server's clock, stepped back, stamped commits in (_store_late_commits;
-- event_period is then the commit-time period). One row per table and
-- period, counting every late row it got.
-- Each is the span [event_period, period_end) of the periods it landed
-- in, kept as instants: the release gate reads it in whatever periods the
-- table has later (alter_tracked_table), and a span that a later period
-- only overlaps holds that period too.
CREATE TABLE @extschema@.late_period (
    table_id            bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    event_period        timestamptz NOT NULL,
    rows                bigint NOT NULL CHECK (rows > 0),
    first_seen          timestamptz NOT NULL,
    last_seen           timestamptz NOT NULL,
    verdict_at_arrival  timestamptz NOT NULL,
    alerted_at          timestamptz,
    period_end          timestamptz NOT NULL,
    PRIMARY KEY (table_id, event_period),
    CHECK (period_end > event_period)
);
COMMENT ON TABLE @extschema@.late_period IS
    'Periods that received rows after they were declared final: event-time tables'' late rows, commit-time tables'' commits stamped there by a clock stepped back (see the view finalize.late_data)';
COMMENT ON COLUMN @extschema@.late_period.period_end IS
    'The end of the period the late rows landed in, in the periods the table had then: the span holds them whatever its periods are now';

-- pg_dump keeps the contents of these tables with the extension.
SELECT pg_catalog.pg_extension_config_dump('@extschema@.tracked_table', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.watermark', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fact', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.tracked_table_table_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fact_fact_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.derived_input', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.consumer', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.loss', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.loss_ack', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.loss_loss_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.loss_ack_ack_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.event_fact', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.lateness_hour', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.late_period', '');

-- Zones are stored by the zone's own name, never by a link or another
-- spelling of it ('ROK' and 'rok' as 'Asia/Seoul', 'Zulu' as 'UTC'; see
-- _check_zone), however a row is written: tracking, altering, a shard
-- taking its sharded table's settings, a restore.
CREATE OR REPLACE FUNCTION finalize_internal.canonical_zones()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.period_zone := finalize_internal.check_zone(NEW.period_zone, 'period_zone');
    IF NEW.event_time_zone IS NOT NULL THEN
        NEW.event_time_zone := finalize_internal.check_zone(NEW.event_time_zone, 'event_time_zone');
    END IF;
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER canonical_zones
    BEFORE INSERT OR UPDATE OF period_zone, event_time_zone ON @extschema@.tracked_table
    FOR EACH ROW EXECUTE FUNCTION finalize_internal.canonical_zones();

-- Every committed change of a verdict or a tracked table, or of what a
-- verdict depends on (consumers, inputs, losses and their
-- acknowledgements), bumps a shared epoch, so backends drop the verdicts
-- they cached (see verdict_cache.c).
CREATE OR REPLACE FUNCTION finalize_internal.verdict_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'finalize_verdict_changed'
LANGUAGE C;
CREATE OR REPLACE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.tracked_table
    FOR EACH STATEMENT EXECUTE FUNCTION finalize_internal.verdict_changed();
CREATE OR REPLACE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.watermark
    FOR EACH STATEMENT EXECUTE FUNCTION finalize_internal.verdict_changed();
CREATE OR REPLACE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.consumer
    FOR EACH STATEMENT EXECUTE FUNCTION finalize_internal.verdict_changed();
CREATE OR REPLACE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.derived_input
    FOR EACH STATEMENT EXECUTE FUNCTION finalize_internal.verdict_changed();
CREATE OR REPLACE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.loss
    FOR EACH STATEMENT EXECUTE FUNCTION finalize_internal.verdict_changed();
CREATE OR REPLACE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.loss_ack
    FOR EACH STATEMENT EXECUTE FUNCTION finalize_internal.verdict_changed();

-- Waiters of finalize.wait_final sleep until a commit wakes them: a verdict
-- that moves (finalized_until or loss_blocked) wakes only the waiters of its
-- table's shard (verdict_cache.c); any other change above wakes them all.
CREATE OR REPLACE FUNCTION finalize_internal.verdict_wake()
RETURNS trigger
AS 'MODULE_PATHNAME', 'finalize_verdict_wake'
LANGUAGE C;
CREATE OR REPLACE TRIGGER verdict_wake
    AFTER UPDATE OF finalized_until, loss_blocked ON @extschema@.watermark
    FOR EACH ROW
    WHEN (OLD.finalized_until IS DISTINCT FROM NEW.finalized_until
          OR OLD.loss_blocked IS DISTINCT FROM NEW.loss_blocked)
    EXECUTE FUNCTION finalize_internal.verdict_wake();
-- Helpers the later parts share: argument checks and the errors they
-- raise, LSN arguments, looking up and locking tracked tables, and the
-- payloads of notifications. None is granted to a role.

-- Raises the error every function uses for a missing argument.
CREATE OR REPLACE FUNCTION finalize_internal.require(value anyelement, argname text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL THEN
        RAISE EXCEPTION 'argument % must not be NULL', argname
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
END
$$;

-- Checks that an argument is one of a few words; the error lists them.
CREATE OR REPLACE FUNCTION finalize_internal.check_choice(value text, argname text, allowed text[], meaning text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(value, argname);
    IF NOT value = ANY (allowed) THEN
        RAISE EXCEPTION 'invalid value for argument %: "%"', argname, value
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = meaning,
                  HINT = format('Use one of: %s.', array_to_string(allowed, ', '));
    END IF;
END
$$;

-- Normalizes LSN text to the stored form (upper case); the error names the
-- argument and shows the expected shape.
CREATE OR REPLACE FUNCTION finalize_internal.lsn_arg(value text, argname text)
RETURNS @extschema@.lsn
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL THEN
        RETURN NULL;
    END IF;
    IF value !~ '^0[xX][0-9A-Fa-f]{20}$' THEN
        RAISE EXCEPTION 'invalid value for argument %: "%" is not an LSN', argname, value
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'An LSN is written as 0x followed by 20 hexadecimal digits, for example 0x0000002D00000E580003.';
    END IF;
    RETURN ('0x' || upper(substr(value, 3)))::@extschema@.lsn;
END
$$;

-- A reported LSN in the stored form: 0x and 20 hex digits, or Debezium's
-- source.commit_lsn (0000002d:00000f2a:0002), which is the same 10 bytes;
-- anything else is an error (22023), never a guess (core/lsn_sql.c).
CREATE OR REPLACE FUNCTION finalize_internal.lsn_normalize(lsn text)
RETURNS @extschema@.lsn
AS 'MODULE_PATHNAME', 'finalize_lsn_normalize'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- Checks the name of a new tracked or derived table: the name consumers
-- use, 1 to 255 characters, not only spaces, no control characters (a
-- newline in a name would forge lines in logs and explanations).
CREATE OR REPLACE FUNCTION finalize_internal.check_table_name(table_name text, example text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(table_name, 'table_name');
    IF table_name !~ '\S' OR length(table_name) > 255 OR table_name ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'invalid value for argument table_name: "%"',
                        pg_catalog.regexp_replace(pg_catalog.left(table_name, 255), '[[:cntrl:]]', '?', 'g')
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('A tracked table name is the name consumers use (for example %s): 1 to 255 characters, not only spaces, no control characters.', example);
    END IF;
END
$$;

-- The one error for a table name that is not tracked.
CREATE OR REPLACE FUNCTION finalize_internal.not_tracked(table_name text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'table "%" is not tracked by finalize',
                    pg_catalog.left(table_name, 255) || CASE WHEN length(table_name) > 255 THEN '...' ELSE '' END
        USING ERRCODE = 'undefined_object',
              HINT = 'Check the name in finalize.status, or start tracking it with finalize.track_table().';
END
$$;

-- The tracked table of a name (its row as it is now, no lock), or the
-- not-tracked error: the one lookup of a name among the tracked tables.
CREATE OR REPLACE FUNCTION finalize_internal.tracked(table_name text)
RETURNS @extschema@.tracked_table
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tt @extschema@.tracked_table;
BEGIN
    PERFORM finalize_internal.require(table_name, 'table_name');
    SELECT t.* INTO tt FROM @extschema@.tracked_table t
     WHERE t.table_name = tracked.table_name AND t.untracked_at IS NULL;
    IF NOT FOUND THEN
        PERFORM finalize_internal.not_tracked(table_name);
    END IF;
    RETURN tt;
END
$$;

-- The id of a tracked table, or the not-tracked error.
CREATE OR REPLACE FUNCTION finalize_internal.tracked_id(table_name text)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (finalize_internal.tracked(table_name)).table_id;

-- Whether this process is one of finalize's background workers, whose
-- transactions end within milliseconds (src/core/background.c).
CREATE OR REPLACE FUNCTION finalize_internal.in_background()
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_in_background'
LANGUAGE C STABLE PARALLEL RESTRICTED;

-- Locks the verdict row of a table for a write and returns the table, which
-- must still be tracked: every write of the worker names its table by id, so
-- a name untracked and tracked again meanwhile (a new table_id, maybe on
-- another server) never receives what was read for the old one.
-- With must_exist false, a table no longer tracked is NULL, not an error.
-- A session waits for a lock another transaction holds; finalize's
-- background workers never do (NOWAIT: lock_not_available at once): a
-- session may keep a table's rows for as long as it likes, and waiting
-- would cost every table of the source its cycle time. The worker records
-- that table's condition lock_timeout and tries again next cycle.
CREATE OR REPLACE FUNCTION finalize_internal.lock_tracked(table_id bigint, must_exist boolean DEFAULT true)
RETURNS @extschema@.tracked_table
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
BEGIN
    -- The table's row first (a key-share lock, which no admin function's
    -- update conflicts with), then its verdict: the order every path that
    -- takes both uses, so untrack_table's delete cannot deadlock with it.
    IF finalize_internal.in_background() THEN
        SELECT t.* INTO tt FROM @extschema@.tracked_table t
         WHERE t.table_id = lock_tracked.table_id AND t.untracked_at IS NULL FOR KEY SHARE NOWAIT;
        IF FOUND THEN
            PERFORM FROM @extschema@.watermark w WHERE w.table_id = lock_tracked.table_id FOR UPDATE NOWAIT;
        END IF;
    ELSE
        SELECT t.* INTO tt FROM @extschema@.tracked_table t
         WHERE t.table_id = lock_tracked.table_id AND t.untracked_at IS NULL FOR KEY SHARE;
        IF FOUND THEN
            PERFORM FROM @extschema@.watermark w WHERE w.table_id = lock_tracked.table_id FOR UPDATE;
        END IF;
    END IF;
    IF FOUND THEN
        SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = lock_tracked.table_id;
    END IF;
    IF NOT FOUND AND NOT must_exist THEN
        RETURN NULL;
    ELSIF NOT FOUND THEN
        RAISE EXCEPTION 'tracked table with id % is no longer tracked', table_id
            USING ERRCODE = 'undefined_object',
                  DETAIL = 'It was untracked (and perhaps tracked again under a new id) after its source was read; nothing read for it is recorded.';
    END IF;
    RETURN tt;
END
$$;

-- Before the worker changes a tracked table's own row (its state, its
-- capture instance): takes the row without waiting in a background worker
-- (lock_not_available at once, the table's condition lock_timeout; an
-- admin's open track_derived holds the rows of its inputs FOR SHARE). A
-- session's UPDATE waits as usual.
CREATE OR REPLACE FUNCTION finalize_internal.lock_tracked_row(table_id bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF finalize_internal.in_background() THEN
        PERFORM FROM @extschema@.tracked_table t WHERE t.table_id = lock_tracked_row.table_id
           FOR NO KEY UPDATE NOWAIT;
    END IF;
END
$$;

-- ISO 8601 in UTC for JSON payloads, independent of the session's TimeZone.
CREATE OR REPLACE FUNCTION finalize_internal.utc_iso(ts timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN date_trunc('second', ts AT TIME ZONE 'UTC') = ts AT TIME ZONE 'UTC'
            THEN to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
            ELSE to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') END;

-- pg_notify that never stops a write from committing (src/core/notify.c):
-- the notification is kept with the transaction and sent at its commit
-- only while the cluster's shared NOTIFY queue is less than half full,
-- else dropped and counted (finalize.dropped_notifications(), the log).
-- Nothing of finalize waits for a notification.
CREATE OR REPLACE FUNCTION finalize_internal.notify(channel text, payload text)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_notify'
LANGUAGE C VOLATILE;

CREATE OR REPLACE FUNCTION @extschema@.dropped_notifications()
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_dropped_notifications'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.dropped_notifications() IS
    'Notifications on channels finalize and finalize_alert not sent since the server started, because the NOTIFY queue was half full';

-- Sends an alert on channel finalize_alert. A NOTIFY payload must be shorter
-- than 8000 bytes, and an alert must never fail (and take the event it
-- reports with it) for its size: long values are cut, names and LSNs are
-- kept, and "truncated" says so. The full text stays in the facts.
CREATE OR REPLACE FUNCTION finalize_internal.alert(payload jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    body text := payload::text;
BEGIN
    IF octet_length(body) >= 7900 THEN
        -- What names the alert is never changed (a table name is at most
        -- 255 characters); other values longer than 500 characters are cut.
        SELECT jsonb_object_agg(e.key,
                   CASE WHEN e.key IN ('alert', 'table', 'server') THEN e.value
                        WHEN jsonb_typeof(e.value) = 'string' AND length(e.value #>> '{}') > 500
                        THEN to_jsonb(left(e.value #>> '{}', 500) || '...')
                        WHEN jsonb_typeof(e.value) IN ('object', 'array') AND length(e.value::text) > 500
                        THEN to_jsonb(left(e.value::text, 500) || '...')
                        ELSE e.value END)
               || jsonb_build_object('truncated', true)
          INTO payload
          FROM jsonb_each(payload) AS e;
        body := payload::text;
    END IF;
    IF octet_length(body) >= 7900 THEN
        -- Many long values: keep only what identifies the alert.
        SELECT jsonb_object_agg(e.key, e.value) INTO payload
          FROM jsonb_each(payload) AS e
         WHERE e.key IN ('alert', 'table', 'server', 'truncated') OR octet_length(e.value::text) <= 200;
        body := payload::text;
    END IF;
    PERFORM finalize_internal.notify('finalize_alert', body);
END
$$;
-- Sources and the tables tracked through them (finalize_admin).
--
-- Sources are foreign servers of this wrapper; credentials live only in user
-- mappings. The wrapper has no handler: it holds connection options, it does
-- not serve foreign tables.

CREATE OR REPLACE FUNCTION finalize_internal.mssql_validator(options text[], catalog oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_mssql_validator'
LANGUAGE C STRICT;


-- Splits a SQL Server two-part name (dbo.orders, [my schema].[odd]]name]) into
-- its unquoted parts; the error names the argument it was given as.
CREATE OR REPLACE FUNCTION finalize_internal.split_mssql_name(name text, argname text)
RETURNS text[]
AS 'MODULE_PATHNAME', 'finalize_split_mssql_name'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- Quotes one SQL Server identifier with brackets, doubling any ].
CREATE OR REPLACE FUNCTION @extschema@.quote_mssql_ident(ident text)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_quote_mssql_ident'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.quote_mssql_ident(text) IS
    'Quote a SQL Server identifier with brackets, doubling any ]';

-- Tracked tables. Their policies, each checked with an error that lists the
-- choices and what they mean.
CREATE OR REPLACE FUNCTION finalize_internal.check_ddl_policy(ddl_policy text)
RETURNS void
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN finalize_internal.check_choice(ddl_policy, 'ddl_policy', ARRAY['warn', 'block'],
    'With warn, DDL on the source table is an event fact and a warning and the verdict goes on; with block the verdict stops at the DDL until finalize.resume_table().');

CREATE OR REPLACE FUNCTION finalize_internal.check_on_data_loss(on_data_loss text)
RETURNS void
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN finalize_internal.check_choice(on_data_loss, 'on_data_loss', ARRAY['stop', 'resume'],
    'With stop, a data loss stops the verdict until finalize.resume_table(); with resume the worker records the loss and resumes by itself, unless another loss happened within finalize.data_loss_window.');

-- Finds a server of the finalize_mssql wrapper by name; the errors say what
-- to create or fix.
CREATE OR REPLACE FUNCTION finalize_internal.mssql_server(server_name text, argname text)
RETURNS pg_catalog.pg_foreign_server
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    srv pg_foreign_server;
    wrapper name;
    opt text;
BEGIN
    PERFORM finalize_internal.require(server_name, argname);
    SELECT s.* INTO srv FROM pg_foreign_server s WHERE s.srvname = server_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'server "%" does not exist', server_name
            USING ERRCODE = 'undefined_object',
                  HINT = 'Create it with CREATE SERVER ... FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host ''...'', database ''...''), then a user mapping for its login.';
    END IF;
    SELECT w.fdwname INTO wrapper FROM pg_foreign_data_wrapper w WHERE w.oid = srv.srvfdw;
    IF wrapper <> 'finalize_mssql' THEN
        RAISE EXCEPTION 'server "%" is not a SQL Server source', server_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = format('It uses the foreign-data wrapper "%s"; tracked tables need a server of finalize_mssql.', wrapper),
                  HINT = 'Create a server with CREATE SERVER ... FOREIGN DATA WRAPPER finalize_mssql.';
    END IF;
    FOREACH opt IN ARRAY ARRAY['host', 'database'] LOOP
        IF NOT EXISTS (SELECT FROM pg_options_to_table(srv.srvoptions) o WHERE o.option_name = opt) THEN
            RAISE EXCEPTION 'server "%" has no option "%"', server_name, opt
                USING ERRCODE = 'fdw_option_name_not_found',
                      HINT = format('Add it with ALTER SERVER %I OPTIONS (ADD %s ''...'').', server_name, opt);
        END IF;
    END LOOP;
    RETURN srv;
END
$$;

-- A finalize_mssql server through which a role may track tables: it
-- exists, and the role may read through it. The worker reads tracked
-- tables with the server's login, so tracking a table through a server is
-- using it (USAGE); and it logs in with the user mapping of the server's
-- owner when there is one (else PUBLIC's, which USAGE lets a role use): a
-- role must not read through a login it could not use itself.
CREATE OR REPLACE FUNCTION finalize_internal.tracking_server(who name, server_name text)
RETURNS pg_catalog.pg_foreign_server
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    srv pg_foreign_server := finalize_internal.mssql_server(server_name, 'server_name');
BEGIN
    IF NOT has_server_privilege(who, srv.oid, 'USAGE') THEN
        RAISE EXCEPTION 'permission denied for server %', server_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Role %s has no USAGE on the server, and the worker reads tracked tables with the server''s login.', who),
                  HINT = format('The server''s owner can run GRANT USAGE ON FOREIGN SERVER %I TO %I.', server_name, who);
    END IF;
    IF EXISTS (SELECT FROM pg_user_mapping m WHERE m.umserver = srv.oid AND m.umuser = srv.srvowner)
       AND NOT pg_has_role(who, srv.srvowner, 'USAGE') THEN
        RAISE EXCEPTION 'permission denied for server %', server_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('The worker reads the tables of server %s with the user mapping of its owner %s, which role %s may not use.',
                                  server_name, srv.srvowner::regrole, who),
                  HINT = format('Track the table as a member of role %s, or let the worker use a PUBLIC user mapping of the server instead.',
                                srv.srvowner::regrole);
    END IF;
    RETURN srv;
END
$$;

-- Checks, when a table is tracked, the SQL Server table its worker will
-- read, as the worker would (worker/source_check.c): a table that does
-- not exist, has no change data capture or that the login may not read
-- is an error, each with its own hint; a source that cannot be reached
-- gets a NOTICE (the table is tracked, the worker retries). Called before
-- the table's row is written and before any of finalize's locks is taken,
-- for at most finalize.source_check_timeout per wait (0: no check).
CREATE OR REPLACE FUNCTION finalize_internal.check_source_table(server oid, source_schema text, source_name text)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_check_source_table'
LANGUAGE C VOLATILE STRICT;

-- The body of finalize.track_table, run as the extension's owner by its C entry
-- point (owner.c) with the caller taken before the switch.
-- The start_from of a new tracked table in its stored form: max_lsn,
-- capture_start, or an LSN in either text form (finalize's, or Debezium's
-- source.commit_lsn), normalized. Whether SQL Server still holds the
-- changes after that LSN, and has reached it, only the worker can tell: it
-- looks before the first range and records nothing while it cannot
-- (condition start_unreadable).
CREATE OR REPLACE FUNCTION finalize_internal.check_start_from(table_name text, value text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(value, 'start_from');
    IF value IN ('max_lsn', 'capture_start') THEN
        RETURN value;
    END IF;
    BEGIN
        RETURN finalize_internal.lsn_normalize(value)::text;
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'invalid value for argument start_from of table "%": "%"', table_name, value
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Tracking starts at SQL Server''s current max LSN (max_lsn, the default), at the '
                           'start of the capture instance (capture_start), or right after the LSN the lake''s '
                           'copy of the table ends at, written as 0x and 20 hexadecimal digits '
                           '(0x0000002D00000E580003) or as Debezium writes it (0000002d:00000e58:0003).',
                  HINT = 'For a copy made by a Debezium snapshot, give the commit_lsn its snapshot records carry.';
    END;
END
$$;

CREATE OR REPLACE FUNCTION finalize_internal.track_table(
    caller name,
    table_name   text,
    server_name  text,
    source_table text,
    granularity  interval DEFAULT interval '1 hour',
    start_from   text DEFAULT 'max_lsn',
    ddl_policy   text DEFAULT 'warn',
    on_data_loss text DEFAULT 'stop',
    event_time_column text DEFAULT NULL,
    event_time_zone   text DEFAULT NULL,
    lateness_policy   text DEFAULT 'exact',
    allowed_lateness  interval DEFAULT interval '0',
    lateness_quantile double precision DEFAULT NULL,
    lateness_window   interval DEFAULT interval '7 days',
    period_zone       text DEFAULT 'UTC',
    check_source      boolean DEFAULT true)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    parts text[];
    new_id bigint;
    srv pg_foreign_server;
    who name := caller;
    zone text;
    start_at text;
BEGIN
    PERFORM finalize_internal.check_table_name(track_table.table_name, 'sales.orders');
    srv := finalize_internal.tracking_server(who, track_table.server_name);
    PERFORM finalize_internal.require(track_table.source_table, 'source_table');
    parts := finalize_internal.split_mssql_name(track_table.source_table, 'source_table');
    PERFORM finalize_internal.check_granularity(track_table.granularity, 'granularity');
    zone := finalize_internal.check_zone(track_table.period_zone, 'period_zone');
    start_at := finalize_internal.check_start_from(track_table.table_name, track_table.start_from);
    PERFORM finalize_internal.check_ddl_policy(track_table.ddl_policy);
    PERFORM finalize_internal.check_on_data_loss(track_table.on_data_loss);
    PERFORM finalize_internal.require(track_table.lateness_policy, 'lateness_policy');
    PERFORM finalize_internal.require(track_table.allowed_lateness, 'allowed_lateness');
    PERFORM finalize_internal.require(track_table.lateness_window, 'lateness_window');
    IF track_table.event_time_column IS NULL
       AND (track_table.event_time_zone IS NOT NULL OR track_table.lateness_policy <> 'exact'
            OR track_table.allowed_lateness <> interval '0' OR track_table.lateness_quantile IS NOT NULL) THEN
        RAISE EXCEPTION 'lateness settings need an event_time_column'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A table without an event column is partitioned by commit time, which is exact: it has no lateness.',
                  HINT = 'Pass event_time_column => ''<captured date/time column>'' too.';
    END IF;
    PERFORM finalize_internal.check_event_time(track_table.event_time_column, track_table.event_time_zone,
                                          track_table.lateness_policy, track_table.allowed_lateness,
                                          track_table.lateness_quantile, track_table.lateness_window,
                                          track_table.granularity);
    -- SQL Server's answer, last: no network wait for a call that is refused anyway.
    IF check_source THEN
        PERFORM finalize_internal.check_source_table(srv.oid, parts[1], parts[2]);
    END IF;

    BEGIN
        -- Lengths of time are kept without days, so that adding them is
        -- the same in every session TimeZone.
        INSERT INTO @extschema@.tracked_table
            (table_name, server_name, source_schema, source_name, granularity, start_from,
             ddl_policy, on_data_loss, created_by, event_time_column, event_time_zone, lateness_policy,
             allowed_lateness, lateness_quantile, lateness_window, period_zone)
        VALUES (track_table.table_name, track_table.server_name, parts[1], parts[2], track_table.granularity,
                start_at, track_table.ddl_policy, track_table.on_data_loss, who,
                track_table.event_time_column, track_table.event_time_zone, track_table.lateness_policy,
                make_interval(secs => extract(epoch FROM track_table.allowed_lateness)),
                track_table.lateness_quantile,
                make_interval(secs => extract(epoch FROM track_table.lateness_window)), zone)
        RETURNING table_id INTO new_id;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'table "%" is already tracked', track_table.table_name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Untrack it first with finalize.untrack_table(), or choose another name.';
    END;
    INSERT INTO @extschema@.watermark (table_id) VALUES (new_id);
    PERFORM finalize_internal.seal_catalog();
    RETURN new_id;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.track_table(
    table_name   text,
    server_name  text,
    source_table text,
    granularity  interval DEFAULT interval '1 hour',
    start_from   text DEFAULT 'max_lsn',
    ddl_policy   text DEFAULT 'warn',
    on_data_loss text DEFAULT 'stop',
    event_time_column text DEFAULT NULL,
    event_time_zone   text DEFAULT NULL,
    lateness_policy   text DEFAULT 'exact',
    allowed_lateness  interval DEFAULT interval '0',
    lateness_quantile double precision DEFAULT NULL,
    lateness_window   interval DEFAULT interval '7 days',
    period_zone       text DEFAULT 'UTC')
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.track_table(text, text, text, interval, text, text, text,
                                            text, text, text, interval, double precision, interval, text) IS
    'Start tracking a logical table fed by a SQL Server table with CDC enabled; event_time_column partitions it by a time in its rows, period_zone cuts its periods in a zone';

-- The names of the tracked derived tables that use a table as an input.
CREATE OR REPLACE FUNCTION finalize_internal.dependents(table_id bigint)
RETURNS text[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT coalesce(array_agg(t.table_name ORDER BY t.table_name), '{}')
      FROM @extschema@.derived_input d
      JOIN @extschema@.tracked_table t ON t.table_id = d.table_id
     WHERE d.input_id = dependents.table_id AND t.untracked_at IS NULL;
END;

-- Stops tracking a table. A derived table that uses it would stop for
-- ever, so that is refused unless cascade, which first untracks those
-- derived tables (and the ones using them) the same way, each once: in a
-- diamond, a derived table that uses two of them is gone with the first.
-- A sharded table's shards are parts of it: they are untracked with it
-- (and so are, with cascade, the derived tables built from one of them);
-- a shard alone leaves its sharded table through finalize.drop_shard. A
-- shard whose sharded table is no longer tracked (left behind when an
-- add_shard raced untrack_table, before the two took the same lock) is
-- untracked on its own.
CREATE OR REPLACE FUNCTION @extschema@.untrack_table(table_name text, keep_facts boolean DEFAULT true,
                                          cascade boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    id bigint;
    tkind text;
    part_of bigint;
    label text;
    sharded text;
    users text[];
    dependent text;
BEGIN
    PERFORM finalize_internal.require(untrack_table.table_name, 'table_name');
    PERFORM finalize_internal.require(keep_facts, 'keep_facts');
    PERFORM finalize_internal.require(untrack_table.cascade, 'cascade');
    SELECT t.table_id, t.kind, t.shard_of, t.shard INTO id, tkind, part_of, label
      FROM @extschema@.tracked_table t
     WHERE t.table_name = untrack_table.table_name AND t.untracked_at IS NULL
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM finalize_internal.not_tracked(untrack_table.table_name);
    END IF;
    IF part_of IS NOT NULL THEN
        SELECT p.table_name INTO sharded FROM @extschema@.tracked_table p
         WHERE p.table_id = part_of AND p.untracked_at IS NULL;
        IF FOUND THEN
            RAISE EXCEPTION 'table "%" is shard "%" of sharded table "%"', untrack_table.table_name, label, sharded
                USING ERRCODE = 'wrong_object_type',
                      DETAIL = 'A shard leaves its sharded table with finalize.drop_shard(), or is untracked with it.',
                      HINT = format('Call finalize.drop_shard(%L, %L).', sharded, label);
        END IF;
        -- Its sharded table is gone: nothing else could ever untrack it.
        RAISE NOTICE 'table "%" is shard "%" of a sharded table that is no longer tracked: it is untracked on its own',
                     untrack_table.table_name, label
            USING DETAIL = 'It was left tracked when its sharded table was untracked while it was being added.';
    END IF;
    -- Its verdict: a transaction that writes it (a worker's cycle, a
    -- pipeline's report) commits before the table is untracked, so that
    -- its NOTIFY never names the table once it is untracked, nor after a
    -- table tracked again under its name. A sharded table's is the lock
    -- add_shard and drop_shard take on it (_lock_sharded), so that a shard
    -- added meanwhile is untracked with it, never left behind, and one
    -- added after it sees it untracked. Its row first, exclusively when it
    -- is deleted below: a delete that waited for such a call's key share
    -- while that call waits for the verdict held here would deadlock.
    IF NOT keep_facts THEN
        PERFORM FROM @extschema@.tracked_table t WHERE t.table_id = id FOR UPDATE;
    END IF;
    PERFORM finalize_internal.lock_tracked(id);
    users := finalize_internal.dependents(id);
    IF tkind = 'sharded' THEN
        users := ARRAY(SELECT DISTINCT x.name
                         FROM unnest(users || ARRAY(
                                  SELECT u.name FROM @extschema@.tracked_table s
                                   CROSS JOIN LATERAL unnest(finalize_internal.dependents(s.table_id)) AS u(name)
                                   WHERE s.shard_of = id AND s.untracked_at IS NULL
                                     AND u.name <> untrack_table.table_name)) AS x(name)
                        ORDER BY x.name);
    END IF;
    IF cardinality(users) > 0 AND NOT untrack_table.cascade THEN
        RAISE EXCEPTION '% is an input of derived %',
                        CASE WHEN tkind = 'sharded'
                             THEN format('sharded table "%s" or one of its shards', untrack_table.table_name)
                             ELSE format('table "%s"', untrack_table.table_name) END,
                        (SELECT CASE WHEN count(*) > 1 THEN 'tables ' ELSE 'table ' END
                                || string_agg(format('"%s"', u), ', ') FROM unnest(users) AS u)
            USING ERRCODE = 'dependent_objects_still_exist',
                  DETAIL = 'A derived table is final only as far as its inputs are: without this input its verdict would stop for ever.',
                  HINT = format('Untrack the derived tables first, or call finalize.untrack_table(%L, cascade => true) to untrack them too.',
                                untrack_table.table_name);
    END IF;
    FOREACH dependent IN ARRAY users LOOP
        CONTINUE WHEN NOT EXISTS (SELECT FROM @extschema@.tracked_table t
                                   WHERE t.table_name = dependent AND t.untracked_at IS NULL);
        PERFORM @extschema@.untrack_table(dependent, keep_facts, true);
        RAISE NOTICE 'derived table "%" is untracked too: it used table "%"%', dependent, untrack_table.table_name,
                     CASE WHEN tkind = 'sharded' THEN ' or one of its shards' ELSE '' END;
    END LOOP;
    -- Nothing is watched for an untracked table: its incidents end here
    -- (a sharded table's shards' too).
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE (a.table_id = id
            OR a.table_id IN (SELECT s.table_id FROM @extschema@.tracked_table s
                               WHERE s.shard_of = id AND s.untracked_at IS NULL))
       AND a.state <> 'resolved';
    IF keep_facts THEN
        UPDATE @extschema@.tracked_table t SET untracked_at = now()
         WHERE t.table_id = id OR (t.shard_of = id AND t.untracked_at IS NULL);
    ELSE
        -- its shards with it, the ones dropped before too
        DELETE FROM @extschema@.tracked_table t WHERE t.table_id = id OR t.shard_of = id;
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@.untrack_table(text, boolean, boolean) IS
    'Stop tracking a table (a sharded table with its shards); its facts stay until retention removes them unless keep_facts is false; cascade untracks the derived tables that use it';

-- Changes how a tracked table is handled; NULL keeps a setting. The
-- settings of a sharded table are every shard's: they change on each of
-- its shards, then on it; a shard's own are only its max_lag.
CREATE OR REPLACE FUNCTION @extschema@.alter_tracked_table(
    table_name   text,
    granularity  interval DEFAULT NULL,
    ddl_policy   text DEFAULT NULL,
    on_data_loss text DEFAULT NULL,
    event_time_column text DEFAULT NULL,
    event_time_zone   text DEFAULT NULL,
    lateness_policy   text DEFAULT NULL,
    allowed_lateness  interval DEFAULT NULL,
    lateness_quantile double precision DEFAULT NULL,
    lateness_window   interval DEFAULT NULL,
    max_lag           interval DEFAULT NULL,
    period_zone       text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
    zone text;
    part bigint;
BEGIN
    PERFORM finalize_internal.require(alter_tracked_table.table_name, 'table_name');
    IF granularity IS NOT NULL THEN
        PERFORM finalize_internal.check_granularity(granularity, 'granularity');
    END IF;
    IF period_zone IS NOT NULL THEN
        zone := finalize_internal.check_zone(period_zone, 'period_zone');
    END IF;
    IF ddl_policy IS NOT NULL THEN
        PERFORM finalize_internal.check_ddl_policy(ddl_policy);
    END IF;
    IF on_data_loss IS NOT NULL THEN
        PERFORM finalize_internal.check_on_data_loss(on_data_loss);
    END IF;
    IF max_lag IS NOT NULL AND (max_lag < interval '0' OR extract(month FROM max_lag) <> 0
                                OR extract(year FROM max_lag) <> 0) THEN
        RAISE EXCEPTION 'invalid value for argument max_lag: %', max_lag
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The freshness SLA is a length of time without months, such as ''2 hours''; 0 removes it.';
    END IF;
    SELECT t.* INTO tt FROM @extschema@.tracked_table t
     WHERE t.table_name = alter_tracked_table.table_name AND t.untracked_at IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM finalize_internal.not_tracked(alter_tracked_table.table_name);
    END IF;
    IF tt.shard_of IS NOT NULL
       AND (granularity IS NOT NULL OR period_zone IS NOT NULL OR ddl_policy IS NOT NULL OR on_data_loss IS NOT NULL
            OR event_time_column IS NOT NULL OR event_time_zone IS NOT NULL OR lateness_policy IS NOT NULL
            OR allowed_lateness IS NOT NULL OR lateness_quantile IS NOT NULL OR lateness_window IS NOT NULL) THEN
        RAISE EXCEPTION 'table "%" is shard "%" of sharded table "%": only its max_lag can be changed',
                        tt.table_name, tt.shard, (SELECT p.table_name FROM @extschema@.tracked_table p WHERE p.table_id = tt.shard_of)
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'Its periods, its DDL and data-loss policies and its event-time settings are its sharded table''s, the same for every shard.',
                  HINT = format('Change them on the sharded table: finalize.alter_tracked_table(%L, ...).',
                                (SELECT p.table_name FROM @extschema@.tracked_table p WHERE p.table_id = tt.shard_of));
    END IF;
    -- A sharded table first (its verdict before its shards', in the order
    -- add_shard and drop_shard take them), then each of its shards.
    PERFORM finalize_internal.alter_tracked(tt.table_id, granularity, ddl_policy, on_data_loss, event_time_column,
                                       event_time_zone, lateness_policy, allowed_lateness, lateness_quantile,
                                       lateness_window, max_lag, zone);
    IF tt.kind = 'sharded' THEN
        FOR part IN SELECT x.table_id FROM @extschema@.tracked_table x
                     WHERE x.shard_of = tt.table_id AND x.untracked_at IS NULL
                     ORDER BY x.table_id FOR NO KEY UPDATE LOOP
            PERFORM finalize_internal.alter_tracked(part, granularity, ddl_policy, on_data_loss, event_time_column,
                                               event_time_zone, lateness_policy, allowed_lateness,
                                               lateness_quantile, lateness_window, NULL, zone);
        END LOOP;
        -- its verdict under new periods, once its shards have them
        PERFORM finalize_internal.advance(tt.table_id);
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@.alter_tracked_table(text, interval, text, text, text, text, text, interval,
                                                    double precision, interval, interval, text) IS
    'Change the periods (granularity, period_zone), DDL policy, data-loss policy, event-time settings or freshness SLA (max_lag) of a tracked table (only the periods and max_lag of a derived one, only max_lag of a shard; a sharded table''s change on every shard)';

-- The body of alter_tracked_table for one table, whose row the caller
-- holds, with its arguments checked (period_zone as _check_zone spells it).
CREATE OR REPLACE FUNCTION finalize_internal.alter_tracked(
    table_id     bigint,
    granularity  interval,
    ddl_policy   text,
    on_data_loss text,
    event_time_column text,
    event_time_zone   text,
    lateness_policy   text,
    allowed_lateness  interval,
    lateness_quantile double precision,
    lateness_window   interval,
    max_lag           interval,
    period_zone       text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    id bigint := alter_tracked.table_id;
    kind text;
    cur @extschema@.tracked_table;
    has_verdict boolean;
    event_changed boolean;
    zone text := alter_tracked.period_zone;
    periods_changed boolean;
BEGIN
    SELECT t.kind INTO kind FROM @extschema@.tracked_table t
     WHERE t.table_id = id AND t.untracked_at IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tracked table with id % is no longer tracked', id
            USING ERRCODE = 'undefined_object';
    END IF;
    -- Its verdict too, before anything is read to decide on: new periods
    -- may give it a loss to wait for, and a loss recorded meanwhile (which
    -- holds the verdict) must be seen (_refresh_loss_blocked).
    PERFORM finalize_internal.lock_tracked(id);
    SELECT t.* INTO cur FROM @extschema@.tracked_table t WHERE t.table_id = id;
    IF kind = 'derived' AND (ddl_policy IS NOT NULL OR on_data_loss IS NOT NULL OR event_time_column IS NOT NULL
                             OR event_time_zone IS NOT NULL OR lateness_policy IS NOT NULL
                             OR allowed_lateness IS NOT NULL OR lateness_quantile IS NOT NULL
                             OR lateness_window IS NOT NULL) THEN
        RAISE EXCEPTION 'table "%" is a derived table: only its granularity, period_zone and max_lag can be changed', cur.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'ddl_policy, on_data_loss and the event-time settings say how the worker reads a SQL Server table; a derived table has none.';
    END IF;
    SELECT w.finalized_until IS NOT NULL INTO has_verdict FROM @extschema@.watermark w WHERE w.table_id = id;
    event_changed := (event_time_column IS NOT NULL AND event_time_column IS DISTINCT FROM cur.event_time_column)
                     OR (event_time_zone IS NOT NULL AND event_time_zone IS DISTINCT FROM cur.event_time_zone);
    -- Whether the periods change: a new granularity (compared as written:
    -- '7 days' are ISO weeks, '168 hours' a stride from Saturday 2000-01-01,
    -- and the two intervals are equal) or a new zone.
    periods_changed := (granularity IS NOT NULL AND granularity::text IS DISTINCT FROM cur.granularity::text)
                       OR (zone IS NOT NULL AND zone IS DISTINCT FROM cur.period_zone);
    -- Event facts are stored per period they were recorded in: new periods
    -- would split or merge them. (Late rows are kept as spans of instants,
    -- late_period, which any periods read: they never stop a change, and
    -- purge_facts never removes them.)
    IF periods_changed
       AND coalesce(event_time_column, cur.event_time_column) IS NOT NULL
       AND EXISTS (SELECT FROM @extschema@.event_fact e WHERE e.table_id = id) THEN
        RAISE EXCEPTION 'table "%" is partitioned by event time and has event facts, so its periods (granularity and period_zone) cannot change', cur.table_name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'Rows per event period and the release gate count in the periods the facts were recorded in, until finalize.facts_retention removes them.',
                  HINT = 'Track the table again under a new name with the new periods, then untrack this one.';
    END IF;
    -- What the verdict means changes with the partitioning time: a verdict
    -- given in commit time (or another column's time) cannot be kept.
    IF event_changed AND (has_verdict OR EXISTS (SELECT FROM @extschema@.event_fact e WHERE e.table_id = id)
                          OR EXISTS (SELECT FROM @extschema@.lateness_hour h WHERE h.table_id = id)) THEN
        RAISE EXCEPTION 'table "%" already has a verdict or event facts, so its event column cannot change', cur.table_name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('Its periods up to %s were declared final in %s; a verdict never moves back.',
                                  finalize_internal.utc_iso((SELECT w.finalized_until FROM @extschema@.watermark w WHERE w.table_id = id)),
                                  CASE WHEN cur.event_time_column IS NULL THEN 'commit time'
                                       ELSE format('the time of column "%s"', cur.event_time_column) END),
                  HINT = format('Track the table again under a new name with finalize.%s(..., event_time_column => ...), then untrack this one.',
                                CASE WHEN kind = 'sharded' THEN 'track_sharded' ELSE 'track_table' END);
    END IF;
    IF coalesce(event_time_column, cur.event_time_column) IS NULL
       AND (event_time_zone IS NOT NULL OR lateness_policy IS NOT NULL OR allowed_lateness IS NOT NULL
            OR lateness_quantile IS NOT NULL OR lateness_window IS NOT NULL) THEN
        RAISE EXCEPTION 'table "%" has no event_time_column, so it has no lateness settings', cur.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A table partitioned by commit time is exact: it has no lateness.';
    END IF;
    PERFORM finalize_internal.check_event_time(
        coalesce(event_time_column, cur.event_time_column), coalesce(event_time_zone, cur.event_time_zone),
        coalesce(lateness_policy, cur.lateness_policy), coalesce(allowed_lateness, cur.allowed_lateness),
        CASE WHEN coalesce(lateness_policy, cur.lateness_policy) = 'exact' AND lateness_quantile IS NULL THEN NULL
             ELSE coalesce(lateness_quantile, cur.lateness_quantile) END,
        coalesce(lateness_window, cur.lateness_window), coalesce(granularity, cur.granularity));
    -- A stricter lateness policy applies from now on: periods already
    -- final stay final (a verdict never moves back).
    UPDATE @extschema@.tracked_table t
       SET granularity = coalesce(alter_tracked.granularity, t.granularity),
           period_zone = coalesce(zone, t.period_zone),
           ddl_policy = coalesce(alter_tracked.ddl_policy, t.ddl_policy),
           on_data_loss = coalesce(alter_tracked.on_data_loss, t.on_data_loss),
           event_time_column = coalesce(alter_tracked.event_time_column, t.event_time_column),
           event_time_zone = coalesce(alter_tracked.event_time_zone, t.event_time_zone),
           lateness_policy = coalesce(alter_tracked.lateness_policy, t.lateness_policy),
           allowed_lateness = coalesce(make_interval(secs => extract(epoch FROM alter_tracked.allowed_lateness)),
                                       t.allowed_lateness),
           lateness_quantile = CASE WHEN coalesce(alter_tracked.lateness_policy, t.lateness_policy) = 'exact'
                                    THEN NULL
                                    ELSE coalesce(alter_tracked.lateness_quantile, t.lateness_quantile) END,
           lateness_window = coalesce(make_interval(secs => extract(epoch FROM alter_tracked.lateness_window)),
                                      t.lateness_window),
           -- without days, like every length of time here; 0 removes the SLA
           max_lag = CASE WHEN alter_tracked.max_lag IS NULL THEN t.max_lag
                          WHEN alter_tracked.max_lag = interval '0' THEN NULL
                          ELSE make_interval(secs => extract(epoch FROM alter_tracked.max_lag)) END
     WHERE t.table_id = id;
    -- The verdict stays valid under any periods: it is an instant before
    -- which everything is complete, so it is kept as it is, and what reads
    -- it as a boundary (finalized_until(), explain_verdict, the status
    -- view) rounds it down to one of the new periods, never up: every new
    -- period ending at or before it is final, none it only reaches into.
    -- Going back to finer periods loses nothing. Which periods a loss holds
    -- depends on the periods; a derived table's verdict may move at once
    -- under finer ones. A sharded table's verdict is moved and announced
    -- by alter_tracked_table once its shards have the new periods too:
    -- announced before, it could name periods that a shard's loss, whose
    -- acknowledgements no longer cover them, holds when the change commits.
    IF periods_changed THEN
        PERFORM finalize_internal.refresh_loss_blocked(id);
        IF kind <> 'sharded' THEN
            PERFORM finalize_internal.advance(id);
        END IF;
    END IF;
END
$$;

-- Lets a stopped table go on. After a schema change that blocked it, the DDL
-- counts as reviewed and the verdict continues from where it stopped. After
-- a data loss, the table is marked resuming; the worker then records the lost
-- LSN range as a "resumed" event (with who asked) and restarts the table at
-- its capture instance's current min LSN, so the verdict resumes only from
-- there. The lost range stays visible in finalize.facts.
-- The body of finalize.resume_table, run as the extension's owner by its C entry
-- point (owner.c) with the caller taken before the switch.
CREATE OR REPLACE FUNCTION finalize_internal.resume_table(
    caller name,
    table_name text)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
    wm @extschema@.watermark;
    blocked @extschema@.fact;
    ddl_lsn @extschema@.lsn;
    who name := caller;
BEGIN
    tt := finalize_internal.tracked(resume_table.table_name);
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id FOR UPDATE;
    SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = tt.table_id;

    IF tt.state = 'schema_blocked' THEN
        -- The DDL to acknowledge is kept with the verdict while the table is
        -- blocked: its event fact may have expired meanwhile.
        SELECT f.* INTO blocked FROM @extschema@.fact f
         WHERE f.table_id = tt.table_id AND f.event = 'schema_blocked'
         ORDER BY f.fact_id DESC LIMIT 1;
        ddl_lsn := coalesce(wm.blocked_ddl_lsn, (blocked.detail ->> 'ddl_lsn')::@extschema@.lsn);
        IF ddl_lsn IS NULL THEN
            RAISE EXCEPTION 'table "%" is schema_blocked, but the DDL that blocked it is not known', tt.table_name
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'Neither the verdict nor the facts record the LSN of the blocking DDL, so resuming could not acknowledge it and the table would block again.',
                      HINT = 'Untrack the table and track it again.';
        END IF;
        UPDATE @extschema@.watermark w
           SET schema_ack_lsn = GREATEST(w.schema_ack_lsn, ddl_lsn), blocked_ddl_lsn = NULL
         WHERE w.table_id = tt.table_id;
        INSERT INTO @extschema@.fact (table_id, kind, event, start_lsn, end_lsn, capture_instance, detail)
        VALUES (tt.table_id, 'event', 'resumed', blocked.start_lsn, ddl_lsn, blocked.capture_instance,
                jsonb_build_object('after', 'schema_blocked', 'by', who, 'ddl_lsn', ddl_lsn,
                                   'ddl_command', blocked.detail ->> 'ddl_command'));
        UPDATE @extschema@.tracked_table t
           SET state = 'active', state_detail = NULL, state_since = now()
         WHERE t.table_id = tt.table_id;
        PERFORM finalize_internal.resolve_alerts('schema_blocked', tt.table_id, tt.server_name);
        RETURN format('Table "%s" resumes; the DDL at LSN %s counts as reviewed.', tt.table_name, ddl_lsn);
    ELSIF tt.state = 'data_lost' THEN
        INSERT INTO @extschema@.fact (table_id, kind, event, capture_instance, detail)
        VALUES (tt.table_id, 'event', 'resume_requested', tt.capture_instance,
                jsonb_build_object('by', who));
        UPDATE @extschema@.tracked_table t
           SET state = 'resuming',
               state_detail = format('%s asked to resume at %s; the worker restarts the table at its capture instance''s min LSN on its next cycle.', who, now()),
               state_since = now()
         WHERE t.table_id = tt.table_id;
        RETURN format('Table "%s" resumes at its capture instance''s current min LSN on the worker''s next cycle; the lost range is recorded as an event.',
                      tt.table_name);
    ELSIF tt.state IN ('active', 'resuming') THEN
        RETURN format('Table "%s" is %s; nothing to resume.', tt.table_name, tt.state);
    END IF;
    RAISE EXCEPTION 'table "%" cannot be resumed from state %', tt.table_name, tt.state
        USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.resume_table(table_name text)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.resume_table(text) IS
    'Let a table stopped by a data loss or a blocking schema change go on, recording who and what was lost';

-- Lets a source held by a condition that a later cycle cannot disprove
-- (commit_time_ahead) go on, once the cause is fixed on SQL Server. Returns
-- whether it was held. The worker's next cycle checks again.
CREATE OR REPLACE FUNCTION @extschema@.release_source(server_name text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    released boolean;
BEGIN
    PERFORM finalize_internal.require(release_source.server_name, 'server_name');
    UPDATE @extschema@.source_status s
       SET held_by = NULL, held_since = NULL
     WHERE s.server_name = release_source.server_name AND s.held_by IS NOT NULL;
    released := FOUND;
    IF NOT released AND NOT EXISTS (SELECT FROM @extschema@.source_status s
                                     WHERE s.server_name = release_source.server_name) THEN
        RAISE EXCEPTION 'finalize has no status for server "%"', release_source.server_name
            USING ERRCODE = 'undefined_object',
                  HINT = 'The name is that of a foreign server with tracked tables, as in finalize.source_status.';
    END IF;
    RETURN released;
END
$$;
COMMENT ON FUNCTION @extschema@.release_source(text) IS
    'Let a source held by commit_time_ahead go on once SQL Server stamps commits in its clock''s zone';
-- The verdict and what holds it. One function moves finalized_until
-- (_advance): to the least of the table's source verdict
-- (watermark.source_until: what SQL Server captured, or for a derived table
-- what its inputs allow) and the verdict of every required consumer, never
-- below where it was. Losses never move it: they hold the periods they
-- intersect until acknowledgements cover them (_loss_blocks; on the table
-- that lost the data and on the derived tables whose jobs must rebuild
-- them, _loss_ackers), finalized_until() stops at the first of those
-- periods (_loss_cap), and watermark.loss_blocked says when that must be
-- asked. What is announced of a verdict (NOTIFY, finalize.status,
-- explain_verdict) is what finalized_until() answers (_sensor_until), never
-- the watermark; _announce sends it (docs/design/announcements.md).
-- See docs/design/pipelines.md.

-- The verdict of one consumer: the period start (the table's periods:
-- granularity in zone) of the commit time it has applied up to (a tracked
-- table's consumer, as the worker resolved its LSN) or of the input
-- watermark its job processed (a derived table's); NULL while it has none.
CREATE OR REPLACE FUNCTION finalize_internal.consumer_until(kind text, granularity interval, zone text,
                                            commit_time timestamptz, processed_until timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.period_start(CASE WHEN kind = 'source' THEN commit_time ELSE processed_until END, granularity,
                                zone);

-- The verdict each of some tables may have now: the least of its source
-- verdict (watermark.source_until) and its required consumers' verdicts, or
-- NULL (no advance) when any of them is NULL: a consumer that has not
-- reported holds everything. One query for many tables, so that a worker
-- cycle over thousands of tables (_advance_sources) and _advance for one
-- share the rule.
CREATE OR REPLACE FUNCTION finalize_internal.effective_untils(table_ids bigint[])
RETURNS TABLE (table_id bigint, until timestamptz)
LANGUAGE sql STABLE
-- Most calls are for one table (_advance): joins over its result must probe
-- indexes, not hash whole tables (the default estimate is 1,000 rows).
ROWS 10
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT t.table_id,
           CASE WHEN w.source_until IS NOT NULL AND NOT coalesce(c.unreported, false)
                THEN LEAST(w.source_until, c.least_until) END
      FROM (SELECT DISTINCT i.id FROM unnest(effective_untils.table_ids) AS i(id)) i
      JOIN @extschema@.tracked_table t ON t.table_id = i.id
      JOIN @extschema@.watermark w ON w.table_id = t.table_id
     CROSS JOIN LATERAL (SELECT bool_or(x.until IS NULL) AS unreported, min(x.until) AS least_until
                           FROM @extschema@.consumer rc
                          CROSS JOIN LATERAL (SELECT finalize_internal.consumer_until(t.kind, t.granularity, t.period_zone,
                                                                                rc.commit_time, rc.processed_until)
                                                       AS until) x
                          WHERE rc.table_id = t.table_id AND rc.required) c;
END;

-- What derived tables' inputs are final until (the least of their
-- verdicts, NULL while one has none), many at once (the scheduler looks at
-- every derived table each round): a job cannot have processed complete
-- input beyond it.
CREATE OR REPLACE FUNCTION finalize_internal.inputs_final_untils(table_ids bigint[])
RETURNS TABLE (table_id bigint, until timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT d.table_id, CASE WHEN count(*) = count(w.finalized_until) THEN min(w.finalized_until) END
      FROM @extschema@.derived_input d
      JOIN @extschema@.watermark w ON w.table_id = d.input_id
     WHERE d.table_id = ANY (inputs_final_untils.table_ids)
     GROUP BY d.table_id;
END;

-- What one derived table's inputs are final until (_inputs_final_untils).
CREATE OR REPLACE FUNCTION finalize_internal.inputs_final_until(table_id bigint)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT u.until FROM finalize_internal.inputs_final_untils(ARRAY[inputs_final_until.table_id]) AS u;
END;


-- The source verdict of a derived table: its inputs' least
-- finalized_until rounded down to a start of its own periods (granularity
-- in zone, which may differ from its inputs'), NULL while any input has
-- none.
CREATE OR REPLACE FUNCTION finalize_internal.inputs_until(table_id bigint, granularity interval, zone text)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.period_start(finalize_internal.inputs_final_until(table_id), granularity, zone);

-- The payload of an advance on channel "finalize": the table, the old and
-- new verdicts, the offset of its facts (LSN and commit time, null for a
-- derived table), and "kind": "derived" for a derived table only, so that a
-- tracked table's payload stays what it always was. In C (thousands of
-- advances in one statement), in json_build_object's layout.
CREATE OR REPLACE FUNCTION finalize_internal.advance_payload(table_name text, kind text, old_until timestamptz,
                                             new_until timestamptz, offset_lsn text,
                                             offset_commit_time timestamptz)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_advance_payload'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- What finalized_until() answers for a table of a kind whose watermark
-- row holds finalized_until and loss_blocked (its own flag: the function
-- adds the flags of the tables a derived or sharded one is built from),
-- under the statement's snapshot:
-- the sensors' own rule in C (src/sensor/sensor.c), rounded down to a
-- start of the table's periods and stopped where losses hold periods
-- (_loss_cap, asked as the extension's owner). Every announcement of a
-- verdict tells this one and never a raw watermark: NOTIFY payloads
-- (_announce), finalize.status, explain_verdict. Readers may call it
-- (finalize.status does).
CREATE OR REPLACE FUNCTION finalize_internal.sensor_until(table_id bigint, kind text, finalized_until timestamptz,
                                          granularity interval, period_zone text, loss_blocked boolean)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_sensor_until'
LANGUAGE C STABLE;

-- Whether no other transaction can lower the verdicts a derived or
-- sharded table is built from until this one ends: the rows of the tables
-- it is built from (transitively) are held FOR SHARE, each without
-- waiting. What lowers a verdict already final (new periods, whose
-- acknowledgements may no longer cover a loss; a lake's rollback) holds
-- the table's row FOR NO KEY UPDATE, which conflicts; ranges and reports
-- take KEY SHARE, which does not (a state change of the worker, which does
-- not wait, may find a row held for milliseconds and retries next cycle,
-- as _lock_tracked_row says). True for a table built
-- from none; false in a session, which never holds another team's rows
-- (the scheduler's round, whose transactions end within milliseconds,
-- announces the table). Rows it could take stay held.
CREATE OR REPLACE FUNCTION finalize_internal.hold_inputs(table_id bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    ids bigint[];
    n integer;
BEGIN
    ids := ARRAY(WITH RECURSIVE up(id) AS (
                     SELECT d.input_id FROM @extschema@.derived_input d WHERE d.table_id = hold_inputs.table_id
                     UNION
                     SELECT d.input_id FROM @extschema@.derived_input d JOIN up ON d.table_id = up.id)
                 SELECT up.id FROM up ORDER BY up.id);
    IF cardinality(ids) = 0 THEN
        RETURN true;
    ELSIF NOT finalize_internal.in_background() THEN
        RETURN false;
    END IF;
    SELECT count(*) INTO n
      FROM (SELECT FROM @extschema@.tracked_table t WHERE t.table_id = ANY (ids)
             ORDER BY t.table_id FOR SHARE SKIP LOCKED) AS x;
    RETURN n = cardinality(ids);
END
$$;

-- Announces the verdicts of some tables whose rows the caller holds:
-- records what finalized_until() answers now (_sensor_until) as
-- watermark.announced_until and, for each that moved past the verdict
-- announced last, sends one NOTIFY on channel "finalize" naming the two
-- (old, new). A verdict that went back (a lake's rollback, other periods)
-- is recorded without a notification, so that the next one names where it
-- stood; with falls_only nothing else is recorded, for callers that an
-- advance follows in the same transaction (it announces once, at the
-- verdict the transaction ends with). A rise of a derived or sharded
-- table is announced only once _hold_inputs holds its inputs, before the
-- verdict is read (a statement of its own: a new snapshot): read before a
-- transaction that lowers an input's verdict commits, and sent at this
-- one's commit after it, a payload would name periods finalized_until()
-- no longer gives. One another transaction holds is left as it was (the
-- scheduler's next round announces it). Returns the tables announced.
-- With the same rule in the UPDATE of _advance_sources, the one way a
-- verdict is announced (docs/design/announcements.md).
CREATE OR REPLACE FUNCTION finalize_internal.announce(table_ids bigint[], falls_only boolean DEFAULT false)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    held bigint[] := '{}';
BEGIN
    IF NOT falls_only THEN
        held := ARRAY(SELECT i.id FROM unnest(table_ids) AS i(id) WHERE finalize_internal.hold_inputs(i.id));
    END IF;
    RETURN QUERY
    WITH cur AS (
        SELECT w.table_id, w.announced_until AS old_until,
               finalize_internal.sensor_until(w.table_id, t.kind, w.finalized_until, t.granularity, t.period_zone,
                                         w.loss_blocked) AS new_until
          FROM (SELECT DISTINCT i.id FROM unnest(table_ids) AS i(id)) i
          JOIN @extschema@.tracked_table t ON t.table_id = i.id
          JOIN @extschema@.watermark w ON w.table_id = t.table_id
         WHERE t.untracked_at IS NULL),
    changed AS (
        UPDATE @extschema@.watermark w
           SET announced_until = c.new_until
          FROM cur c
         WHERE w.table_id = c.table_id AND c.new_until IS DISTINCT FROM c.old_until
           AND (c.table_id = ANY (held) OR c.new_until IS NULL OR c.new_until < c.old_until)
        RETURNING w.table_id, c.old_until, c.new_until, w.offset_lsn, w.offset_commit_time)
    SELECT x.table_id
      FROM (SELECT ch.* FROM changed ch WHERE ch.new_until > coalesce(ch.old_until, '-infinity')) x
      JOIN @extschema@.tracked_table t ON t.table_id = x.table_id
     CROSS JOIN LATERAL finalize_internal.notify('finalize',
                            finalize_internal.advance_payload(t.table_name, t.kind, x.old_until, x.new_until,
                                                         x.offset_lsn, x.offset_commit_time)) n
     ORDER BY x.table_id;
END
$$;

-- Like _lock_tracked(table_id, false), but NULL instead of waiting when
-- another transaction holds the table's row or verdict.
CREATE OR REPLACE FUNCTION finalize_internal.try_lock_tracked(table_id bigint)
RETURNS @extschema@.tracked_table
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
BEGIN
    PERFORM FROM @extschema@.tracked_table t
     WHERE t.table_id = try_lock_tracked.table_id AND t.untracked_at IS NULL FOR KEY SHARE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM FROM @extschema@.watermark w WHERE w.table_id = try_lock_tracked.table_id FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = try_lock_tracked.table_id;
    RETURN tt;
END
$$;

-- _advance for source tables partitioned by commit time, many at once (a
-- worker's cycle records thousands of tables in one transaction): each
-- verdict, which the caller has locked, moves commit_until to the greatest
-- of its old value and _effective_untils, then finalized_until likewise,
-- and announces the verdict as _announce does, in the same statement
-- (announced_until is what _sensor_until answers for the new row: a
-- source table is built from no other, so its own loss flag is its
-- lineage's): a NOTIFY on channel "finalize" for each one that moved past
-- the last one announced, never past a loss that holds periods. Returns
-- the tables whose finalized_until moved: the caller lets their derived
-- tables follow. Other tables (derived, event-time) are left alone.
CREATE OR REPLACE FUNCTION finalize_internal.advance_sources(table_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    WITH cur AS (
        SELECT t.table_id, t AS tt, w AS wm, GREATEST(w.commit_until, e.until) AS new_commit
          FROM finalize_internal.effective_untils(table_ids) e
          JOIN @extschema@.tracked_table t ON t.table_id = e.table_id
          JOIN @extschema@.watermark w ON w.table_id = t.table_id
         WHERE t.kind = 'source' AND t.event_time_column IS NULL),
    moved AS (
        UPDATE @extschema@.watermark w
           SET commit_until = c.new_commit,
               finalized_until = GREATEST(w.finalized_until, c.new_commit),
               advanced_at = CASE WHEN GREATEST(w.finalized_until, c.new_commit) IS DISTINCT FROM w.finalized_until
                                  THEN now() ELSE w.advanced_at END,
               announced_until = finalize_internal.sensor_until(w.table_id, 'source', GREATEST(w.finalized_until, c.new_commit),
                                                           (c.tt).granularity, (c.tt).period_zone, w.loss_blocked)
          FROM cur c
         WHERE w.table_id = c.table_id
           AND (c.new_commit IS DISTINCT FROM w.commit_until
                OR GREATEST(w.finalized_until, c.new_commit) IS DISTINCT FROM w.finalized_until)
        RETURNING w.table_id, c.tt, c.wm, w.finalized_until AS new_until, w.announced_until AS announced)
    SELECT x.table_id
      FROM (SELECT m.table_id, m.new_until IS DISTINCT FROM (m.wm).finalized_until AS advanced
              FROM moved m
              -- every row is looked at (OFFSET 0: the filter below comes after)
              LEFT JOIN LATERAL (
                    SELECT finalize_internal.notify('finalize',
                               finalize_internal.advance_payload((m.tt).table_name, (m.tt).kind, (m.wm).announced_until,
                                                            m.announced, (m.wm).offset_lsn,
                                                            (m.wm).offset_commit_time)) AS sent
                     WHERE m.announced > coalesce((m.wm).announced_until, '-infinity')) n ON true
            OFFSET 0) x
     WHERE x.advanced
     ORDER BY x.table_id;
END
$$;

-- Lets the derived tables that use any of the given tables follow them,
-- each once, in table order, in a background worker's transaction only:
-- a row it locks there is released within milliseconds. A session's
-- transaction (a pipeline's report, an admin's change) moves only the
-- table it writes, never the derived tables of other teams, which it
-- would hold until it ends; the scheduler's _refresh_derived moves them
-- within a round of its commit. _advance without waiting, so that an
-- input's advance never waits for a pipeline's open transaction either
-- (_refresh_derived catches a skipped one up). The one loop of _advance
-- and _record_ranges.
CREATE OR REPLACE FUNCTION finalize_internal.advance_dependents(input_ids bigint[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dependent bigint;
BEGIN
    IF NOT finalize_internal.in_background() THEN
        RETURN;
    END IF;
    FOR dependent IN SELECT DISTINCT d.table_id FROM @extschema@.derived_input d
                       JOIN @extschema@.tracked_table t ON t.table_id = d.table_id
                      WHERE d.input_id = ANY (input_ids) AND t.untracked_at IS NULL
                      ORDER BY d.table_id LOOP
        PERFORM finalize_internal.advance(dependent, false);
    END LOOP;
END
$$;

-- The one function that moves a verdict: locks the table's verdict, takes a
-- derived table's source verdict from its inputs, moves the commit-time
-- verdict commit_until to the greatest of its old value and
-- _effective_untils, then finalized_until to the greatest of its old value
-- and that (on an event-time table: the event-time verdict _event_until
-- draws from it, held by losses as _loss_cap says in event time), announces
-- the verdict (_announce: a NOTIFY on channel "finalize" when what
-- finalized_until() answers moved, also when the watermark did not), and
-- lets every derived table that uses
-- this one follow in the same transaction when it is a background
-- worker's (_advance_dependents). The inputs form a DAG (track_derived
-- refuses cycles), so the recursion ends. A derived table whose verdict
-- another transaction holds is skipped (wait false): an input's advance
-- never waits for a pipeline's open transaction, nor two sources' workers
-- for each other; the scheduler's _refresh_derived catches it up. Returns
-- finalized_until, NULL for a table no longer tracked (or skipped).
CREATE OR REPLACE FUNCTION finalize_internal.advance(table_id bigint, wait boolean DEFAULT true)
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := CASE WHEN wait THEN finalize_internal.lock_tracked(table_id, false)
                                         ELSE finalize_internal.try_lock_tracked(table_id) END;
    wm @extschema@.watermark;
    from_inputs timestamptz;
    new_commit timestamptz;
    new_until timestamptz;
    ev record;
    cap timestamptz;
    moved boolean;
BEGIN
    IF tt.table_id IS NULL THEN
        RETURN NULL;
    END IF;
    -- A source table partitioned by commit time: the way of a worker's
    -- cycle, for one table.
    IF tt.kind = 'source' AND tt.event_time_column IS NULL THEN
        moved := EXISTS (SELECT FROM finalize_internal.advance_sources(ARRAY[tt.table_id]));
        -- announced there if it moved; else what made periods final may be
        -- an acknowledgement, or a consumer dropped
        IF NOT moved THEN
            PERFORM finalize_internal.announce(ARRAY[tt.table_id]);
        END IF;
        -- run on every call (for no table when nothing moved): its plan is
        -- made at the first call, not at the first advance hours later
        PERFORM finalize_internal.advance_dependents(CASE WHEN moved THEN ARRAY[tt.table_id] ELSE '{}' END);
        RETURN (SELECT w.finalized_until FROM @extschema@.watermark w WHERE w.table_id = tt.table_id);
    END IF;
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    -- A sharded table is derived from its shards (derived_input): the
    -- least of their verdicts, NULL while one has none or it has no shard.
    IF tt.kind IN ('derived', 'sharded') THEN
        from_inputs := finalize_internal.inputs_until(tt.table_id, tt.granularity, tt.period_zone);
        IF from_inputs > coalesce(wm.source_until, '-infinity') THEN
            UPDATE @extschema@.watermark w SET source_until = from_inputs WHERE w.table_id = tt.table_id;
            wm.source_until := from_inputs;
        END IF;
    END IF;
    new_commit := GREATEST(wm.commit_until,
                           (SELECT e.until FROM finalize_internal.effective_untils(ARRAY[tt.table_id]) e));
    -- (A sharded table partitioned by event time takes its shards'
    -- event-time verdicts as they are: each is drawn from its own.)
    IF tt.event_time_column IS NULL OR tt.kind = 'sharded' THEN
        new_until := GREATEST(wm.finalized_until, new_commit);
    ELSE
        -- The event-time verdict, held by losses (whose spans are event times
        -- on an event-time table, see _record_loss).
        ev := finalize_internal.event_until(tt, new_commit);
        -- A loss holds the event times its rows may have under the
        -- allowance: when the allowance grows (or becomes known), its start
        -- reaches further back, never into periods already final.
        IF ev.allowance IS NOT NULL AND ev.allowance > coalesce(wm.event_allowance, interval '0')
           AND EXISTS (SELECT FROM @extschema@.loss l WHERE l.table_id = tt.table_id AND l.commit_from IS NOT NULL) THEN
            UPDATE @extschema@.loss l
               SET lost_from = GREATEST(coalesce(finalize_internal.instant_minus(l.commit_from, ev.allowance), '-infinity'),
                                        coalesce(wm.finalized_until, '-infinity'))
             WHERE l.table_id = tt.table_id AND l.commit_from IS NOT NULL
               AND GREATEST(coalesce(finalize_internal.instant_minus(l.commit_from, ev.allowance), '-infinity'),
                            coalesce(wm.finalized_until, '-infinity')) < l.lost_from;
            IF FOUND THEN
                PERFORM finalize_internal.refresh_loss_blocked(tt.table_id);
                SELECT w.loss_blocked INTO wm.loss_blocked FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
            END IF;
        END IF;
        IF wm.loss_blocked AND ev.until IS NOT NULL THEN
            cap := finalize_internal.loss_cap(tt.table_id);
            -- a loss without a start holds every period (LEAST skips NULLs: never pass one)
            ev.until := CASE WHEN cap > '-infinity' THEN LEAST(ev.until, cap) END;
        END IF;
        new_until := GREATEST(wm.finalized_until, ev.until);
        IF ev.allowance IS DISTINCT FROM wm.event_allowance THEN
            UPDATE @extschema@.watermark w SET event_allowance = ev.allowance WHERE w.table_id = tt.table_id;
        END IF;
    END IF;
    IF new_commit IS DISTINCT FROM wm.commit_until THEN
        UPDATE @extschema@.watermark w SET commit_until = new_commit WHERE w.table_id = tt.table_id;
    END IF;
    IF new_until IS NOT DISTINCT FROM wm.finalized_until THEN
        -- (an acknowledgement, a consumer dropped: periods may be final now)
        PERFORM finalize_internal.announce(ARRAY[tt.table_id]);
        RETURN new_until;
    END IF;
    UPDATE @extschema@.watermark w SET finalized_until = new_until, advanced_at = now()
     WHERE w.table_id = tt.table_id;
    PERFORM finalize_internal.announce(ARRAY[tt.table_id]);
    PERFORM finalize_internal.advance_dependents(ARRAY[tt.table_id]);
    RETURN new_until;
END
$$;

-- How far from s the acknowledgements of a table recorded after a loss
-- (since) reach without a gap, adjacent or overlapping ones joined: at
-- least e once they cover every instant of [s, e). Where they stop, the
-- loss still holds periods (_acked, _loss_cap). In C (src/sensor/loss_sql.c),
-- the sweep the sensors use.
CREATE OR REPLACE FUNCTION finalize_internal.ack_reach(table_id bigint, s timestamptz, e timestamptz, since timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_ack_reach'
LANGUAGE C STABLE;

-- Whether the acknowledgements of a table recorded after a loss (since)
-- cover every instant of [s, e) (_ack_reach, in C).
CREATE OR REPLACE FUNCTION finalize_internal.acked(table_id bigint, s timestamptz, e timestamptz, since timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_acked'
LANGUAGE C STABLE;

-- The periods (granularity g in zone z) that the lost commit times
-- [lost_from, lost_to] touch, as [span_from, span_to): what an
-- acknowledgement on a table of those periods must cover. An infinite end
-- stays infinite.
CREATE OR REPLACE FUNCTION finalize_internal.loss_span(lost_from timestamptz, lost_to timestamptz, g interval, z text,
                                       OUT span_from timestamptz, OUT span_to timestamptz)
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT CASE WHEN isfinite(loss_span.lost_from)
                THEN @extschema@.period_start(loss_span.lost_from, loss_span.g, loss_span.z)
                ELSE loss_span.lost_from END,
           CASE WHEN isfinite(loss_span.lost_to)
                THEN @extschema@.period_end(loss_span.lost_to, loss_span.g, loss_span.z)
                ELSE loss_span.lost_to END;
END;

-- Every loss a table inherits or has (its own, its inputs', transitively),
-- with each table it must be acknowledged on before it stops holding the
-- table's periods: the table that lost the data, and every derived table
-- of the lineage downstream of it (on a path from the table to it) with a
-- required consumer, whose job may have built those periods from the
-- incomplete data and must rebuild them (a derived table without one, a
-- view say, has nothing to rebuild). A consumer declared after the loss
-- was acknowledged on the table that lost it built from repaired data, and
-- declaring one never retracts what was final: it does not count.
-- span_from, span_to: the loss's periods in the periods of that table
-- (acker_granularity in acker_zone, as _loss_span). In C over the catalog
-- (src/sensor/losses.c), the rule the sensors read.
CREATE OR REPLACE FUNCTION finalize_internal.loss_ackers(table_id bigint)
RETURNS TABLE (loss_id bigint, acker_id bigint, acker_granularity interval, acker_zone text,
               span_from timestamptz, span_to timestamptz)
AS 'MODULE_PATHNAME', 'finalize_loss_ackers'
LANGUAGE C STABLE ROWS 10;

-- The losses (of the table or of an input, transitively) that hold the
-- period [period_start, period_end), each with every table it has yet to be
-- acknowledged on for it (_loss_ackers): the loss intersects the period,
-- and that table's periods it shares with it are not all acknowledged. In
-- C (src/sensor/loss_rule.c), the rule of _loss_blocks.
CREATE OR REPLACE FUNCTION finalize_internal.open_loss_ackers(table_id bigint, period_start timestamptz, period_end timestamptz)
RETURNS TABLE (loss_id bigint, acker_id bigint)
AS 'MODULE_PATHNAME', 'finalize_open_loss_ackers'
LANGUAGE C STABLE ROWS 10;

-- The losses (of the table or of an input, transitively) that hold the
-- period [period_start, period_end) (see _open_loss_ackers).
CREATE OR REPLACE FUNCTION finalize_internal.open_losses(table_id bigint, period_start timestamptz, period_end timestamptz)
RETURNS SETOF @extschema@.loss
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT l.*
      FROM @extschema@.loss l
     WHERE l.loss_id IN (SELECT o.loss_id
                           FROM finalize_internal.open_loss_ackers(open_losses.table_id, open_losses.period_start,
                                                              open_losses.period_end) AS o)
     ORDER BY l.loss_id;
END;

-- Whether a loss holds the period [period_start, period_end) of a table
-- (the rule of _open_losses), in C over the catalog (src/sensor/losses.c):
-- the sensors read the same rule without SQL while watermark.loss_blocked
-- is set.
CREATE OR REPLACE FUNCTION finalize_internal.loss_blocks(table_id bigint, period_start timestamptz, period_end timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_loss_blocks'
LANGUAGE C STABLE;

-- Where finalized_until() stops while losses hold periods, since every
-- period ending at or before it must be complete: the start of the table's
-- earliest period (its own granularity) that a loss may still hold, for
-- want of an acknowledgement on any table it needs one on (_loss_ackers);
-- 'infinity' when none does, '-infinity' when such a loss has no start.
-- It may name an earlier period than the first one a loss holds (the
-- acknowledgements count only from a period start of the table they are
-- on), never a later one. In C over the catalog (src/sensor/losses.c),
-- which the sensors read without SQL while watermark.loss_blocked is set.
CREATE OR REPLACE FUNCTION finalize_internal.loss_cap(table_id bigint)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_loss_cap'
LANGUAGE C STABLE;

-- Whether the table or an input (transitively) has a loss that a table it
-- must be acknowledged on (_loss_ackers) has not acknowledged for all its
-- periods. In C (src/sensor/loss_rule.c), the rule of _loss_cap.
CREATE OR REPLACE FUNCTION finalize_internal.has_open_loss(table_id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_has_open_loss'
LANGUAGE C STABLE;

-- Whether an unacknowledged loss holds some periods of a table, for
-- finalize.status (whose readers may not read the losses themselves: hence
-- SECURITY DEFINER, granted to finalize_reader; it answers only this). The
-- view asks it only while a flag of the table's lineage is set: a flag may
-- stay set for a table built from it that still has to acknowledge.
CREATE OR REPLACE FUNCTION finalize_internal.loss_holds(table_id bigint)
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN finalize_internal.has_open_loss(table_id);

-- Whether a loss may hold periods of a table, as the sensors read it
-- (src/sensor/catalog.c does the same in C): the loss_blocked flag of the
-- table or of any table it is built from, transitively, is set. Every
-- transaction that gives a table a loss to wait for (a loss recorded, a
-- consumer made required, new periods, a longer lateness allowance) sets
-- the flag of the one table it holds (_lock_tracked), so that the tables
-- built from it are held at once without their rows: a pipeline may keep
-- those in an open transaction for as long as it likes.
CREATE OR REPLACE FUNCTION finalize_internal.lineage_blocked(table_id bigint)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH RECURSIVE up(id) AS (
        SELECT lineage_blocked.table_id
        UNION
        SELECT d.input_id FROM @extschema@.derived_input d JOIN up ON d.table_id = up.id)
    SELECT EXISTS (SELECT FROM up JOIN @extschema@.watermark w ON w.table_id = up.id WHERE w.loss_blocked);
END;

-- The tables built from a table (transitively, not itself) that have a
-- loss to wait for and no flag of their own yet: while there is one, the
-- table's own flag holds it (_lineage_blocked) and may not be cleared.
CREATE OR REPLACE FUNCTION finalize_internal.unflagged_below(table_id bigint)
RETURNS SETOF bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH RECURSIVE down(id) AS (
        SELECT d.table_id FROM @extschema@.derived_input d WHERE d.input_id = unflagged_below.table_id
        UNION
        SELECT d.table_id FROM @extschema@.derived_input d JOIN down ON d.input_id = down.id)
    SELECT down.id FROM down JOIN @extschema@.watermark w ON w.table_id = down.id
     WHERE NOT w.loss_blocked AND finalize_internal.has_open_loss(down.id)
     ORDER BY down.id;
END;

-- Whether any table built from a table (transitively, not itself) has a
-- loss to wait for, flagged or not. A flag is kept while one has: clearing
-- it because the tables below carry flags of their own would rely on rows
-- another transaction may be clearing at the same time (each would see the
-- other's flag still set, and both would go).
CREATE OR REPLACE FUNCTION finalize_internal.open_below(table_id bigint)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH RECURSIVE down(id) AS (
        SELECT d.table_id FROM @extschema@.derived_input d WHERE d.input_id = open_below.table_id
        UNION
        SELECT d.table_id FROM @extschema@.derived_input d JOIN down ON d.input_id = down.id)
    SELECT EXISTS (SELECT FROM down WHERE finalize_internal.has_open_loss(down.id));
END;

-- Recomputes watermark.loss_blocked of a table whose verdict the caller
-- holds (_lock_tracked): after a loss, an acknowledgement (on the table
-- that lost the data or on a derived table), a new derived table, a new
-- granularity, a longer lateness allowance or a change of required
-- consumers. Set when the table has a loss to wait for; cleared when
-- neither it nor any table built from it has one (_open_below: until then
-- this flag may be what holds them). Only this table's row is written, so that no
-- transaction holds another team's table: the tables built from it are
-- held through _lineage_blocked at once, and their own flags follow in the
-- worker's transaction when their rows are free (SKIP LOCKED) or in the
-- scheduler's next round (_refresh_derived).
CREATE OR REPLACE FUNCTION finalize_internal.refresh_loss_blocked(table_id bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    was boolean := (SELECT w.loss_blocked FROM @extschema@.watermark w WHERE w.table_id = refresh_loss_blocked.table_id);
    now_blocked boolean;
BEGIN
    now_blocked := finalize_internal.has_open_loss(table_id)
                   OR (was AND finalize_internal.open_below(table_id));
    IF now_blocked IS DISTINCT FROM was THEN
        UPDATE @extschema@.watermark w SET loss_blocked = now_blocked WHERE w.table_id = refresh_loss_blocked.table_id;
    END IF;
    -- A verdict a loss took back is recorded as announced; one that an
    -- acknowledgement moved on is announced by the _advance that follows.
    PERFORM finalize_internal.announce(ARRAY[table_id], true);
    IF now_blocked AND finalize_internal.in_background() THEN
        PERFORM finalize_internal.flag_below(table_id);
    END IF;
END
$$;

-- Gives the tables built from a table that have a loss to wait for their
-- own flag, each whose row no other transaction holds (SKIP LOCKED: one a
-- pipeline holds keeps being held through the table's flag and is flagged
-- later). Returns how many it flagged. Background workers only.
CREATE OR REPLACE FUNCTION finalize_internal.flag_below(table_id bigint)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    below bigint;
    n integer := 0;
BEGIN
    FOR below IN SELECT u.id FROM finalize_internal.unflagged_below(table_id) AS u(id) LOOP
        PERFORM FROM @extschema@.watermark w WHERE w.table_id = below FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        UPDATE @extschema@.watermark w SET loss_blocked = true WHERE w.table_id = below AND NOT w.loss_blocked;
        PERFORM finalize_internal.announce(ARRAY[below], true);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- Keeps watermark.loss_blocked current when a table's required consumers
-- change (add_consumer, alter_consumer, drop_consumer, however they do it):
-- whether a derived table must acknowledge its inputs' losses itself
-- depends on them (_loss_ackers).
CREATE OR REPLACE FUNCTION finalize_internal.consumer_loss_refresh()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        id := OLD.table_id;
    ELSIF TG_OP = 'UPDATE' AND OLD.required IS NOT DISTINCT FROM NEW.required THEN
        RETURN NULL;
    ELSE
        id := NEW.table_id;
    END IF;
    -- A consumer deleted with its table (untrack_table) changes nothing.
    IF EXISTS (SELECT FROM @extschema@.tracked_table t WHERE t.table_id = id AND t.untracked_at IS NULL) THEN
        PERFORM finalize_internal.refresh_loss_blocked(id);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER loss_blocked_refresh
    AFTER INSERT OR DELETE OR UPDATE OF required ON @extschema@.consumer
    FOR EACH ROW EXECUTE FUNCTION finalize_internal.consumer_loss_refresh();

-- Whether the period starting at period_start is final for the table, as
-- the sensors answer it: the watermark has passed it (_period_final, the
-- C rule of is_final) and no loss holds it.
CREATE OR REPLACE FUNCTION finalize_internal.final(tt @extschema@.tracked_table, wm @extschema@.watermark,
                                   period_start timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN finalize_internal.period_final(period_start, (tt).granularity, (tt).period_zone, (wm).finalized_until)
   AND NOT (((wm).loss_blocked OR finalize_internal.lineage_blocked((tt).table_id))
            AND finalize_internal.loss_blocks((tt).table_id, period_start,
                                         @extschema@.period_end(period_start, (tt).granularity, (tt).period_zone)));
-- Event-time partitions (docs/design/event_time.md). A table with an
-- event_time_column is partitioned by a business time in its rows: its
-- verdict (watermark.finalized_until) is the event-time verdict, drawn by
-- _advance from the commit-time verdict (watermark.commit_until) shifted
-- back by the table's lateness allowance. Each recorded range brings its
-- rows per event period and a lateness sketch, computed on SQL Server;
-- rows that land in a period already final are late data, counted exactly.

-- The period arithmetic and the sketches are C (event_time_sql.c): no SQL
-- copy depends on the session's TimeZone.
CREATE OR REPLACE FUNCTION finalize_internal.event_bound(commit_until timestamptz, allowance interval, granularity interval,
                                         zone text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_event_bound'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION finalize_internal.instant_minus(ts timestamptz, iv interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_instant_minus'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION finalize_internal.sketch_merge(a bytea, b bytea)
RETURNS bytea
AS 'MODULE_PATHNAME', 'finalize_sketch_merge'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- The sketch of every sketch aggregated (NULL for none).
CREATE OR REPLACE AGGREGATE finalize_internal.sketch_union(bytea) (
    SFUNC = finalize_internal.sketch_merge,
    STYPE = bytea
);

CREATE OR REPLACE FUNCTION finalize_internal.sketch_quantile_ms(sketch bytea, quantile double precision)
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_sketch_quantile_ms'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION finalize_internal.sketch_quantile_bound_ms(sketch bytea, quantile double precision)
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_sketch_quantile_bound_ms'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION finalize_internal.sketch_rows(sketch bytea)
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_sketch_rows'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OR REPLACE FUNCTION finalize_internal.sketch_info(sketch bytea, OUT rows bigint, OUT event_after_commit bigint,
                                         OUT zero_lateness bigint, OUT min_ms bigint, OUT max_ms bigint)
AS 'MODULE_PATHNAME', 'finalize_sketch_info'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- finalize.late_data_alert_interval as an interval without days.
CREATE OR REPLACE FUNCTION finalize_internal.late_data_alert_interval()
RETURNS interval
AS 'MODULE_PATHNAME', 'finalize_late_data_alert_interval'
LANGUAGE C STABLE;

-- The event-time options of track_table and alter_tracked_table, checked
-- together; the errors name the option and say what it takes.
CREATE OR REPLACE FUNCTION finalize_internal.check_event_time(
    event_time_column text,
    event_time_zone   text,
    lateness_policy   text,
    allowed_lateness  interval,
    lateness_quantile double precision,
    lateness_window   interval,
    granularity       interval)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF event_time_column IS NOT NULL
       AND (length(event_time_column) NOT BETWEEN 1 AND 128 OR event_time_column ~ '[[:cntrl:]]') THEN
        RAISE EXCEPTION 'invalid value for argument event_time_column: "%"',
                        regexp_replace(left(event_time_column, 140), '[[:cntrl:]]', '?', 'g')
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'It names a captured column of the SQL Server table: 1 to 128 characters, without control characters, as SQL Server spells it (no brackets).';
    END IF;
    IF event_time_zone IS NOT NULL
       AND NOT EXISTS (SELECT FROM pg_timezone_names z WHERE z.name = event_time_zone) THEN
        RAISE EXCEPTION 'invalid value for argument event_time_zone: "%"',
                        regexp_replace(left(event_time_zone, 140), '[[:cntrl:]]', '?', 'g')
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'It is not a time zone name PostgreSQL knows (pg_timezone_names).',
                  HINT = 'Use an IANA name such as ''Europe/Berlin'' or ''UTC''; leave it NULL to use the server''s timezone option.';
    END IF;
    PERFORM finalize_internal.check_choice(lateness_policy, 'lateness_policy', ARRAY['exact', 'quantile'],
        'With exact, an event period is final once the commit-time verdict passed its end plus allowed_lateness; with quantile, plus the lateness_quantile of the lateness observed over lateness_window (never less than allowed_lateness).');
    IF date_part('month', allowed_lateness) <> 0 OR date_part('year', allowed_lateness) <> 0 THEN
        RAISE EXCEPTION 'invalid value for argument allowed_lateness: "%" is not a fixed length of time', allowed_lateness
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Months and years have no fixed length; days count as 24 hours.',
                  HINT = 'Give it in days, hours, minutes or seconds, for example ''2 hours''.';
    END IF;
    IF date_part('month', lateness_window) <> 0 OR date_part('year', lateness_window) <> 0 THEN
        RAISE EXCEPTION 'invalid value for argument lateness_window: "%" is not a fixed length of time', lateness_window
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Months and years have no fixed length; days count as 24 hours.',
                  HINT = 'Give it in days or hours, for example ''7 days''.';
    END IF;
    IF allowed_lateness IS NOT NULL THEN
        IF allowed_lateness < interval '0' THEN
            RAISE EXCEPTION 'invalid value for argument allowed_lateness: "%" is negative', allowed_lateness
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF lateness_window IS NOT NULL THEN
        IF lateness_window <= interval '0' THEN
            RAISE EXCEPTION 'invalid value for argument lateness_window: "%" is not positive', lateness_window
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF lateness_quantile IS NOT NULL AND NOT (lateness_quantile > 0 AND lateness_quantile < 1) THEN
        RAISE EXCEPTION 'invalid value for argument lateness_quantile: %', lateness_quantile
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A quantile lies strictly between 0 and 1, for example 0.999.';
    END IF;
    IF lateness_policy = 'quantile' AND lateness_quantile IS NULL THEN
        RAISE EXCEPTION 'lateness_policy quantile needs a lateness_quantile'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass lateness_quantile => 0.999, for example.';
    END IF;
    IF lateness_policy = 'exact' AND lateness_quantile IS NOT NULL THEN
        RAISE EXCEPTION 'lateness_quantile is only used with lateness_policy quantile'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass lateness_policy => ''quantile'' too, or leave lateness_quantile out.';
    END IF;
    -- Calendar months, or whole seconds that divide a day or are whole days.
    IF event_time_column IS NOT NULL AND granularity IS NOT NULL
       AND extract(year FROM granularity) * 12 + extract(month FROM granularity) = 0
       AND NOT (extract(epoch FROM granularity) >= 1
                AND extract(epoch FROM granularity) = trunc(extract(epoch FROM granularity))
                AND (86400 % extract(epoch FROM granularity)::numeric = 0
                     OR extract(epoch FROM granularity)::numeric % 86400 = 0)) THEN
        RAISE EXCEPTION 'granularity % cannot partition by event time', granularity
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'SQL Server groups event times in slots of whole seconds, which must tile the periods: the granularity of an event-time table is a whole number of seconds that divides one day, whole days or weeks, or calendar months.',
                  HINT = 'Use for example ''1 hour'', ''15 minutes'', ''1 day'' or ''1 month''.';
    END IF;
END
$$;

-- The lateness allowance of an event-time table whose commit-time verdict
-- is commit_until: allowed_lateness, or under policy quantile the greater
-- of it and the lateness_quantile of the lateness recorded in the
-- lateness_window before commit_until (by commit time; the upper bound of
-- its bucket, so it errs long). A quantile q needs at least 1 / (1 - q)
-- rows to mean anything: with fewer in the window (a new table, one idle
-- for longer than the window) there is no allowance, NULL, and the
-- event-time verdict waits.
CREATE OR REPLACE FUNCTION finalize_internal.lateness_allowance(tt @extschema@.tracked_table, commit_until timestamptz)
RETURNS interval
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q_ms bigint;
    n bigint;
BEGIN
    IF tt.lateness_policy <> 'quantile' OR commit_until IS NULL OR NOT isfinite(commit_until) THEN
        RETURN tt.allowed_lateness;
    END IF;
    SELECT finalize_internal.sketch_quantile_bound_ms(finalize_internal.sketch_union(h.sketch), tt.lateness_quantile),
           sum(h.rows)
      INTO q_ms, n
      FROM @extschema@.lateness_hour h
     WHERE h.table_id = tt.table_id
       AND h.hour >= coalesce(finalize_internal.instant_minus(commit_until, tt.lateness_window), '-infinity');
    IF q_ms IS NULL OR coalesce(n, 0) < finalize_internal.quantile_min_rows(tt.lateness_quantile) THEN
        RETURN NULL;
    END IF;
    RETURN GREATEST(tt.allowed_lateness, make_interval(secs => q_ms / 1000.0));
END
$$;

-- How many rows of observed lateness a quantile needs: 1 / (1 - q), so that
-- the rows beyond it are at least one.
CREATE OR REPLACE FUNCTION finalize_internal.quantile_min_rows(quantile double precision)
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN ceil(round((1 / (1 - quantile))::numeric, 9))::bigint;

-- The event-time verdict of a table whose commit-time verdict is
-- commit_until (capped by the losses that hold it): the greatest event
-- period boundary that, plus the allowance, the commit-time verdict has
-- passed; NULL while there is none.
CREATE OR REPLACE FUNCTION finalize_internal.event_until(tt @extschema@.tracked_table, commit_until timestamptz,
                                         OUT until timestamptz, OUT allowance interval)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    allowance := finalize_internal.lateness_allowance(tt, commit_until);
    IF commit_until IS NULL OR NOT isfinite(commit_until) OR allowance IS NULL THEN
        until := NULL;
    ELSE
        until := finalize_internal.event_bound(commit_until, allowance, tt.granularity, tt.period_zone);
    END IF;
END
$$;

-- Checks that the event-time facts of a range count the range's rows: its
-- rows per event period (periods) add up to its inserts, updates and
-- deletes, and its lateness sketch, when it has one, counts exactly the
-- rows that have an event time (a NULL one has no lateness), so that a
-- range recorded by hand cannot tell the event-time verdict and the
-- late-data counts another story than its facts. The worker computes both
-- from the same change rows, and refuses a range whose counts changed
-- between its reads. A range without a sketch (SQL has no way to build
-- one) adds no observed lateness.
CREATE OR REPLACE FUNCTION finalize_internal.check_event_facts(tt @extschema@.tracked_table, start_lsn @extschema@.lsn,
                                               end_lsn @extschema@.lsn, inserts bigint, updates bigint,
                                               deletes bigint, periods jsonb, sketch bytea)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    p_ins bigint;
    p_upd bigint;
    p_del bigint;
    with_time bigint;
    sketched bigint := coalesce(finalize_internal.sketch_rows(sketch), 0);
    range_text text := format('(%s, %s]', coalesce(start_lsn::text, 'its start'), end_lsn);
BEGIN
    IF periods IS NOT NULL AND jsonb_typeof(periods) <> 'array' THEN
        RAISE EXCEPTION 'invalid value for argument event_periods of table "%": a JSON array is expected',
                        tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Each element is {"period": "<UTC instant>", "inserts": n, "updates": n, "deletes": n}.';
    END IF;
    SELECT coalesce(sum(x.inserts), 0), coalesce(sum(x.updates), 0), coalesce(sum(x.deletes), 0),
           coalesce(sum(coalesce(x.inserts, 0) + coalesce(x.updates, 0) + coalesce(x.deletes, 0))
                        FILTER (WHERE x.period IS NOT NULL), 0)
      INTO p_ins, p_upd, p_del, with_time
      FROM jsonb_to_recordset(coalesce(periods, '[]')) AS x(period timestamptz, inserts bigint, updates bigint,
                                                             deletes bigint);
    IF EXISTS (SELECT FROM jsonb_to_recordset(coalesce(periods, '[]'))
                      AS x(inserts bigint, updates bigint, deletes bigint)
                WHERE x.inserts < 0 OR x.updates < 0 OR x.deletes < 0) THEN
        RAISE EXCEPTION 'invalid value for argument event_periods of range % of table "%": a count is negative',
                        range_text, tt.table_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (p_ins, p_upd, p_del) IS DISTINCT FROM (inserts, updates, deletes) THEN
        RAISE EXCEPTION 'the event-time facts of range % of table "%" do not count its rows', range_text, tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('The range has %s insert(s), %s update(s) and %s delete(s); its event_periods count %s, %s and %s.',
                                  inserts, updates, deletes, p_ins, p_upd, p_del),
                  HINT = 'Give event_periods that count every row of the range by its event period (a row without an event time under "period": null), as the worker does.';
    END IF;
    IF sketch IS NOT NULL AND sketched <> with_time THEN
        RAISE EXCEPTION 'the lateness sketch of range % of table "%" does not count its rows', range_text, tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('Its event_periods give %s row(s) an event time; the sketch counts %s.', with_time, sketched),
                  HINT = 'The sketch holds the lateness of every row that has an event time; leave it NULL to record none.';
    END IF;
END
$$;

-- Stores the event-time facts of a range just recorded as fact fact_id:
-- its rows per event period (periods: a JSON array of {"period": ISO 8601
-- instant or null, "inserts", "updates", "deletes"}), late where the
-- period was already final under the verdict before this range
-- (verdict_before); its lateness sketch merged into the hour of its commit
-- time. Late rows are counted per period in late_period, recorded as a
-- late_data event and sent on finalize_alert at most once per table and
-- period per finalize.late_data_alert_interval. Returns the late rows.
CREATE OR REPLACE FUNCTION finalize_internal.store_event_facts(
    tt              @extschema@.tracked_table,
    fact_id         bigint,
    periods         jsonb,
    sketch          bytea,
    end_commit_time timestamptz,
    end_lsn         @extschema@.lsn,
    verdict_before  timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    late bigint;
    late_list jsonb;
    to_alert jsonb;
BEGIN
    INSERT INTO @extschema@.event_fact (fact_id, table_id, event_period, inserts, updates, deletes, late_rows)
    SELECT fact_id, tt.table_id, p.period, sum(p.inserts), sum(p.updates), sum(p.deletes),
           CASE WHEN p.period IS NOT NULL AND verdict_before IS NOT NULL
                     AND finalize_internal.period_final(p.period, tt.granularity, tt.period_zone, verdict_before)
                THEN sum(p.inserts + p.updates + p.deletes) ELSE 0 END
      FROM (SELECT CASE WHEN x.period IS NULL THEN NULL
                        ELSE @extschema@.period_start(x.period, tt.granularity, tt.period_zone) END AS period,
                   coalesce(x.inserts, 0) AS inserts, coalesce(x.updates, 0) AS updates,
                   coalesce(x.deletes, 0) AS deletes
              FROM jsonb_to_recordset(coalesce(periods, '[]')) AS x(period timestamptz, inserts bigint,
                                                                    updates bigint, deletes bigint)) AS p
     GROUP BY p.period;

    IF sketch IS NOT NULL THEN
        INSERT INTO @extschema@.lateness_hour AS h (table_id, hour, sketch, rows)
        VALUES (tt.table_id, @extschema@.period_start(end_commit_time, interval '1 hour'), sketch,
                finalize_internal.sketch_rows(sketch))
        ON CONFLICT (table_id, hour) DO UPDATE
           SET sketch = finalize_internal.sketch_merge(h.sketch, EXCLUDED.sketch),
               rows = h.rows + EXCLUDED.rows;
    END IF;

    SELECT coalesce(sum(e.late_rows), 0),
           jsonb_agg(jsonb_build_object('period', finalize_internal.utc_iso(e.event_period), 'rows', e.late_rows)
                     ORDER BY e.event_period) FILTER (WHERE e.late_rows > 0)
      INTO late, late_list
      FROM @extschema@.event_fact e WHERE e.fact_id = store_event_facts.fact_id;
    IF late = 0 THEN
        RETURN 0;
    END IF;
    UPDATE @extschema@.fact f SET late_rows = late WHERE f.fact_id = store_event_facts.fact_id;

    -- Counted per period, kept as the span of the period (periods may
    -- change later: a span of other periods starting at the same instant
    -- grows to hold both); the first late rows of a period say which
    -- verdict they violated.
    INSERT INTO @extschema@.late_period AS l (table_id, event_period, rows, first_seen, last_seen, verdict_at_arrival,
                                              period_end)
    SELECT tt.table_id, e.event_period, e.late_rows, now(), now(), verdict_before,
           @extschema@.period_end(e.event_period, tt.granularity, tt.period_zone)
      FROM @extschema@.event_fact e
     WHERE e.fact_id = store_event_facts.fact_id AND e.late_rows > 0
    ON CONFLICT (table_id, event_period) DO UPDATE
       SET rows = l.rows + EXCLUDED.rows, last_seen = EXCLUDED.last_seen,
           period_end = GREATEST(l.period_end, EXCLUDED.period_end);

    INSERT INTO @extschema@.fact (table_id, kind, end_lsn, end_commit_time, event, detail)
    VALUES (tt.table_id, 'event', end_lsn, end_commit_time, 'late_data',
            jsonb_build_object('rows', late, 'periods', late_list,
                               'verdict', finalize_internal.utc_iso(verdict_before),
                               'range_fact_id', fact_id));

    -- One alert per table and period per finalize.late_data_alert_interval.
    WITH due AS (
        UPDATE @extschema@.late_period l SET alerted_at = now()
         WHERE l.table_id = tt.table_id
           AND l.event_period IN (SELECT e.event_period FROM @extschema@.event_fact e
                                   WHERE e.fact_id = store_event_facts.fact_id AND e.late_rows > 0)
           AND (l.alerted_at IS NULL
                OR l.alerted_at <= now() - finalize_internal.late_data_alert_interval())
        RETURNING l.event_period, l.rows)
    SELECT jsonb_agg(jsonb_build_object('period', finalize_internal.utc_iso(d.event_period), 'rows', e.late_rows,
                                        'rows_so_far', d.rows)
                     ORDER BY d.event_period)
      INTO to_alert
      FROM due d
      JOIN @extschema@.event_fact e ON e.fact_id = store_event_facts.fact_id AND e.event_period = d.event_period;
    -- One incident per late period, counted each time rows land in it.
    PERFORM finalize_internal.raise_alert('late_data', 'warning', tt.table_id, tt.server_name,
                                     finalize_internal.utc_iso(e.event_period),
                                     format('%s late row(s) of table "%s" landed in event period %s, already declared final; a correction of that partition is due.',
                                            l.rows, tt.table_name, finalize_internal.utc_iso(e.event_period)),
                                     jsonb_build_object('rows', l.rows, 'verdict', finalize_internal.utc_iso(verdict_before)))
       FROM @extschema@.event_fact e
       JOIN @extschema@.late_period l ON l.table_id = tt.table_id AND l.event_period = e.event_period
      WHERE e.fact_id = store_event_facts.fact_id AND e.late_rows > 0;
    IF to_alert IS NOT NULL THEN
        PERFORM finalize_internal.alert(jsonb_build_object(
            'alert', 'late_data', 'table', tt.table_name,
            'rows', late, 'periods', to_alert,
            'verdict', finalize_internal.utc_iso(verdict_before),
            'message', format('%s row(s) of table "%s" landed in event period(s) already declared final; a correction of those partitions is due.',
                              late, tt.table_name)));
    END IF;
    RETURN late;
END
$$;

-- Event periods that received rows after they were declared final (each
-- as the span of the periods it landed in, see late_period).
CREATE OR REPLACE VIEW @extschema@.late_data AS
SELECT t.table_name, l.event_period, l.period_end,
       l.rows, l.first_seen, l.last_seen, l.verdict_at_arrival, l.alerted_at
  FROM @extschema@.late_period l
  JOIN @extschema@.tracked_table t ON t.table_id = l.table_id
 WHERE t.untracked_at IS NULL;
COMMENT ON VIEW @extschema@.late_data IS
    'Periods that received rows after they were declared final (late data: an event-time table''s, or commits SQL Server''s clock, stepped back, stamped there), with how many and when';

-- Rows per event period of an event-time table, from the recorded facts,
-- with how many of them arrived late. Columns as changes_by_period, plus
-- late_rows: covered when the facts reach back before the period (by the
-- clock skew a row's event may run ahead of its commit) and no loss
-- intersects the period or its lateness allowance; exact when covered and
-- final (a period that is not final may still receive rows). A sharded
-- table has no facts of its own (its shards have them): its periods are
-- never covered nor exact, and their counts are NULL, as a derived table's.
CREATE OR REPLACE FUNCTION @extschema@.changes_by_event_period(table_name text, from_time timestamptz, to_time timestamptz)
RETURNS TABLE (period_start timestamptz, period_end timestamptz, is_final boolean, covered boolean,
               inserts bigint, updates bigint, deletes bigint, late_rows bigint,
               straddling_ranges bigint, exact boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    tt @extschema@.tracked_table;
    wm @extschema@.watermark;
    covered_after timestamptz;
BEGIN
    PERFORM finalize_internal.require(changes_by_event_period.table_name, 'table_name');
    PERFORM finalize_internal.require(from_time, 'from_time');
    PERFORM finalize_internal.require(to_time, 'to_time');
    tt := finalize_internal.tracked(changes_by_event_period.table_name);
    IF tt.event_time_column IS NULL THEN
        RAISE EXCEPTION 'table "%" is not partitioned by event time', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Use finalize.changes_by_period() for it, or set an event column with finalize.alter_tracked_table(..., event_time_column => ...).';
    END IF;
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    -- A sharded table's facts are its shards': ask a shard for its counts.
    IF tt.kind = 'sharded' THEN
        RETURN QUERY
        SELECT g.period_start, g.period_end, finalize_internal.final(tt, wm, g.period_start), false,
               NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, false
          FROM finalize_internal.periods(from_time, to_time, tt.granularity, tt.period_zone) AS g;
        RETURN;
    END IF;
    SELECT min(f.end_commit_time) INTO covered_after
      FROM @extschema@.fact f WHERE f.table_id = tt.table_id AND f.kind = 'range';
    RETURN QUERY
    WITH periods AS (
        SELECT g.period_start AS ps, g.period_end AS pe,
               coalesce(finalize_internal.instant_minus(g.period_start, finalize_internal.max_clock_skew()), '-infinity')
                   > coalesce(covered_after, 'infinity')
               AND NOT EXISTS (
                   -- losses of an event-time table span event times (_record_loss)
                   SELECT FROM @extschema@.loss l
                    WHERE l.table_id = tt.table_id AND l.lost_to >= g.period_start
                      AND l.lost_from < g.period_end) AS covered
          FROM finalize_internal.periods(from_time, to_time, tt.granularity, tt.period_zone) AS g)
    SELECT p.ps, p.pe,
           finalize_internal.final(tt, wm, p.ps),
           p.covered,
           coalesce(sum(e.inserts), 0)::bigint,
           coalesce(sum(e.updates), 0)::bigint,
           coalesce(sum(e.deletes), 0)::bigint,
           coalesce(sum(e.late_rows), 0)::bigint,
           0::bigint,
           p.covered AND finalize_internal.final(tt, wm, p.ps)
      FROM periods AS p
      LEFT JOIN @extschema@.event_fact e ON e.table_id = tt.table_id AND e.event_period = p.ps
     GROUP BY p.ps, p.pe, p.covered
     ORDER BY p.ps;
END
$$;
COMMENT ON FUNCTION @extschema@.changes_by_event_period(text, timestamptz, timestamptz) IS
    'Event-time tables: rows inserted, updated and deleted per event period, and how many arrived late';

-- The lateness an event-time table's rows showed (commit time minus event
-- time), from the sketches recorded over the window before its
-- commit-time verdict (the table's lateness_window unless given): the
-- quantile q (the table's lateness_quantile, else 0.999) within the
-- sketch's 1% accuracy, how many rows it describes, and the allowance the
-- verdict last used (drawn from the quantile's upper bound). Of a sharded
-- table: the lateness of all its shards' rows, and the longest allowance a
-- shard's verdict uses.
CREATE OR REPLACE FUNCTION @extschema@.lateness(table_name text, quantile double precision DEFAULT NULL,
                                     window_length interval DEFAULT NULL,
                                     OUT lateness interval, OUT rows bigint, OUT allowance interval)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    tt @extschema@.tracked_table;
    wm @extschema@.watermark;
    s bytea;
BEGIN
    PERFORM finalize_internal.require(lateness.table_name, 'table_name');
    tt := finalize_internal.tracked(lateness.table_name);
    IF tt.event_time_column IS NULL THEN
        RAISE EXCEPTION 'table "%" is not partitioned by event time', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Set an event column with finalize.track_table(..., event_time_column => ...).';
    END IF;
    IF window_length IS NOT NULL THEN
        PERFORM finalize_internal.instant_minus('2000-01-01 00:00+00', window_length);
    END IF;
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    IF tt.kind = 'sharded' THEN
        -- A sharded table's rows are its shards': their sketches merged,
        -- each over the window before its own commit-time verdict; the
        -- allowance is the longest a shard's verdict uses.
        SELECT finalize_internal.sketch_union(h.sketch) INTO s
          FROM finalize_internal.shards(tt.table_id) AS p
          JOIN @extschema@.watermark pw ON pw.table_id = p.table_id
          JOIN @extschema@.lateness_hour h ON h.table_id = p.table_id
         WHERE h.hour >= coalesce(finalize_internal.instant_minus(coalesce(pw.commit_until, now()),
                                                             coalesce(window_length, tt.lateness_window)), '-infinity');
        SELECT max(pw.event_allowance) INTO allowance
          FROM finalize_internal.shards(tt.table_id) AS p JOIN @extschema@.watermark pw ON pw.table_id = p.table_id;
    ELSE
        SELECT finalize_internal.sketch_union(h.sketch) INTO s
          FROM @extschema@.lateness_hour h
         WHERE h.table_id = tt.table_id
           AND h.hour >= coalesce(finalize_internal.instant_minus(coalesce(wm.commit_until, now()),
                                                             coalesce(window_length, tt.lateness_window)), '-infinity');
        allowance := wm.event_allowance;
    END IF;
    rows := coalesce(finalize_internal.sketch_rows(s), 0);
    lateness := make_interval(secs => finalize_internal.sketch_quantile_ms(s, coalesce(quantile, tt.lateness_quantile, 0.999)) / 1000.0);
END
$$;
COMMENT ON FUNCTION @extschema@.lateness(text, double precision, interval) IS
    'Event-time tables: a quantile of the observed lateness (commit time minus event time) over a window, and the allowance the verdict uses';

-- When the commit-time verdict lets an event period ending at period_end
-- be final: its end plus the allowance (kept without days, so the sum is
-- the same in every session TimeZone).
CREATE OR REPLACE FUNCTION finalize_internal.event_reach(period_end timestamptz, allowance interval)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN period_end + make_interval(secs => extract(epoch FROM allowance));

-- What explain_verdict says of an event-time table: the column and zone,
-- the policy and the allowance it gave, and where the commit-time verdict
-- stands against the end of the period plus that allowance (of a sharded
-- table: that each shard's verdict is its own event-time verdict).
CREATE OR REPLACE FUNCTION finalize_internal.explain_event_time(tt @extschema@.tracked_table, wm @extschema@.watermark,
                                                period_end timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN (tt).kind = 'sharded'
THEN format('Its shards are partitioned by event time (column "%s"%s, %s): each shard''s verdict is drawn from its own commit-time verdict and lateness allowance, and this table''s is the least of them.',
            (tt).event_time_column,
            CASE WHEN (tt).event_time_zone IS NOT NULL THEN format(', zone %s', (tt).event_time_zone) ELSE '' END,
            CASE WHEN (tt).lateness_policy = 'exact'
                 THEN format('policy exact, allowed_lateness %s', (tt).allowed_lateness)
                 ELSE format('policy quantile: the %s quantile of each shard''s lateness observed over %s, at least %s',
                             (tt).lateness_quantile, (tt).lateness_window, (tt).allowed_lateness) END)
ELSE format('This table is partitioned by event time (column "%s"%s): a period is final once the commit-time verdict has passed its end plus the lateness allowance, %s (%s); the commit-time verdict stands at %s%s.',
              (tt).event_time_column,
              CASE WHEN (tt).event_time_zone IS NOT NULL THEN format(', zone %s', (tt).event_time_zone) ELSE '' END,
              coalesce((wm).event_allowance::text,
                       CASE WHEN (tt).lateness_policy = 'exact' THEN (tt).allowed_lateness::text
                            ELSE format('not known yet (the quantile needs %s rows of observed lateness in the window)',
                                        finalize_internal.quantile_min_rows((tt).lateness_quantile)) END),
              CASE WHEN (tt).lateness_policy = 'exact'
                   THEN format('policy exact, allowed_lateness %s', (tt).allowed_lateness)
                   ELSE format('policy quantile: the %s quantile of the lateness observed over %s, at least %s',
                               (tt).lateness_quantile, (tt).lateness_window, (tt).allowed_lateness) END,
              coalesce((wm).commit_until::text, 'nothing yet'),
              CASE WHEN (wm).commit_until IS NOT NULL AND isfinite(explain_event_time.period_end)
                        AND (wm).event_allowance IS NOT NULL
                   THEN format(', and must reach %s for this period',
                               finalize_internal.event_reach(explain_event_time.period_end, (wm).event_allowance))
                   ELSE '' END) END;
-- The one write path of the verdict. The worker records every range it reads
-- through record_range, in the same transaction as the facts, so a crash can
-- only leave the verdict behind, never ahead.
--
-- NOTIFY channel "finalize": on every advance, a JSON object
--   {"table": ..., "old": ..., "new": ..., "lsn": ..., "commit_time": ...}
-- with times in UTC ISO 8601, "old" and "new" as finalized_until() answers
-- them ("old" null while nothing was final), and "kind": "derived" for a
-- derived table (see _announce).

-- The commit-time guard of the write path: a commit time further ahead of
-- this server's clock than finalize.max_clock_skew is refused, since GREATEST
-- would keep a verdict it moved for ever.
CREATE OR REPLACE FUNCTION finalize_internal.check_commit_time(table_name text, argname text, commit_time timestamptz)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    skew interval := finalize_internal.max_clock_skew();
    now_ts timestamptz := clock_timestamp();
BEGIN
    IF commit_time > now_ts + skew THEN
        RAISE EXCEPTION 'invalid value for argument %: commit time % of table "%" lies in the future',
                        argname, commit_time, table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('It is more than finalize.max_clock_skew (%s) ahead of this server''s clock (%s); a verdict moved by it would run ahead of time and could never move back.',
                                  skew, now_ts),
                  HINT = 'Check the clocks of SQL Server and PostgreSQL, and the source''s timezone option.';
    END IF;
END
$$;

-- The arguments of a range for table_id, checked; returns the table with
-- its verdict locked for the write (_lock_tracked), which serializes the
-- writers of the table and proves it still tracked. NULL arguments are
-- refused first, then, with the lock held, what needs the table (its name
-- in the errors, its state): row counts, commit times, the event and the
-- order of the LSNs.
CREATE OR REPLACE FUNCTION finalize_internal.check_range_args(
    table_id          bigint,
    s                 @extschema@.lsn,
    e                 @extschema@.lsn,
    end_commit_time   timestamptz,
    inserts           bigint,
    updates           bigint,
    deletes           bigint,
    first_commit_time timestamptz,
    last_commit_time  timestamptz,
    event             text)
RETURNS @extschema@.tracked_table
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
BEGIN
    PERFORM finalize_internal.require(check_range_args.table_id, 'table_id');
    PERFORM finalize_internal.require(e, 'end_lsn');
    PERFORM finalize_internal.require(end_commit_time, 'end_commit_time');
    PERFORM finalize_internal.require(inserts, 'inserts');
    PERFORM finalize_internal.require(updates, 'updates');
    PERFORM finalize_internal.require(deletes, 'deletes');
    tt := finalize_internal.lock_tracked(check_range_args.table_id);
    IF tt.kind = 'derived' THEN
        RAISE EXCEPTION 'table "%" is a derived table, so no range can be recorded', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A derived table has no SQL Server source: its verdict follows its inputs and the jobs that report with finalize.report_processed().';
    ELSIF tt.kind = 'sharded' THEN
        RAISE EXCEPTION 'table "%" is a sharded table, so no range can be recorded', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A sharded table has no SQL Server source of its own: its verdict follows its shards, each read from its own database.',
                  HINT = format('Record the range on its shard, such as finalize.record_range(%L, ...).', tt.table_name || '/<shard>');
    END IF;
    IF inserts < 0 OR updates < 0 OR deletes < 0 THEN
        RAISE EXCEPTION 'invalid row counts for table "%": inserts %, updates %, deletes %',
                        tt.table_name, inserts, updates, deletes
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Row counts cannot be negative.';
    END IF;
    IF (inserts + updates + deletes = 0) <> (first_commit_time IS NULL)
       OR (first_commit_time IS NULL) <> (last_commit_time IS NULL)
       OR first_commit_time > last_commit_time THEN
        RAISE EXCEPTION 'invalid commit-time span for table "%": % to %',
                        tt.table_name, first_commit_time, last_commit_time
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A range with rows needs first_commit_time <= last_commit_time; an empty range has neither.';
    END IF;
    PERFORM finalize_internal.check_commit_time(tt.table_name, 'end_commit_time', end_commit_time);
    PERFORM finalize_internal.check_commit_time(tt.table_name, 'last_commit_time', last_commit_time);
    IF event IS NOT NULL AND event NOT IN ('schema_change', 'instance_switch') THEN
        RAISE EXCEPTION 'invalid value for argument event: "%"', event
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A range can carry the events schema_change or instance_switch; other events do not advance the verdict.';
    END IF;
    IF s IS NOT NULL AND e <= s THEN
        RAISE EXCEPTION 'range (%, %] of table "%" is empty or reversed', s, e, tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The end LSN of a range must be greater than its (exclusive) start LSN.';
    END IF;
    IF tt.state <> 'active' THEN
        RAISE EXCEPTION 'table "%" is in state %, so no range can be recorded', tt.table_name, tt.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = coalesce(tt.state_detail, 'The verdict of this table is stopped.'),
                  HINT = 'See finalize.status and the troubleshooting section of the README.';
    END IF;
    RETURN tt;
END
$$;

-- Whether a range (s, e] chains onto the recorded facts of a table, whose
-- ranges reach offset_lsn: false when it is the next one to record, true
-- when it was recorded before with the same facts (recording it again
-- changes nothing); anything else (a contradiction, an overlap, a gap, a
-- first range with a start or with rows) is an error that names the range
-- to record instead.
CREATE OR REPLACE FUNCTION finalize_internal.check_range_chain(
    tt                @extschema@.tracked_table,
    offset_lsn        @extschema@.lsn,
    s                 @extschema@.lsn,
    e                 @extschema@.lsn,
    inserts           bigint,
    updates           bigint,
    deletes           bigint,
    first_commit_time timestamptz,
    last_commit_time  timestamptz,
    event             text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    empty boolean := inserts + updates + deletes = 0;
BEGIN
    -- A range that ends at or before the offset was recorded before: an
    -- identical repeat changes nothing, anything else contradicts the facts.
    IF offset_lsn IS NOT NULL AND e <= offset_lsn THEN
        IF EXISTS (SELECT FROM @extschema@.fact f
                    WHERE f.table_id = tt.table_id AND f.kind = 'range' AND f.end_lsn = e
                      AND f.start_lsn IS NOT DISTINCT FROM s
                      AND (f.inserts, f.updates, f.deletes) = (inserts, updates, deletes)
                      AND f.first_commit_time IS NOT DISTINCT FROM first_commit_time
                      AND f.last_commit_time IS NOT DISTINCT FROM last_commit_time)
           OR (empty AND event IS NULL AND s IS NOT NULL AND EXISTS (
                   -- an empty range may since have been coalesced into a longer one
                   SELECT FROM @extschema@.fact f
                    WHERE f.table_id = tt.table_id AND f.kind = 'range' AND f.event IS NULL
                      AND f.start_lsn <= s AND f.end_lsn >= e
                      AND f.inserts + f.updates + f.deletes = 0))
        THEN
            RETURN true;
        END IF;
        RAISE EXCEPTION 'range (%, %] of table "%" contradicts facts already recorded',
                        coalesce(s::text, 'NULL'), e, tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('The recorded ranges of this table reach LSN %s, and none of them is this range with these counts.', offset_lsn),
                  HINT = 'Ranges are recorded once, in LSN order; repeating a recorded range unchanged is allowed.';
    END IF;
    IF offset_lsn IS NOT NULL THEN
        IF s IS NULL THEN
            RAISE EXCEPTION 'table "%" already has an offset', tt.table_name
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('Its facts reach LSN %s; only the first range may omit start_lsn.', offset_lsn),
                      HINT = format('Record the range (%s, %s] instead.', offset_lsn, e);
        ELSIF s < offset_lsn THEN
            RAISE EXCEPTION 'range (%, %] of table "%" overlaps the range recorded up to LSN %',
                            s, e, tt.table_name, offset_lsn
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'Ranges of a table must chain: each starts (exclusively) where the previous one ended.',
                      HINT = format('Record the range (%s, %s] instead.', offset_lsn, e);
        ELSIF s > offset_lsn THEN
            RAISE EXCEPTION 'range (%, %] of table "%" leaves a gap after LSN %', s, e, tt.table_name, offset_lsn
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'Ranges of a table must chain: each starts (exclusively) where the previous one ended.',
                      HINT = format('Record the range (%s, %s] first.', offset_lsn, s);
        END IF;
    ELSIF s IS NOT NULL THEN
        -- A start would claim facts before it; a new table has none.
        RAISE EXCEPTION 'range (%, %] of table "%" cannot be its first', s, e, tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The table has no facts yet: its first range marks where tracking starts and has no start_lsn.',
                  HINT = format('Record the range (NULL, %s] first.', s);
    ELSIF NOT empty THEN
        RAISE EXCEPTION 'the first range of table "%" has no start LSN but has rows', tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A range without start_lsn only marks where tracking starts; it cannot carry row counts.';
    END IF;
    RETURN false;
END
$$;

-- Stores the facts of checked ranges that chain onto the facts of their
-- tables (one range per table) and returns their ids. Consecutive empty
-- ranges coalesce into one fact, so an idle table keeps a bounded number of
-- rows; any other range is a fact of its own (the first one, without start,
-- marks where tracking started). One statement for a worker's whole cycle
-- (_record_ranges) or one range (_store_range_fact).
CREATE OR REPLACE FUNCTION finalize_internal.store_range_facts(
    table_ids          bigint[],
    starts             @extschema@.lsn[],
    ends               @extschema@.lsn[],
    end_commit_times   timestamptz[],
    inserts            bigint[],
    updates            bigint[],
    deletes            bigint[],
    first_commit_times timestamptz[],
    last_commit_times  timestamptz[],
    capture_instances  text[],
    events             text[],
    details            jsonb[])
RETURNS TABLE (table_id bigint, fact_id bigint)
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH r AS (
        SELECT * FROM unnest(store_range_facts.table_ids, store_range_facts.starts, store_range_facts.ends,
                             store_range_facts.end_commit_times, store_range_facts.inserts,
                             store_range_facts.updates, store_range_facts.deletes,
                             store_range_facts.first_commit_times, store_range_facts.last_commit_times,
                             store_range_facts.capture_instances, store_range_facts.events,
                             store_range_facts.details)
                   AS r(table_id, s, e, end_time, ins, upd, del, first_time, last_time, ci, event, detail)),
    prev AS (
        SELECT r.table_id, f.fact_id, r.e, r.end_time
          FROM r
          JOIN @extschema@.fact f
            ON f.table_id = r.table_id AND f.kind = 'range' AND f.end_lsn = r.s
           AND f.event IS NULL AND f.inserts + f.updates + f.deletes = 0
           AND f.capture_instance IS NOT DISTINCT FROM r.ci
         WHERE r.ins + r.upd + r.del = 0 AND r.event IS NULL AND r.s IS NOT NULL),
    coalesced AS (
        UPDATE @extschema@.fact f
           SET end_lsn = p.e, end_commit_time = p.end_time, ranges = f.ranges + 1, recorded_at = now()
          FROM prev p
         WHERE f.fact_id = p.fact_id
        RETURNING f.table_id, f.fact_id),
    stored AS (
        INSERT INTO @extschema@.fact
            (table_id, kind, start_lsn, end_lsn, end_commit_time, inserts, updates, deletes,
             first_commit_time, last_commit_time, capture_instance, event, detail)
        SELECT r.table_id, 'range', r.s, r.e, r.end_time, r.ins, r.upd, r.del, r.first_time, r.last_time, r.ci,
               CASE WHEN r.s IS NULL THEN 'tracking_started' ELSE r.event END, r.detail
          FROM r
         WHERE NOT EXISTS (SELECT FROM prev p WHERE p.table_id = r.table_id)
        RETURNING fact.table_id, fact.fact_id)
    SELECT c.table_id, c.fact_id FROM coalesced c
    UNION ALL
    SELECT s.table_id, s.fact_id FROM stored s;
END;

-- The same for one range: its fact's id.
CREATE OR REPLACE FUNCTION finalize_internal.store_range_fact(
    table_id          bigint,
    s                 @extschema@.lsn,
    e                 @extschema@.lsn,
    end_commit_time   timestamptz,
    inserts           bigint,
    updates           bigint,
    deletes           bigint,
    first_commit_time timestamptz,
    last_commit_time  timestamptz,
    capture_instance  text,
    event             text,
    detail            jsonb)
RETURNS bigint
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT f.fact_id
      FROM finalize_internal.store_range_facts(ARRAY[store_range_fact.table_id], ARRAY[s], ARRAY[e],
                                          ARRAY[end_commit_time], ARRAY[inserts], ARRAY[updates],
                                          ARRAY[deletes], ARRAY[first_commit_time], ARRAY[last_commit_time],
                                          ARRAY[capture_instance], ARRAY[event], ARRAY[detail]) f;
END;

-- Moves the offsets of tables whose ranges were just stored to the ends of
-- those ranges, and their source verdicts to the periods those ends' commit
-- times less clock_tolerance start (never back): the step of the write path
-- between the fact and the verdict, for one table or a cycle's many. The
-- worker holds back by its source's clock_tolerance: after SQL Server's
-- clock is stepped back by up to that much, no commit can be stamped before
-- a commit time already read less the tolerance, so no period the verdict
-- calls final can still receive one.
CREATE OR REPLACE FUNCTION finalize_internal.store_offsets(table_ids bigint[], ends @extschema@.lsn[], end_commit_times timestamptz[],
                                           clock_tolerance interval)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    UPDATE @extschema@.watermark w
       SET source_until = GREATEST(w.source_until,
                                   @extschema@.period_start(r.end_time - store_offsets.clock_tolerance,
                                                            t.granularity, t.period_zone)),
           offset_lsn = r.e,
           offset_commit_time = r.end_time,
           recorded_at = now(),
           -- the first range: where finalize began observing the table
           tracked_since = coalesce(w.tracked_since, CASE WHEN w.offset_lsn IS NULL THEN r.end_time END)
      FROM unnest(store_offsets.table_ids, store_offsets.ends, store_offsets.end_commit_times)
               AS r(table_id, e, end_time)
      JOIN @extschema@.tracked_table t ON t.table_id = r.table_id
     WHERE w.table_id = r.table_id;
END;

-- The write path itself, by table id (the worker's way; record_range is the
-- same by name): the arguments are checked (and the table's verdict locked),
-- the range must chain onto the recorded ones, its fact is stored (with its
-- event-time facts on an event-time table, late rows judged against the
-- verdict before it), the source verdict moves and _advance moves the
-- verdict (and the derived tables that use it) as far as the consumers
-- allow, all in the caller's transaction. The source verdict holds back by
-- clock_tolerance (the worker's source's; zero for record_range, whose
-- caller states the instant itself).
CREATE OR REPLACE FUNCTION finalize_internal.record_range(
    table_id          bigint,
    start_lsn         text,
    end_lsn           text,
    end_commit_time   timestamptz,
    inserts           bigint,
    updates           bigint,
    deletes           bigint,
    first_commit_time timestamptz,
    last_commit_time  timestamptz,
    capture_instance  text,
    event             text,
    detail            jsonb,
    event_periods     jsonb,
    lateness_sketch   bytea,
    first_event_time  timestamptz,
    last_event_time   timestamptz,
    clock_tolerance   interval DEFAULT interval '0')
RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    s     @extschema@.lsn := finalize_internal.lsn_arg(start_lsn, 'start_lsn');
    e     @extschema@.lsn := finalize_internal.lsn_arg(end_lsn, 'end_lsn');
    tt    @extschema@.tracked_table;
    wm    @extschema@.watermark;
    fid   bigint;
BEGIN
    tt := finalize_internal.check_range_args(record_range.table_id, s, e, end_commit_time, inserts, updates, deletes,
                                        first_commit_time, last_commit_time, event);
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    IF finalize_internal.check_range_chain(tt, wm.offset_lsn, s, e, inserts, updates, deletes,
                                      first_commit_time, last_commit_time, event) THEN
        RETURN wm.finalized_until;
    END IF;
    IF tt.event_time_column IS NULL
       AND (event_periods IS NOT NULL OR lateness_sketch IS NOT NULL OR first_event_time IS NOT NULL) THEN
        RAISE EXCEPTION 'table "%" is not partitioned by event time, so its ranges carry no event-time facts',
                        tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Leave event_periods, lateness_sketch and the event times NULL, or set an event column first.';
    END IF;
    IF first_event_time > last_event_time OR (first_event_time IS NULL) <> (last_event_time IS NULL) THEN
        RAISE EXCEPTION 'invalid event-time span for table "%": % to %', tt.table_name, first_event_time, last_event_time
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A range with event times needs first_event_time <= last_event_time; one without has neither.';
    END IF;
    IF tt.event_time_column IS NOT NULL THEN
        PERFORM finalize_internal.check_event_facts(tt, s, e, inserts, updates, deletes, event_periods, lateness_sketch);
    END IF;
    fid := finalize_internal.store_range_fact(tt.table_id, s, e, end_commit_time, inserts, updates, deletes,
                                         first_commit_time, last_commit_time, capture_instance, event, detail);
    -- A schema change the verdict went on across (ddl_policy warn) is an
    -- incident for the record: informational, born resolved.
    IF event = 'schema_change' THEN
        PERFORM finalize_internal.raise_alert('schema_change', 'info', tt.table_id, tt.server_name, '',
                                         format('Table "%s": %s', tt.table_name,
                                                coalesce(detail ->> 'summary', 'a schema change was recorded')),
                                         detail);
        PERFORM finalize_internal.resolve_alerts('schema_change', tt.table_id, tt.server_name);
    END IF;
    IF tt.event_time_column IS NOT NULL AND inserts + updates + deletes > 0 THEN
        UPDATE @extschema@.fact f
           SET sketch = lateness_sketch, first_event_time = record_range.first_event_time,
               last_event_time = record_range.last_event_time
         WHERE f.fact_id = fid;
        -- Late data is judged against the event-time verdict before this range moves it.
        PERFORM finalize_internal.store_event_facts(tt, fid, event_periods, lateness_sketch, end_commit_time, e,
                                               wm.finalized_until);
    END IF;

    PERFORM finalize_internal.store_offsets(ARRAY[tt.table_id], ARRAY[e], ARRAY[end_commit_time],
                                       coalesce(clock_tolerance, interval '0'));
    RETURN finalize_internal.advance(tt.table_id);
END
$$;

-- The write path for a worker's cycle over many tables: one statement per
-- step instead of one round of _record_range per table. It takes only the
-- ranges that plainly continue their table's facts: an active source table
-- partitioned by commit time, with no condition or open incident to clear,
-- that neither this transaction nor another holds, one range per table
-- starting exactly at the table's offset, with counts, spans and commit
-- times that _check_range_args would accept. Every other range (a first
-- one, a repeat, one with an event or event-time facts, anything doubtful)
-- is returned untouched, and the worker records it through _record_range,
-- whose checks and errors decide. What is taken is stored as _record_range
-- stores it (_store_range_facts, _store_offsets with the source's
-- clock_tolerance, _advance_sources), in the caller's transaction. Returns
-- the table ids left to the caller.
CREATE OR REPLACE FUNCTION finalize_internal.record_ranges(
    table_ids          bigint[],
    start_lsns         text[],
    end_lsns           text[],
    end_commit_times   timestamptz[],
    inserts            bigint[],
    updates            bigint[],
    deletes            bigint[],
    first_commit_times timestamptz[],
    last_commit_times  timestamptz[],
    capture_instances  text[],
    clock_tolerance    interval DEFAULT interval '0')
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    horizon timestamptz := clock_timestamp() + finalize_internal.max_clock_skew();
    locked  bigint[];
    ok      record;
    moved   bigint[];
BEGIN
    -- The tables' rows, then their verdicts, in the order _lock_tracked
    -- takes them; a row another session holds is left to _record_range,
    -- which in the worker does not wait for it either and says so (the
    -- table's condition lock_timeout).
    -- (Joins with the arrays, never "= ANY (array)": with thousands of ids
    -- a generic plan would compare every row with every id.)
    SELECT pg_catalog.array_agg(x.table_id) INTO locked
      FROM (SELECT t.table_id FROM @extschema@.tracked_table t
              JOIN (SELECT DISTINCT i.id FROM unnest(table_ids) AS i(id)) i ON i.id = t.table_id
             WHERE t.untracked_at IS NULL
             ORDER BY t.table_id FOR KEY SHARE OF t SKIP LOCKED) x;
    SELECT pg_catalog.array_agg(x.table_id) INTO locked
      FROM (SELECT w.table_id FROM @extschema@.watermark w
              JOIN unnest(locked) AS i(id) ON i.id = w.table_id
             ORDER BY w.table_id FOR UPDATE OF w SKIP LOCKED) x;

    SELECT pg_catalog.array_agg(r.table_id ORDER BY r.table_id) AS ids,
           pg_catalog.array_agg(r.s ORDER BY r.table_id) AS s,
           pg_catalog.array_agg(r.e ORDER BY r.table_id) AS e,
           pg_catalog.array_agg(r.end_time ORDER BY r.table_id) AS end_time,
           pg_catalog.array_agg(r.ins ORDER BY r.table_id) AS ins,
           pg_catalog.array_agg(r.upd ORDER BY r.table_id) AS upd,
           pg_catalog.array_agg(r.del ORDER BY r.table_id) AS del,
           pg_catalog.array_agg(r.first_time ORDER BY r.table_id) AS first_time,
           pg_catalog.array_agg(r.last_time ORDER BY r.table_id) AS last_time,
           pg_catalog.array_agg(r.ci ORDER BY r.table_id) AS ci
      INTO ok
      FROM (SELECT u.table_id, u.s::@extschema@.lsn AS s, u.e::@extschema@.lsn AS e, u.end_time,
                   u.ins, u.upd, u.del, u.first_time, u.last_time, u.ci,
                   pg_catalog.count(*) OVER (PARTITION BY u.table_id) AS n
              FROM unnest(table_ids, start_lsns, end_lsns, end_commit_times, inserts, updates, deletes,
                          first_commit_times, last_commit_times, capture_instances)
                       AS u(table_id, s, e, end_time, ins, upd, del, first_time, last_time, ci)) r
      JOIN unnest(locked) AS l(table_id) ON l.table_id = r.table_id
      JOIN @extschema@.tracked_table t ON t.table_id = r.table_id
      JOIN @extschema@.watermark w ON w.table_id = r.table_id
      LEFT JOIN (SELECT DISTINCT h.h FROM finalize_internal.held_conditions(table_ids) AS h(h)) held
             ON held.h = r.table_id
     WHERE r.n = 1 AND held.h IS NULL
       AND t.kind = 'source' AND t.state = 'active' AND t.event_time_column IS NULL
       AND w.offset_lsn IS NOT NULL AND r.s = w.offset_lsn AND r.e > r.s
       AND r.end_time <= horizon
       AND r.ins >= 0 AND r.upd >= 0 AND r.del >= 0
       AND (r.ins + r.upd + r.del = 0) = (r.first_time IS NULL)
       AND (r.first_time IS NULL) = (r.last_time IS NULL)
       AND (r.first_time IS NULL OR (r.first_time <= r.last_time AND r.last_time <= horizon))
       AND t.capture_instance IS NOT DISTINCT FROM r.ci;

    IF ok.ids IS NOT NULL THEN
        PERFORM finalize_internal.store_range_facts(ok.ids, ok.s, ok.e, ok.end_time, ok.ins, ok.upd, ok.del,
                                               ok.first_time, ok.last_time, ok.ci,
                                               pg_catalog.array_fill(NULL::text, ARRAY[pg_catalog.cardinality(ok.ids)]),
                                               pg_catalog.array_fill(NULL::jsonb, ARRAY[pg_catalog.cardinality(ok.ids)]));
        PERFORM finalize_internal.store_offsets(ok.ids, ok.e, ok.end_time, coalesce(clock_tolerance, interval '0'));
        moved := ARRAY(SELECT finalize_internal.advance_sources(ok.ids));
    END IF;
    -- on every call, for no table when nothing moved: its plan is made at
    -- the first cycle, not at the first advance (a worker's memory stays flat)
    PERFORM finalize_internal.advance_dependents(coalesce(moved, '{}'));
    RETURN QUERY SELECT u.x FROM unnest(table_ids) AS u(x)
                  LEFT JOIN unnest(ok.ids) AS k(x) ON k.x = u.x
                 WHERE k.x IS NULL;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.record_range(
    table_name        text,
    start_lsn         text,
    end_lsn           text,
    end_commit_time   timestamptz,
    inserts           bigint DEFAULT 0,
    updates           bigint DEFAULT 0,
    deletes           bigint DEFAULT 0,
    first_commit_time timestamptz DEFAULT NULL,
    last_commit_time  timestamptz DEFAULT NULL,
    capture_instance  text DEFAULT NULL,
    event             text DEFAULT NULL,
    detail            jsonb DEFAULT NULL,
    event_periods     jsonb DEFAULT NULL,
    lateness_sketch   bytea DEFAULT NULL,
    first_event_time  timestamptz DEFAULT NULL,
    last_event_time   timestamptz DEFAULT NULL)
RETURNS timestamptz
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN finalize_internal.record_range(finalize_internal.tracked_id(table_name), start_lsn, end_lsn, end_commit_time,
                                 inserts, updates, deletes, first_commit_time, last_commit_time,
                                 capture_instance, event, detail, event_periods, lateness_sketch,
                                 first_event_time, last_event_time, interval '0');
COMMENT ON FUNCTION @extschema@.record_range(text, text, text, timestamptz, bigint, bigint, bigint,
                                             timestamptz, timestamptz, text, text, jsonb,
                                             jsonb, bytea, timestamptz, timestamptz) IS
    'Record the facts of one CDC range (start exclusive, end inclusive) and advance the verdict';

-- Removes facts older than the retention (finalize.facts_retention unless
-- given), and untracked tables with no facts left. The fact a table's offset
-- points at is kept, so the chain of ranges can always be checked; so are
-- the late rows per period (late_period), which the release gate's
-- late_data check reads, and a clock step's mark while ranges of its
-- periods remain.
CREATE OR REPLACE FUNCTION @extschema@.purge_facts(older_than interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    keep interval := coalesce(older_than, finalize_internal.facts_retention());
    removed bigint;
BEGIN
    IF keep < interval '0' THEN
        RAISE EXCEPTION 'invalid value for argument older_than: "%" is negative', keep
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A clock step's mark (clock_stepped_back) stays while a range of its
    -- table that ends before its periods' end does: after the step, such a
    -- range may be older in commit time than ranges of those periods
    -- removed here, and the oldest range left is where changes_by_period
    -- starts to call periods covered, so without the mark one of them
    -- would be exact with commits missing. The release gate reads the marks
    -- (ran ahead, not read past yet) too.
    DELETE FROM @extschema@.fact f
     WHERE f.recorded_at < now() - keep
       AND NOT EXISTS (SELECT FROM @extschema@.watermark w
                        WHERE w.table_id = f.table_id AND w.offset_lsn = f.end_lsn AND f.kind = 'range')
       AND (f.event IS DISTINCT FROM 'clock_stepped_back'
            OR NOT EXISTS (SELECT FROM @extschema@.fact r
                            WHERE r.table_id = f.table_id AND r.kind = 'range'
                              AND r.end_commit_time < (f.detail ->> 'to')::timestamptz));
    GET DIAGNOSTICS removed = ROW_COUNT;
    -- Lateness sketches are kept as long as the lateness window that reads them.
    DELETE FROM @extschema@.lateness_hour h
     USING @extschema@.tracked_table t, @extschema@.watermark w
     WHERE t.table_id = h.table_id AND w.table_id = h.table_id
       AND h.hour < LEAST(now() - keep,
                          coalesce(finalize_internal.instant_minus(w.commit_until, t.lateness_window), '-infinity'));
    -- (Late rows per period, of event-time tables and of commit-time ones
    -- whose SQL Server clock stepped back, are kept as long as their table:
    -- they are the release gate's evidence that a generation built before
    -- them lacks them, whenever it is released; one row per period.)
    -- never an incident whose resolution a webhook target has still to hear
    DELETE FROM @extschema@.alert a
     WHERE a.state = 'resolved' AND greatest(a.last_seen, a.resolved_at) < now() - keep
       AND NOT EXISTS (SELECT FROM @extschema@.alert_delivery d WHERE d.alert_id = a.alert_id AND d.state = 'pending');
    -- (a sharded table, which has no facts of its own, stays while a shard
    -- of it does: deleting it would delete them with it)
    DELETE FROM @extschema@.tracked_table t
     WHERE t.untracked_at < now() - keep
       AND NOT EXISTS (SELECT FROM @extschema@.fact f WHERE f.table_id = t.table_id
                        AND f.recorded_at >= now() - keep)
       AND NOT EXISTS (SELECT FROM @extschema@.tracked_table s WHERE s.shard_of = t.table_id);
    RETURN removed;
END
$$;
COMMENT ON FUNCTION @extschema@.purge_facts(interval) IS
    'Delete facts older than the retention (finalize.facts_retention by default); returns how many';

CREATE OR REPLACE FUNCTION finalize_internal.facts_retention()
RETURNS interval
AS 'MODULE_PATHNAME', 'finalize_facts_retention'
LANGUAGE C STABLE;

-- The clock_tolerance of a source (a finalize_mssql server) as an interval
-- of hours, NULL for no such server: how far behind a commit time read
-- the worker's verdicts stay (_store_offsets), for explanations.
CREATE OR REPLACE FUNCTION finalize_internal.clock_tolerance(server_name text)
RETURNS interval
AS 'MODULE_PATHNAME', 'finalize_clock_tolerance'
LANGUAGE C STABLE STRICT;

-- finalize.max_clock_skew as an interval of hours (no days, so adding it to
-- a timestamptz is exact in every session zone).
CREATE OR REPLACE FUNCTION finalize_internal.max_clock_skew()
RETURNS interval
AS 'MODULE_PATHNAME', 'finalize_max_clock_skew'
LANGUAGE C STABLE;
-- Pipelines and derived tables (docs/design/pipelines.md): the consumers
-- that write a table and report how far they got, tables derived from
-- tracked tables, and acknowledgements of lost data. The functions a role
-- calls are C entry points (finalize_as_owner, owner.c) that run the body
-- _<name>(caller, ...) as the extension's owner with the caller taken first.

-- Checks the name of a new consumer: the pipeline's name, 1 to 255
-- characters, not only spaces.
CREATE OR REPLACE FUNCTION finalize_internal.check_consumer_name(consumer text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(consumer, 'consumer');
    IF consumer !~ '\S' OR length(consumer) > 255 THEN
        RAISE EXCEPTION 'invalid value for argument consumer: "%"', consumer
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A consumer is named after the pipeline that writes the table (for example spark-orders): 1 to 255 characters, not only spaces.';
    END IF;
END
$$;

-- The reporter role a consumer is declared with, checked: it must exist
-- (a bare OID such as '-' or '4000000000' names no role).
CREATE OR REPLACE FUNCTION finalize_internal.check_reporter(reporter regrole)
RETURNS name
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    role_name name;
BEGIN
    SELECT r.rolname INTO role_name FROM pg_catalog.pg_roles r WHERE r.oid = reporter::oid;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'invalid value for argument reporter: role with OID % does not exist', reporter::oid
            USING ERRCODE = 'undefined_object',
                  DETAIL = 'The reporter is the role whose members may report for the consumer.',
                  HINT = 'Name an existing role, for example reporter => ''spark_orders''.';
    END IF;
    RETURN role_name;
END
$$;

-- Warns when a reporter role cannot call the report functions yet.
CREATE OR REPLACE FUNCTION finalize_internal.reporter_notice(reporter regrole, tt @extschema@.tracked_table, consumer text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF reporter IS NULL THEN
        RAISE NOTICE 'only members of finalize_admin may report for consumer "%" of table "%"', consumer, (tt).table_name
            USING DETAIL = 'The consumer has no reporter role, so no pipeline role may report for it.',
                  HINT = format('Let the pipeline''s role report with SELECT finalize.alter_consumer(%L, %L, reporter => ''<role>'');',
                                (tt).table_name, consumer);
    ELSIF NOT pg_catalog.pg_has_role(reporter::oid, 'finalize_pipeline'::name, 'MEMBER') THEN
        RAISE NOTICE 'role % cannot report for consumer "%" of table "%" yet', reporter, consumer, (tt).table_name
            USING DETAIL = 'Reporting takes EXECUTE on finalize.report_progress() or finalize.report_processed(), which role finalize_pipeline has.',
                  HINT = format('GRANT finalize_pipeline TO %s;', reporter);
    END IF;
END
$$;

-- Inserts a new consumer of a table (add_consumer's, for a pipeline that
-- reports and for an Iceberg table), under the table's lock; the error
-- names a consumer that already exists.
CREATE OR REPLACE FUNCTION finalize_internal.insert_consumer(caller name, tt @extschema@.tracked_table, consumer text,
                                             required boolean, reporter regrole, reporter_name name)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    BEGIN
        INSERT INTO @extschema@.consumer (table_id, consumer, required, reporter, reporter_name, created_by)
        VALUES (tt.table_id, consumer, required, reporter, reporter_name, caller);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'consumer "%" of table "%" already exists', consumer, tt.table_name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Change it with finalize.alter_consumer() (dropping and adding it again would let the verdict move past what it applied).';
    END;
END
$$;

-- The body of finalize.add_consumer: declares a pipeline that writes the
-- table. A required one holds the verdict from now on (what was final
-- stays final). Only members of reporter (and of finalize_admin) may
-- report for it; without one, only admins may: a pipeline must never be
-- able to release another pipeline's table. On a sharded table it is
-- declared on each shard, now and when one is added (_add_sharded_consumer).
CREATE OR REPLACE FUNCTION finalize_internal.add_consumer(
    caller name,
    table_name text,
    consumer text,
    required boolean DEFAULT true,
    reporter regrole DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    reporter_name name;
BEGIN
    PERFORM finalize_internal.check_consumer_name(consumer);
    PERFORM finalize_internal.require(required, 'required');
    IF reporter IS NOT NULL THEN
        reporter_name := finalize_internal.check_reporter(reporter);
    END IF;
    -- On a sharded table: on every shard, and on every shard added later.
    IF tt.kind = 'sharded' THEN
        PERFORM finalize_internal.add_sharded_consumer(caller, tt, consumer, required, reporter, reporter_name);
    ELSE
        PERFORM finalize_internal.insert_consumer(caller, tt, consumer, required, reporter, reporter_name);
    END IF;
    PERFORM finalize_internal.reporter_notice(reporter, tt, consumer);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.add_consumer(
    table_name text,
    consumer text,
    required boolean DEFAULT true,
    reporter regrole DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.add_consumer(text, text, boolean, regrole) IS
    'Declare a pipeline that writes a table; a required one holds the verdict until it reports that it applied a period; only members of reporter (and admins) may report for it';

-- Forgets what a consumer of a table reported (alter_consumer's reset):
-- its report and what the worker resolved it to, and a report beyond max
-- LSN that was pending (condition report_ahead, and its incident). The
-- caller holds the table's lock. What is final stays final.
CREATE OR REPLACE FUNCTION finalize_internal.forget_report(tt @extschema@.tracked_table, consumer text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    UPDATE @extschema@.consumer c
       SET reported_lsn = NULL, reported_at = NULL, processed_until = NULL, resolved_for_lsn = NULL,
           mapped_lsn = NULL, commit_time = NULL, resolved_at = NULL, resolve_error = NULL,
           condition = CASE WHEN c.condition = 'report_ahead' THEN NULL ELSE c.condition END,
           condition_since = CASE WHEN c.condition = 'report_ahead' THEN NULL ELSE c.condition_since END
     WHERE c.table_id = tt.table_id AND c.consumer = consumer;
    PERFORM finalize_internal.resolve_alerts('report_ahead', tt.table_id, tt.server_name, consumer);
END
$$;

-- The body of finalize.alter_consumer: changes a consumer in place, so the
-- verdict never moves past what it applied meanwhile (dropping and adding
-- it again would let it). NULL keeps a setting. reset forgets what it
-- reported (a wrong LSN, a report from another database): the verdict
-- stays where it is (verdicts never move back) and waits for its next
-- report. Making it optional lets the verdict move at once. On a sharded
-- table it changes the consumer of every shard; on a shard, a consumer
-- declared on its sharded table may only be reset.
CREATE OR REPLACE FUNCTION finalize_internal.alter_consumer(
    caller name,
    table_name text,
    consumer text,
    required boolean DEFAULT NULL,
    reporter regrole DEFAULT NULL,
    reset boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    reporter_name name;
BEGIN
    PERFORM finalize_internal.require(consumer, 'consumer');
    PERFORM finalize_internal.require(reset, 'reset');
    IF reporter IS NOT NULL THEN
        reporter_name := finalize_internal.check_reporter(reporter);
    END IF;
    IF tt.kind = 'sharded' THEN
        PERFORM finalize_internal.alter_sharded_consumer(tt, consumer, required, reporter, reporter_name, reset);
        RETURN;
    ELSIF required IS NOT NULL OR reporter IS NOT NULL THEN
        -- a shard's consumer declared on its sharded table changes there
        PERFORM finalize_internal.refuse_shard_consumer(tt, consumer, 'alter_consumer');
    END IF;
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    UPDATE @extschema@.consumer c
       SET required = coalesce(alter_consumer.required, c.required),
           reporter = coalesce(alter_consumer.reporter, c.reporter),
           reporter_name = coalesce(reporter_name, c.reporter_name)
     WHERE c.table_id = tt.table_id AND c.consumer = consumer;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" of table "%" does not exist', consumer, tt.table_name
            USING ERRCODE = 'undefined_object',
                  HINT = format('Declare it with finalize.add_consumer(%L, %L).', tt.table_name, consumer);
    END IF;
    IF reset THEN
        PERFORM finalize_internal.forget_report(tt, consumer);
        -- An Iceberg consumer reads its table again as if for the first time.
        UPDATE @extschema@.lake_consumer l
           SET seen_snapshot_id = NULL, seen_head_id = NULL, seen_head_sequence = NULL, seen_lsn = NULL,
               seen_table_uuid = NULL, seen_at = NULL
         WHERE l.table_id = tt.table_id AND l.consumer = consumer;
        RAISE NOTICE 'consumer "%" of table "%" starts again from nothing', consumer, tt.table_name
            USING DETAIL = 'What is final stays final; the verdict waits for the consumer''s next report.';
    END IF;
    IF reporter IS NOT NULL THEN
        PERFORM finalize_internal.reporter_notice(reporter, tt, consumer);
    END IF;
    IF required IS NOT NULL AND NOT required THEN
        PERFORM finalize_internal.advance(tt.table_id);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.alter_consumer(
    table_name text,
    consumer text,
    required boolean DEFAULT NULL,
    reporter regrole DEFAULT NULL,
    reset boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.alter_consumer(text, text, boolean, regrole, boolean) IS
    'Change a pipeline of a table in place (required, reporter; reset forgets what it reported); NULL keeps a setting';

-- The body of finalize.drop_consumer: forgets a consumer; the verdict may
-- then move at once, and a NOTICE says how far. Returns whether it existed.
-- On a sharded table it forgets the consumer of every shard; a shard's
-- consumer declared on its sharded table is dropped there.
CREATE OR REPLACE FUNCTION finalize_internal.drop_consumer(caller name, table_name text, consumer text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    before timestamptz;
    after timestamptz;
BEGIN
    PERFORM finalize_internal.require(consumer, 'consumer');
    IF tt.kind = 'sharded' THEN
        RETURN finalize_internal.drop_sharded_consumer(tt, consumer);
    END IF;
    PERFORM finalize_internal.refuse_shard_consumer(tt, consumer, 'drop_consumer');
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    SELECT w.finalized_until INTO before FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    DELETE FROM @extschema@.consumer c WHERE c.table_id = tt.table_id AND c.consumer = consumer;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- A consumer that is gone stalls nothing any more, nor is it held (the
    -- worker forgets its hold, _check_consumers).
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.kind IN ('consumer_stalled', 'consumer_locked', 'catalog_unreachable', 'catalog_auth_failed',
                      'table_not_found', 'property_malformed', 'metadata_malformed', 'report_ahead')
       AND a.table_id = tt.table_id AND a.subject = consumer AND a.state <> 'resolved';
    after := finalize_internal.advance(tt.table_id);
    IF after IS DISTINCT FROM before THEN
        RAISE NOTICE 'table "%" is now final until % (it was until %): consumer "%" no longer holds it',
                     tt.table_name, after, coalesce(before::text, 'nothing'), consumer
            USING DETAIL = 'The periods in between are final whether or not the consumer applied them.';
    END IF;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.drop_consumer(table_name text, consumer text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.drop_consumer(text, text) IS
    'Forget a pipeline of a table (the verdict no longer waits for it); returns whether it existed';

-- The consumer of a table a caller reports for (locked when lock is
-- true): it must exist, and the caller must be a member of finalize_admin
-- or of its reporter role, which must still be the role it was declared
-- with (a dropped role's OID may one day name another role). The errors
-- name both.
CREATE OR REPLACE FUNCTION finalize_internal.reporting_consumer(caller name, tt @extschema@.tracked_table, consumer text,
                                                lock boolean)
RETURNS @extschema@.consumer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    c @extschema@.consumer;
    current_name name;
BEGIN
    PERFORM finalize_internal.require(consumer, 'consumer');
    IF lock THEN
        SELECT x.* INTO c FROM @extschema@.consumer x
         WHERE x.table_id = tt.table_id AND x.consumer = consumer FOR UPDATE;
    ELSE
        SELECT x.* INTO c FROM @extschema@.consumer x
         WHERE x.table_id = tt.table_id AND x.consumer = consumer;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" of table "%" does not exist', pg_catalog.left(consumer, 255), tt.table_name
            USING ERRCODE = 'undefined_object',
                  HINT = format('An admin declares it with finalize.add_consumer(%L, %L).', tt.table_name,
                                pg_catalog.left(consumer, 255));
    END IF;
    IF pg_catalog.pg_has_role(caller, 'finalize_admin'::name, 'MEMBER') THEN
        RETURN c;
    END IF;
    IF c.reporter IS NULL THEN
        RAISE EXCEPTION 'permission denied to report for consumer "%" of table "%"', consumer, tt.table_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('The consumer has no reporter role, so only members of finalize_admin may report for it; role %s is not one.', caller),
                  HINT = format('An admin lets the pipeline''s role report with SELECT finalize.alter_consumer(%L, %L, reporter => %L);',
                                tt.table_name, consumer, caller);
    END IF;
    SELECT r.rolname INTO current_name FROM pg_catalog.pg_roles r WHERE r.oid = c.reporter::oid;
    IF current_name IS DISTINCT FROM c.reporter_name THEN
        RAISE EXCEPTION 'permission denied to report for consumer "%" of table "%"', consumer, tt.table_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Its reporter role %s was dropped or renamed (its OID now names %s), so only members of finalize_admin may report for it.',
                                  c.reporter_name, coalesce('role ' || current_name, 'no role')),
                  HINT = format('An admin names the reporter again with SELECT finalize.alter_consumer(%L, %L, reporter => ''<role>'');',
                                tt.table_name, consumer);
    END IF;
    IF NOT pg_catalog.pg_has_role(caller, c.reporter::oid, 'MEMBER') THEN
        RAISE EXCEPTION 'permission denied to report for consumer "%" of table "%"', consumer, tt.table_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Only members of role %s, the consumer''s reporter, and of finalize_admin may report for it; role %s is neither.',
                                  c.reporter_name, caller),
                  HINT = format('If %s runs this pipeline, an admin can run GRANT %s TO %s;', caller, c.reporter_name, caller);
    END IF;
    RETURN c;
END
$$;

-- A reported LSN in the stored form (the C parser accepts finalize's form
-- and Debezium's); the error names the argument, the consumer and the table.
CREATE OR REPLACE FUNCTION finalize_internal.reported_lsn(lsn text, tt @extschema@.tracked_table, consumer text)
RETURNS @extschema@.lsn
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    message text;
    detail text;
BEGIN
    PERFORM finalize_internal.require(lsn, 'lsn');
    RETURN finalize_internal.lsn_normalize(lsn);
EXCEPTION WHEN invalid_parameter_value THEN
    GET STACKED DIAGNOSTICS message = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL;
    RAISE EXCEPTION 'invalid value for argument lsn of consumer "%" of table "%": %', consumer, tt.table_name, message
        USING ERRCODE = 'invalid_parameter_value', DETAIL = detail;
END
$$;

-- Refuses a reported LSN that SQL Server cannot have reached yet, so that a
-- placeholder (ffffffff:ffffffff:ffff) or a value that is no LSN of the
-- source never sticks as the consumer's report (later, honest reports
-- would all be lower, hence ignored). An LSN is [VLF sequence number : log
-- block : slot] (Microsoft, SQL Server Transaction Log Architecture); the
-- first moves by one per virtual log file the log enters. The rule: the
-- reported VLF sequence number may lie at most a million VLFs per second
-- beyond that of the max LSN the source's worker last read, counted from
-- that read, plus a minute. No SQL Server fills VLFs that fast (a million
-- of even 16 kB, the smallest a 64 kB log growth makes, is 16 GB of log a
-- second), so a refused LSN cannot have been captured when it was
-- reported. Before the worker has read a max LSN, nothing is refused; an
-- LSN beyond max LSN that the rule admits is accepted and stays pending
-- (report_ahead, _consumer_ahead).
CREATE OR REPLACE FUNCTION finalize_internal.refuse_unreachable_report(tt @extschema@.tracked_table, consumer text,
                                                       reported @extschema@.lsn)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    s record;
    vlf bigint := ('x' || substr(reported::text, 3, 8))::bit(32)::bigint;
    max_vlf bigint;
    age numeric;
BEGIN
    SELECT st.max_lsn, st.last_success - coalesce(st.cycle_time, interval '0') AS read_at INTO s
      FROM @extschema@.source_status st
     WHERE st.server_name = tt.server_name AND st.max_lsn IS NOT NULL AND st.last_success IS NOT NULL;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    max_vlf := ('x' || substr(s.max_lsn::text, 3, 8))::bit(32)::bigint;
    age := greatest(extract(epoch FROM now() - s.read_at), 0);
    IF vlf - max_vlf <= 1000000 * (age + 60) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'LSN % reported for consumer "%" of table "%" lies beyond anything SQL Server can have written',
                    reported, consumer, tt.table_name
        USING ERRCODE = 'invalid_parameter_value',
              DETAIL = format('The max LSN of server %s was %s when its worker read it %s s ago. An LSN''s first 8 hex digits are the sequence number of its virtual log file: this one''s, %s, lies %s files beyond, more than SQL Server can have filled since (a million a second at most).',
                              tt.server_name, s.max_lsn, round(age), upper(substr(reported::text, 3, 8)),
                              vlf - max_vlf),
              HINT = 'Report the commit LSN of the last change the pipeline has durably applied (Debezium: source.commit_lsn of the last record written); nothing changed.';
END
$$;

-- Refuses a report for a consumer whose progress is an Iceberg table's:
-- only what its snapshots prove may move it.
CREATE OR REPLACE FUNCTION finalize_internal.refuse_lake_report(tt @extschema@.tracked_table, consumer text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    l record;
BEGIN
    SELECT x.iceberg_table, x.server_name INTO l FROM @extschema@.lake_consumer x
     WHERE x.table_id = tt.table_id AND x.consumer = consumer;
    IF FOUND THEN
        RAISE EXCEPTION 'consumer "%" of table "%" reads its progress from Iceberg table %', consumer, tt.table_name,
                        l.iceberg_table
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = format('The lake worker records the LSN property of its snapshots (catalog %s); a report could release periods the table does not hold.',
                                  l.server_name),
                  HINT = 'Commit the LSN with the data (snapshot property), or declare another consumer for this pipeline.';
    END IF;
END
$$;

-- The body of finalize.report_progress: a consumer of a tracked table has
-- durably applied every change with commit LSN at or below lsn. A lower or
-- equal LSN (a replay) changes nothing, takes no lock and says so; one SQL
-- Server cannot have reached is refused (_refuse_unreachable_report); the
-- worker resolves a new one to a commit time on its next cycle, which may
-- advance the verdict (one beyond max LSN stays pending, report_ahead).
-- Returns whether the report moved.
CREATE OR REPLACE FUNCTION finalize_internal.report_progress(caller name, table_name text, consumer text, lsn text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    reported @extschema@.lsn;
    c @extschema@.consumer;
BEGIN
    IF tt.kind = 'sharded' THEN
        RAISE EXCEPTION 'table "%" is a sharded table, so its consumers report per shard', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'Each shard is read from its own SQL Server database, whose LSNs are its own: a report names the shard whose changes the pipeline applied (a Debezium record names it in source.db).',
                  HINT = format('Call finalize.report_progress(%L, %L, <lsn>) for each shard.', tt.table_name || '/<shard>',
                                pg_catalog.left(consumer, 255));
    ELSIF tt.kind <> 'source' THEN
        RAISE EXCEPTION 'table "%" is a derived table, so its consumers report with finalize.report_processed()', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A derived table has no SQL Server LSNs: its consumers report the input watermark their job has fully processed.',
                  HINT = format('Call finalize.report_processed(%L, %L, <processed_until>).', tt.table_name,
                                pg_catalog.left(consumer, 255));
    END IF;
    reported := finalize_internal.reported_lsn(lsn, tt, consumer);
    PERFORM finalize_internal.refuse_lake_report(tt, consumer);
    -- A replay is answered without a lock; a move is checked again under one.
    FOR i IN 1..2 LOOP
        c := finalize_internal.reporting_consumer(caller, tt, consumer, i = 2);
        IF reported <= c.reported_lsn THEN
            RAISE NOTICE 'consumer "%" of table "%" already reported LSN %; LSN % is ignored', consumer, tt.table_name,
                         c.reported_lsn, reported
                USING DETAIL = 'Reports only move forward (a replay sends older positions again), so nothing changed.';
            RETURN false;
        END IF;
        IF i = 1 THEN
            PERFORM finalize_internal.refuse_unreachable_report(tt, consumer, reported);
        END IF;
    END LOOP;
    RETURN finalize_internal.advance_report(tt.table_id, consumer, reported);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.report_progress(table_name text, consumer text, lsn text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.report_progress(text, text, text) IS
    'A pipeline has durably applied every change with commit LSN at or below lsn (0x and 20 hex digits, or Debezium''s commit_lsn); returns whether it moved';

-- Says that a report_processed changed nothing (a rerun reports an older
-- watermark again).
CREATE OR REPLACE FUNCTION finalize_internal.processed_replay(tt @extschema@.tracked_table, c @extschema@.consumer,
                                              processed_until timestamptz)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE NOTICE 'consumer "%" of table "%" already reported it processed its inputs until %; % is ignored',
                 (c).consumer, (tt).table_name, (c).processed_until, processed_until
        USING DETAIL = 'Reports only move forward (a rerun may report an older watermark again), so nothing changed.';
END
$$;

-- The body of finalize.report_processed: a consumer of a derived table has
-- fully processed its inputs up to processed_until. A time beyond what the
-- inputs are final until counts only up to that (the rest was processed
-- from input that may still change); an earlier or equal time changes
-- nothing, takes no lock and says so; a later one advances the verdict in
-- this transaction as far as the inputs allow. Returns whether it moved.
CREATE OR REPLACE FUNCTION finalize_internal.report_processed(caller name, table_name text, consumer text,
                                              processed_until timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    c @extschema@.consumer;
    inputs_until timestamptz;
    upto timestamptz := processed_until;
BEGIN
    IF tt.kind = 'sharded' THEN
        RAISE EXCEPTION 'table "%" is a sharded table, so its consumers report per shard with finalize.report_progress()', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A consumer of a sharded table is a consumer of each of its shards, which reports the commit LSN it has applied in that shard''s database.',
                  HINT = format('Call finalize.report_progress(%L, %L, <lsn>) for each shard.', tt.table_name || '/<shard>',
                                pg_catalog.left(consumer, 255));
    ELSIF tt.kind <> 'derived' THEN
        RAISE EXCEPTION 'table "%" is fed by SQL Server, so its consumers report with finalize.report_progress()', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A consumer of a tracked table reports the commit LSN it has applied; report_processed takes the input watermark of a derived table''s job, and a time is never read as an LSN.',
                  HINT = format('Call finalize.report_progress(%L, %L, <lsn>).', tt.table_name,
                                pg_catalog.left(consumer, 255));
    END IF;
    PERFORM finalize_internal.require(processed_until, 'processed_until');
    IF NOT isfinite(processed_until) THEN
        RAISE EXCEPTION 'invalid value for argument processed_until: "%"', processed_until
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A consumer reports the input watermark its job has fully processed: a finite time.';
    END IF;
    c := finalize_internal.reporting_consumer(caller, tt, consumer, false);
    IF processed_until <= c.processed_until THEN
        PERFORM finalize_internal.processed_replay(tt, c, processed_until);
        RETURN false;
    END IF;
    inputs_until := finalize_internal.inputs_final_until(tt.table_id);
    IF inputs_until IS NULL OR upto > inputs_until THEN
        upto := inputs_until;
        RAISE NOTICE 'the inputs of table "%" are final only until %; consumer "%" counts as having processed them until then',
                     tt.table_name, coalesce(inputs_until::text, '(nothing yet)'), consumer
            USING DETAIL = format('It reported %s, but input beyond what is final may still change, so what the job made of it is not final either.',
                                  processed_until),
                  HINT = 'Report the least finalized_until of the inputs the job read before it ran (finalize.finalized_until(ARRAY[...])).';
        IF upto IS NULL OR upto <= c.processed_until THEN
            RETURN false;
        END IF;
    END IF;
    -- Checked again under the lock: another report may have moved meanwhile.
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    c := finalize_internal.reporting_consumer(caller, tt, consumer, true);
    IF upto <= c.processed_until THEN
        PERFORM finalize_internal.processed_replay(tt, c, processed_until);
        RETURN false;
    END IF;
    UPDATE @extschema@.consumer x SET processed_until = upto, reported_at = now()
     WHERE x.table_id = tt.table_id AND x.consumer = consumer;
    PERFORM finalize_internal.advance(tt.table_id);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.report_processed(table_name text, consumer text, processed_until timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.report_processed(text, text, timestamptz) IS
    'A derived table''s job has fully processed its inputs up to processed_until; returns whether it moved';

-- The ids of a derived table's inputs, in the order given, each an active
-- tracked or derived table locked against untracking (FOR SHARE, which
-- untrack_table's lock waits for); the errors name the input.
CREATE OR REPLACE FUNCTION finalize_internal.derived_inputs(table_name text, inputs text[])
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    ids bigint[] := '{}';
    input text;
    id bigint;
BEGIN
    PERFORM finalize_internal.require(inputs, 'inputs');
    IF cardinality(inputs) = 0 OR array_position(inputs, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'invalid value for argument inputs: %', inputs
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A derived table needs at least one input, each the name of a tracked or derived table.';
    END IF;
    FOREACH input IN ARRAY inputs LOOP
        IF input = table_name THEN
            RAISE EXCEPTION 'derived table "%" cannot be its own input', table_name
                USING ERRCODE = 'invalid_object_definition',
                      DETAIL = 'A derived table is computed from other tables: its verdict follows theirs.',
                      HINT = 'Remove it from inputs.';
        END IF;
        SELECT t.table_id INTO id FROM @extschema@.tracked_table t
         WHERE t.table_name = input AND t.untracked_at IS NULL FOR SHARE;
        IF NOT FOUND THEN
            PERFORM finalize_internal.not_tracked(input);
        ELSIF id = ANY (ids) THEN
            RAISE EXCEPTION 'input "%" is listed twice', input
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('Derived table "%s" lists each of its inputs once.', table_name),
                      HINT = 'Remove the repetition from inputs.';
        END IF;
        ids := ids || id;
    END LOOP;
    RETURN ids;
END
$$;

-- Refuses inputs that use a table of this name (transitively): the
-- derived table would depend on itself. Inputs are fixed when a derived
-- table is created and must exist, and its name must be new, so no cycle
-- can be built today; this check keeps the DAG the recursions rely on
-- should inputs ever become changeable.
CREATE OR REPLACE FUNCTION finalize_internal.check_no_cycle(table_name text, input_ids bigint[])
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    via text;
BEGIN
    WITH RECURSIVE up(id, via) AS (
        SELECT t.table_id, t.table_name FROM @extschema@.tracked_table t WHERE t.table_id = ANY (input_ids)
        UNION
        SELECT d.input_id, up.via FROM @extschema@.derived_input d JOIN up ON d.table_id = up.id)
    SELECT min(up.via) INTO via FROM up JOIN @extschema@.tracked_table t ON t.table_id = up.id
     WHERE t.table_name = table_name AND t.untracked_at IS NULL;
    IF via IS NOT NULL THEN
        RAISE EXCEPTION 'derived table "%" would depend on itself through its input "%"', table_name, via
            USING ERRCODE = 'invalid_object_definition',
                  DETAIL = format('Table "%s" is derived (directly or through other derived tables) from "%s": the inputs of derived tables must not form a cycle.',
                                  via, table_name),
                  HINT = 'Choose other inputs, or another name for the new table.';
    END IF;
END
$$;

-- The error for a derived table whose name is tracked already.
CREATE OR REPLACE FUNCTION finalize_internal.already_tracked(table_name text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'table "%" is already tracked', table_name
        USING ERRCODE = 'duplicate_object',
              HINT = 'Untrack it first with finalize.untrack_table(), or choose another name.';
END
$$;

-- The body of finalize.track_derived: a lake table computed from tracked
-- or derived tables. Its granularity defaults to the coarsest input's, its
-- period_zone to the inputs' zone (which must then be one); its verdict
-- (its inputs' least verdict rounded down to a start of its own periods,
-- capped by its required consumers) is computed at once and follows every
-- input advance in the same transaction. Returns its id.
CREATE OR REPLACE FUNCTION finalize_internal.track_derived(
    caller name,
    table_name text,
    inputs text[],
    granularity interval DEFAULT NULL,
    period_zone text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    ids bigint[];
    g interval;
    z text;
    zones text[];
    new_id bigint;
BEGIN
    PERFORM finalize_internal.check_table_name(table_name, 'sales.daily_revenue');
    IF EXISTS (SELECT FROM @extschema@.tracked_table t WHERE t.table_name = track_derived.table_name
                                                        AND t.untracked_at IS NULL) THEN
        PERFORM finalize_internal.already_tracked(table_name);
    END IF;
    ids := finalize_internal.derived_inputs(table_name, inputs);
    PERFORM finalize_internal.check_no_cycle(table_name, ids);
    g := coalesce(granularity, (SELECT max(t.granularity) FROM @extschema@.tracked_table t WHERE t.table_id = ANY (ids)));
    PERFORM finalize_internal.check_granularity(g, 'granularity');
    IF period_zone IS NOT NULL THEN
        z := finalize_internal.check_zone(period_zone, 'period_zone');
    ELSE
        SELECT array_agg(DISTINCT t.period_zone ORDER BY t.period_zone) INTO zones
          FROM @extschema@.tracked_table t WHERE t.table_id = ANY (ids);
        IF cardinality(zones) > 1 THEN
            RAISE EXCEPTION 'the inputs of derived table "%" cut their periods in different zones (%)', table_name,
                            array_to_string(zones, ', ')
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'A derived table''s periods are cut in one zone, and its inputs'' verdicts are rounded down to them.',
                      HINT = format('Pass period_zone => %L (or another zone) to finalize.track_derived.', zones[1]);
        END IF;
        z := zones[1];
    END IF;
    BEGIN
        INSERT INTO @extschema@.tracked_table (table_name, kind, granularity, period_zone, created_by)
        VALUES (table_name, 'derived', g, z, caller)
        RETURNING tracked_table.table_id INTO new_id;
    EXCEPTION WHEN unique_violation THEN
        PERFORM finalize_internal.already_tracked(table_name);
    END;
    INSERT INTO @extschema@.watermark (table_id) VALUES (new_id);
    PERFORM finalize_internal.seal_catalog();
    INSERT INTO @extschema@.derived_input (table_id, input_id) SELECT new_id, i FROM unnest(ids) AS i;
    PERFORM finalize_internal.refresh_loss_blocked(new_id);
    PERFORM finalize_internal.advance(new_id);
    RETURN new_id;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.track_derived(table_name text, inputs text[], granularity interval DEFAULT NULL,
                                          period_zone text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.track_derived(text, text[], interval, text) IS
    'Track a lake table derived from tracked or derived tables: final for a period once its inputs and its required consumers are';

-- Checks a bound of an acknowledged range: a period boundary of the table
-- (or infinite), so that it names whole periods.
CREATE OR REPLACE FUNCTION finalize_internal.check_period_bound(tt @extschema@.tracked_table, bound timestamptz, argname text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(bound, argname);
    IF isfinite(bound) AND @extschema@.period_start(bound, tt.granularity, tt.period_zone) <> bound THEN
        RAISE EXCEPTION 'invalid value for argument %: % is not a period boundary of table "%"', argname, bound, tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('Its periods are %s long in zone %s; an acknowledgement covers whole periods.',
                                  tt.granularity, tt.period_zone),
                  HINT = format('Use %s or %s.', @extschema@.period_start(bound, tt.granularity, tt.period_zone),
                                @extschema@.period_end(bound, tt.granularity, tt.period_zone));
    END IF;
END
$$;

-- The body of finalize.acknowledge_loss: an admin says the periods of
-- [period_from, period_to) were repaired after the losses recorded so far:
-- on the table that lost the data (for example, the lake table was
-- re-snapshotted), or on a derived table with a required consumer whose job
-- has rebuilt them from the repaired input (the input's acknowledgement
-- alone does not release such a table: see _loss_ackers). A loss no longer
-- holds those periods, here and in the derived tables that use the table,
-- once every table it needs an acknowledgement on has one. A loss recorded
-- later needs an acknowledgement of its own. Recorded with who, when and
-- the note, also as an event fact. Returns how many losses the range
-- (partly) covers.
CREATE OR REPLACE FUNCTION finalize_internal.acknowledge_loss(
    caller name,
    table_name text,
    period_from timestamptz,
    period_to timestamptz,
    note text)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    covered integer;
BEGIN
    IF tt.kind = 'sharded' THEN
        RAISE EXCEPTION 'table "%" is a sharded table: a loss is acknowledged on the shard that lost the data', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A sharded table holds the periods its shards lost; each shard''s loss is released by an acknowledgement on that shard, once the lake''s copy of its data was repaired.',
                  HINT = 'finalize.explain_verdict() on the sharded table names the shard and the call to make.';
    END IF;
    IF tt.kind = 'derived' AND NOT EXISTS (SELECT FROM finalize_internal.loss_ackers(tt.table_id) AS a
                                            WHERE a.acker_id = tt.table_id) THEN
        RAISE EXCEPTION 'table "%" is a derived table with no loss to acknowledge', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A derived table holds the periods its inputs lost. It needs an acknowledgement of its own only when it has a required consumer, whose job must rebuild them; otherwise it is released when the loss is acknowledged on the input that lost the data.',
                  HINT = 'finalize.explain_verdict() on the derived table names the table to acknowledge the loss on.';
    END IF;
    PERFORM finalize_internal.check_period_bound(tt, period_from, 'period_from');
    PERFORM finalize_internal.check_period_bound(tt, period_to, 'period_to');
    IF period_to <= period_from THEN
        RAISE EXCEPTION 'invalid range of periods from % to %', period_from, period_to
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'period_to must be after period_from.';
    END IF;
    PERFORM finalize_internal.require(note, 'note');
    IF note !~ '\S' THEN
        RAISE EXCEPTION 'invalid value for argument note: it must say how the loss was repaired'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The note is kept with the acknowledgement, for example ''orders re-snapshotted from SQL Server on 2026-12-01, ticket DATA-123''.';
    END IF;
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    -- Its own losses, or for a derived table the ones it must acknowledge.
    SELECT count(*) INTO covered FROM @extschema@.loss l
     WHERE l.loss_id IN (SELECT a.loss_id FROM finalize_internal.loss_ackers(tt.table_id) AS a
                          WHERE a.acker_id = tt.table_id)
       AND l.lost_from < period_to AND l.lost_to >= period_from;
    -- clock_timestamp(): a loss recorded after this (under the same lock)
    -- is never covered by it, even one whose transaction began earlier.
    INSERT INTO @extschema@.loss_ack (table_id, period_from, period_to, note, acknowledged_by, acknowledged_at)
    VALUES (tt.table_id, period_from, period_to, note, caller, clock_timestamp());
    INSERT INTO @extschema@.fact (table_id, kind, event, detail)
    VALUES (tt.table_id, 'event', 'loss_acknowledged',
            jsonb_build_object('by', caller, 'note', note, 'losses', covered,
                               'period_from', CASE WHEN isfinite(period_from) THEN finalize_internal.utc_iso(period_from) ELSE period_from::text END,
                               'period_to', CASE WHEN isfinite(period_to) THEN finalize_internal.utc_iso(period_to) ELSE period_to::text END));
    PERFORM finalize_internal.refresh_loss_blocked(tt.table_id);
    -- An event-time verdict was held back by the loss itself (_advance): it
    -- moves now, and the derived tables that use it with it. Any other
    -- verdict stays, but finalized_until() may have moved past the periods
    -- acknowledged: that is announced (the derived tables that use this
    -- one are, within a round of the scheduler).
    IF tt.event_time_column IS NOT NULL THEN
        PERFORM finalize_internal.advance(tt.table_id);
    ELSE
        PERFORM finalize_internal.announce(ARRAY[tt.table_id]);
    END IF;
    -- The data_loss incident of the table that lost the data is resolved
    -- once that table has acknowledged all its losses; a derived table
    -- that inherited one acknowledges it on its own (its verdict waits).
    IF tt.kind = 'source' AND NOT finalize_internal.has_open_loss(tt.table_id) THEN
        PERFORM finalize_internal.resolve_alerts('data_loss', tt.table_id, tt.server_name);
    END IF;
    IF covered = 0 THEN
        RAISE NOTICE 'no loss % table "%" recorded so far intersects the periods from % to %',
                     CASE WHEN tt.kind = 'derived' THEN 'inherited by' ELSE 'of' END, tt.table_name,
                     period_from, period_to
            USING DETAIL = 'The acknowledgement is kept, but it covers no loss recorded after it.';
    END IF;
    RETURN covered;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.acknowledge_loss(table_name text, period_from timestamptz, period_to timestamptz,
                                             note text)
RETURNS integer
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.acknowledge_loss(text, timestamptz, timestamptz, text) IS
    'Say that the periods of [period_from, period_to) were repaired after the losses recorded so far (re-snapshotted, or rebuilt by a derived table''s job); returns how many losses it covers';
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
-- Consumers that are Iceberg tables (docs/design/lake.md): a pipeline's
-- progress read from the snapshots its writes committed, through an Iceberg
-- REST catalog (a foreign server of finalize_iceberg), so that the
-- pipeline never calls finalize. The lake worker of each catalog loads the
-- table's metadata every poll interval and records the LSN property of the
-- newest snapshot on the ref's ancestry through the same rule as
-- report_progress (_advance_report); the source worker resolves it to a
-- commit time as it resolves every report. A rollback of the ref records a
-- loss.

-- Iceberg REST catalogs are foreign servers of finalize_iceberg; their
-- credentials (a bearer token, OAuth2 client credentials, AWS keys) live in
-- user mappings only.
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_validator(text[], oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_iceberg_validator'
LANGUAGE C STRICT;

-- The one rule of a report (report_progress and the lake worker): a
-- consumer's LSN only moves forward; a lower or equal one changes nothing.
-- The caller holds the consumer's row. Returns whether it moved.
CREATE OR REPLACE FUNCTION finalize_internal.advance_report(table_id bigint, consumer text, reported @extschema@.lsn)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    UPDATE @extschema@.consumer x SET reported_lsn = reported, reported_at = now()
     WHERE x.table_id = advance_report.table_id AND x.consumer = consumer
       AND (x.reported_lsn IS NULL OR x.reported_lsn < reported);
    RETURN FOUND;
END
$$;

-- Why a role may not read through a server, or NULL when it may: 'usage'
-- without USAGE on it; 'owner_mapping' when the server's owner has a user
-- mapping of its own (the one the worker reads with) that the role may not
-- use. A role that no longer exists may not. The one rule add_consumer
-- checks and the lake worker checks again every poll.
CREATE OR REPLACE FUNCTION finalize_internal.server_use_refused(who oid, server oid)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT CASE
        WHEN NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid = who) THEN 'usage'
        WHEN NOT pg_catalog.has_server_privilege(who, server, 'USAGE') THEN 'usage'
        WHEN EXISTS (SELECT FROM pg_catalog.pg_foreign_server s
                       JOIN pg_catalog.pg_user_mapping m ON m.umserver = s.oid AND m.umuser = s.srvowner
                      WHERE s.oid = server)
             AND NOT pg_catalog.pg_has_role(who, (SELECT s.srvowner FROM pg_catalog.pg_foreign_server s
                                                   WHERE s.oid = server), 'USAGE') THEN 'owner_mapping'
    END;
END;

-- A finalize_iceberg server a caller may name for a consumer: it exists, is
-- an Iceberg catalog, and the caller has USAGE on it and may use the user
-- mapping the lake worker reads (its owner's), as for track_table.
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_server(caller name, server_name text)
RETURNS pg_foreign_server
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    srv pg_foreign_server;
    wrapper name;
    refused text;
BEGIN
    PERFORM finalize_internal.require(server_name, 'iceberg_server');
    SELECT s.* INTO srv FROM pg_foreign_server s WHERE s.srvname = server_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'server "%" does not exist', server_name
            USING ERRCODE = 'undefined_object',
                  HINT = 'Create it with CREATE SERVER ... FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri ''https://...''), then a user mapping for its credentials.';
    END IF;
    SELECT w.fdwname INTO wrapper FROM pg_foreign_data_wrapper w WHERE w.oid = srv.srvfdw;
    IF wrapper <> 'finalize_iceberg' THEN
        RAISE EXCEPTION 'server "%" is not an Iceberg catalog', server_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = format('It uses the foreign-data wrapper "%s"; a lake consumer needs a server of finalize_iceberg.', wrapper),
                  HINT = 'Create one with CREATE SERVER ... FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri ''https://...'').';
    END IF;
    refused := finalize_internal.server_use_refused((SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = caller),
                                               srv.oid);
    IF refused = 'usage' THEN
        RAISE EXCEPTION 'permission denied for server %', server_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Role %s has no USAGE on the server, and the lake worker reads the table with its credentials.', caller),
                  HINT = format('The server''s owner can run GRANT USAGE ON FOREIGN SERVER %I TO %I.', server_name, caller);
    END IF;
    IF refused = 'owner_mapping' THEN
        RAISE EXCEPTION 'permission denied for server %', server_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('The lake worker reads through the user mapping of the server''s owner %s, which role %s may not use.',
                                  srv.srvowner::regrole, caller);
    END IF;
    RETURN srv;
END
$$;

-- Checks an Iceberg table name: namespace levels and the table, joined by
-- dots (ns.orders, lake.sales.orders); each part non-empty, no control
-- characters.
CREATE OR REPLACE FUNCTION finalize_internal.check_iceberg_table(iceberg_table text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(iceberg_table, 'iceberg_table');
    IF iceberg_table !~ '^[^.[:cntrl:]]+(\.[^.[:cntrl:]]+)+$' OR length(iceberg_table) > 1024 THEN
        RAISE EXCEPTION 'invalid value for argument iceberg_table: "%"', iceberg_table
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'An Iceberg table is named by its namespace and its name joined by dots, such as sales.orders (a nested namespace: lake.sales.orders); no part may be empty or hold a dot.';
    END IF;
END
$$;

-- Checks a ref or a property name: 1 to 255 characters without control
-- characters.
CREATE OR REPLACE FUNCTION finalize_internal.check_lake_word(value text, argname text, example text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(value, argname);
    IF value !~ '^[^[:cntrl:]]{1,255}$' OR value !~ '\S' THEN
        RAISE EXCEPTION 'invalid value for argument %: "%"', argname, value
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('It has 1 to 255 characters without control characters, such as %s.', example);
    END IF;
END
$$;

-- The body of finalize.add_consumer(table, consumer, iceberg_server, ...):
-- declares a pipeline whose progress is the LSN property (lsn_property) of
-- the snapshots of an Iceberg table's ref. Nobody reports for it: the lake
-- worker reads it. Like every new required consumer, it holds the verdict
-- from now on until its table proves a period (what was final stays final).
CREATE OR REPLACE FUNCTION finalize_internal.add_consumer(
    caller name,
    table_name text,
    consumer text,
    iceberg_server text,
    iceberg_table text,
    ref text DEFAULT 'main',
    lsn_property text DEFAULT 'finalize.lsn',
    required boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    srv pg_foreign_server;
BEGIN
    IF tt.kind = 'sharded' THEN
        RAISE EXCEPTION 'table "%" is a sharded table, so an Iceberg table cannot report LSNs for it as a whole', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'Each shard is read from its own SQL Server database, whose LSNs are its own.',
                  HINT = format('Declare the Iceberg consumer on each shard, such as finalize.add_consumer(%L, %L, ...), with the snapshot property that carries that shard''s LSN (lsn_property).',
                                tt.table_name || '/<shard>', consumer);
    ELSIF tt.kind <> 'source' THEN
        RAISE EXCEPTION 'table "%" is a derived table, so an Iceberg table cannot report LSNs for it', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A derived table has no SQL Server LSNs: its consumers report the input watermark their job has processed.',
                  HINT = format('Declare the consumer with finalize.add_consumer(%L, %L) and report with finalize.report_processed().',
                                tt.table_name, consumer);
    END IF;
    srv := finalize_internal.iceberg_server(caller, iceberg_server);
    PERFORM finalize_internal.check_iceberg_table(iceberg_table);
    PERFORM finalize_internal.check_lake_word(ref, 'ref', 'main or audit');
    PERFORM finalize_internal.check_lake_word(lsn_property, 'lsn_property', 'finalize.lsn');
    PERFORM finalize_internal.check_consumer_name(consumer);
    PERFORM finalize_internal.require(required, 'required');
    PERFORM finalize_internal.insert_consumer(caller, tt, consumer, required, NULL, NULL);
    INSERT INTO @extschema@.lake_consumer (table_id, consumer, server_name, iceberg_table, ref, lsn_property)
    VALUES (tt.table_id, consumer, srv.srvname, iceberg_table, ref, lsn_property);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.add_consumer(
    table_name text,
    consumer text,
    iceberg_server text,
    iceberg_table text,
    ref text DEFAULT 'main',
    lsn_property text DEFAULT 'finalize.lsn',
    required boolean DEFAULT true)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.add_consumer(text, text, text, text, text, text, boolean) IS
    'Declare a pipeline whose progress is the LSN property of an Iceberg table''s snapshots on a ref, read through a finalize_iceberg catalog; nobody reports for it';

-- The catalogs the lake workers serve: finalize_iceberg servers with a
-- consumer of a tracked table (the scheduler keeps one worker per row).
CREATE OR REPLACE FUNCTION finalize_internal.wanted_catalogs()
RETURNS TABLE (serverid oid, server_name text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT DISTINCT s.oid, s.srvname::text
      FROM @extschema@.lake_consumer l
      JOIN @extschema@.tracked_table t ON t.table_id = l.table_id
      JOIN pg_foreign_server s ON s.srvname = l.server_name
      JOIN pg_foreign_data_wrapper w ON w.oid = s.srvfdw
     WHERE t.untracked_at IS NULL AND w.fdwname = 'finalize_iceberg';
END;

-- The consumers a lake worker polls, those looked at longest ago first,
-- with the source server whose worker resolves their reports; whether a
-- poll that finds nothing new has anything to write (quiet: no condition to
-- clear, polled_at younger than 50 seconds; _lake_observe writes it at most
-- once a minute); and whether the role that declared it may still read
-- through the server (allowed: USAGE on it, and the right to use its
-- owner's user mapping when there is one, as add_consumer checked: a
-- server dropped and created again under its name by another role, or
-- handed to another owner, does not inherit the consumer).
CREATE OR REPLACE FUNCTION finalize_internal.lake_consumers(server_name text)
RETURNS TABLE (table_id bigint, table_name text, consumer text, iceberg_table text, ref text,
               lsn_property text, seen_head_id bigint, seen_head_sequence bigint, seen_lsn text,
               seen_table_uuid text, source_serverid oid, quiet boolean, lake_id bigint, allowed boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT l.table_id, t.table_name, l.consumer, l.iceberg_table, l.ref, l.lsn_property, l.seen_head_id,
           l.seen_head_sequence, l.seen_lsn::text, l.seen_table_uuid, s.oid,
           l.condition IS NULL AND l.polled_at >= now() - interval '50 seconds', l.lake_id,
           r.oid IS NOT NULL AND cs.oid IS NOT NULL AND finalize_internal.server_use_refused(r.oid, cs.oid) IS NULL
      FROM @extschema@.lake_consumer l
      JOIN @extschema@.tracked_table t ON t.table_id = l.table_id
      JOIN @extschema@.consumer c ON c.table_id = l.table_id AND c.consumer = l.consumer
      LEFT JOIN pg_foreign_server s ON s.srvname = t.server_name
      LEFT JOIN pg_foreign_server cs ON cs.srvname = l.server_name
      LEFT JOIN pg_roles r ON r.rolname = c.created_by
     WHERE l.server_name = lake_consumers.server_name AND t.untracked_at IS NULL
     ORDER BY l.polled_at NULLS FIRST, l.table_id, l.consumer;
END;

-- The earliest commit time a change the worker has not read yet (above a
-- table's offset) may carry: the offset's commit time less the source's
-- clock_tolerance, since SQL Server's clock may have been stepped back by
-- up to that much after it stamped the offset (a tolerance unknown: the
-- largest, 1 hour). Where every loss of such changes starts
-- (_resume_after_loss, _lake_lost_from); NULL for no offset.
CREATE OR REPLACE FUNCTION finalize_internal.unread_from(offset_commit_time timestamptz, clock_tolerance interval)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN offset_commit_time - coalesce(clock_tolerance, interval '1 hour');

-- Where a rollback's loss starts: the earliest commit time a change with an
-- LSN above held (up to proved) may have. One the worker has read lies in
-- a range fact that ends above held, no earlier than its first commit (the
-- least commit time of its rows), or its end when it has none; one it has
-- not read yet (proved above the table's offset, or a table read no
-- further than held) no earlier than _unread_from, the offset's commit time
-- less the source's clock_tolerance: SQL Server's clock may have been
-- stepped back since. held NULL (the ref holds nothing provable), or facts
-- that no longer reach back to held (retention): -infinity.
CREATE OR REPLACE FUNCTION finalize_internal.lake_lost_from(table_id bigint, held @extschema@.lsn, proved @extschema@.lsn,
                                            clock_tolerance interval)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT CASE
        WHEN held IS NULL THEN '-infinity'::timestamptz
        WHEN NOT EXISTS (SELECT FROM @extschema@.fact f
                          WHERE f.table_id = lake_lost_from.table_id AND f.kind = 'range' AND f.start_lsn <= held)
             AND EXISTS (SELECT FROM @extschema@.fact f
                          WHERE f.table_id = lake_lost_from.table_id AND f.kind = 'range')
            THEN '-infinity'::timestamptz
        ELSE coalesce(LEAST((SELECT min(coalesce(f.first_commit_time, f.end_commit_time)) FROM @extschema@.fact f
                              WHERE f.table_id = lake_lost_from.table_id AND f.kind = 'range' AND f.end_lsn > held),
                            (SELECT finalize_internal.unread_from(w.offset_commit_time, lake_lost_from.clock_tolerance)
                               FROM @extschema@.watermark w
                              WHERE w.table_id = lake_lost_from.table_id
                                AND (proved IS NULL OR w.offset_lsn IS NULL OR proved > w.offset_lsn))),
                      (SELECT finalize_internal.unread_from(w.offset_commit_time, lake_lost_from.clock_tolerance)
                         FROM @extschema@.watermark w
                        WHERE w.table_id = lake_lost_from.table_id),
                      '-infinity'::timestamptz)
    END;
END;

-- A rollback of a lake consumer's ref: data the verdict covered left the
-- Iceberg table. Records a loss from the earliest commit time a change
-- above held may have (_lake_lost_from; reaching back by the lateness
-- allowance on an event-time table) to infinity, so that those periods are
-- not final until finalize.acknowledge_loss(); the consumer's report goes
-- down to what the ref still claims (new_lsn, NULL for nothing) and waits
-- for its resolution again; an incident (data_loss) and a NOTIFY on
-- finalize_alert say so. The caller holds the table's verdict and the
-- consumer's row.
CREATE OR REPLACE FUNCTION finalize_internal.lake_rollback(tt @extschema@.tracked_table, l @extschema@.lake_consumer,
                                           new_lsn @extschema@.lsn, held @extschema@.lsn, reason text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    wm @extschema@.watermark;
    -- A shared carrier above what was proven (LSNs that went up and down)
    -- holds no more than what was proven.
    -- (LEAST skips a NULL: nothing held must stay nothing held.)
    held_capped @extschema@.lsn := CASE WHEN held IS NOT NULL THEN LEAST(held, l.seen_lsn) END;
    lost_from timestamptz := finalize_internal.lake_lost_from(tt.table_id, held_capped, l.seen_lsn,
                                                         finalize_internal.clock_tolerance(tt.server_name));
    commit_from timestamptz;
    fact bigint;
    message text;
BEGIN
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    IF tt.event_time_column IS NOT NULL THEN
        commit_from := lost_from;
        lost_from := coalesce(finalize_internal.instant_minus(lost_from, GREATEST(tt.allowed_lateness, wm.event_allowance)),
                              '-infinity');
    END IF;
    message := format('Iceberg table %s (ref %s, catalog %s) no longer holds what consumer "%s" of table "%s" had committed: %s. It proved LSN %s; it now holds %s. The periods from %s on are not final until finalize.acknowledge_loss().',
                      l.iceberg_table, l.ref, l.server_name, l.consumer, tt.table_name, reason, l.seen_lsn,
                      coalesce('LSN ' || held::text, 'nothing provable'),
                      CASE WHEN isfinite(lost_from) THEN finalize_internal.utc_iso(lost_from) ELSE 'the start' END);
    INSERT INTO @extschema@.fact (table_id, kind, event, detail)
    VALUES (tt.table_id, 'event', 'data_loss',
            jsonb_build_object('cause', 'lake_rollback', 'consumer', l.consumer, 'iceberg_table', l.iceberg_table,
                               'ref', l.ref, 'catalog', l.server_name, 'reason', reason,
                               'proved_lsn', l.seen_lsn, 'held_lsn', held, 'new_lsn', new_lsn,
                               'lost_from', CASE WHEN isfinite(lost_from) THEN finalize_internal.utc_iso(lost_from)
                                                 ELSE lost_from::text END))
    RETURNING fact_id INTO fact;
    INSERT INTO @extschema@.loss (table_id, fact_id, lost_from, lost_to, from_lsn, to_lsn, created_at, commit_from)
    VALUES (tt.table_id, fact, lost_from, 'infinity', held_capped, l.seen_lsn, clock_timestamp(), commit_from);
    PERFORM finalize_internal.refresh_loss_blocked(tt.table_id);
    UPDATE @extschema@.consumer c
       SET reported_lsn = new_lsn, reported_at = now(), resolved_for_lsn = NULL, mapped_lsn = NULL,
           commit_time = NULL, resolved_at = NULL, resolve_error = NULL
     WHERE c.table_id = tt.table_id AND c.consumer = l.consumer;
    PERFORM finalize_internal.alert(jsonb_build_object('alert', 'data_loss', 'table', tt.table_name,
                                                  'consumer', l.consumer, 'iceberg_table', l.iceberg_table,
                                                  'detail', message));
    PERFORM finalize_internal.raise_alert('data_loss', 'critical', tt.table_id, l.server_name, l.consumer, message,
                                     jsonb_build_object('cause', 'lake_rollback', 'iceberg_table', l.iceberg_table,
                                                        'ref', l.ref, 'proved_lsn', l.seen_lsn, 'held_lsn', held));
END
$$;

-- What a lake worker saw of one consumer's table this poll, recorded in
-- its write transaction, for the declaration it polled (lake_id) as it
-- was when judged (the head and LSN seen then; changed since, nothing is
-- recorded and the next poll judges again): the
-- condition (NULL when the metadata was read) and its sentence; when read,
-- the ref's head (recorded when it moved, so the next walk meets it), the
-- newest carrier's snapshot and LSN (NULL: none new), the table-uuid, or a
-- rollback (with the LSN the ref still provably holds). A condition that
-- has lasted finalize.alert_after opens an incident of its name; one that
-- clears resolves it. A consumer or verdict row another transaction holds
-- is skipped (the next poll sees the same again). Returns whether the
-- consumer's report moved, so that its source's worker resolves it now.
CREATE OR REPLACE FUNCTION finalize_internal.lake_observe(
    lake_id bigint,
    judged_head_id bigint,
    judged_lsn text,
    condition text,
    detail text,
    head_id bigint,
    head_sequence bigint,
    carrier_id bigint,
    lsn text,
    table_uuid text,
    rolled_back boolean,
    held_lsn text,
    reason text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
    l @extschema@.lake_consumer;
    new_lsn @extschema@.lsn := finalize_internal.lsn_arg(lsn, 'lsn');
    moved boolean := false;
    since timestamptz;
BEGIN
    SELECT x.* INTO l FROM @extschema@.lake_consumer x WHERE x.lake_id = lake_observe.lake_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    tt := finalize_internal.try_lock_tracked(l.table_id);
    IF tt.table_id IS NULL OR NOT finalize_internal.lock_consumer(tt.table_id, l.consumer) THEN
        RETURN false;
    END IF;
    -- A rollback lowers a verdict already final: the table's row too, so
    -- that no announcement of a table built from it, read before this
    -- commits, is sent after it (_hold_inputs).
    IF rolled_back THEN
        PERFORM FROM @extschema@.tracked_table t WHERE t.table_id = tt.table_id FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
    END IF;
    -- Again under the lock: the row may have changed since it was read, and
    -- an observation judged against another state (a reset meanwhile) is
    -- not this row's.
    SELECT x.* INTO l FROM @extschema@.lake_consumer x WHERE x.lake_id = lake_observe.lake_id;
    IF NOT FOUND OR l.seen_head_id IS DISTINCT FROM judged_head_id
       OR l.seen_lsn IS DISTINCT FROM finalize_internal.lsn_arg(judged_lsn, 'judged_lsn') THEN
        RETURN false;
    END IF;
    since := CASE WHEN condition IS NULL THEN NULL
                  WHEN l.condition IS NOT DISTINCT FROM condition THEN l.condition_since ELSE now() END;
    UPDATE @extschema@.lake_consumer x
       SET polled_at = now(),
           loaded_at = CASE WHEN condition IS NULL THEN now() ELSE x.loaded_at END,
           condition = lake_observe.condition,
           condition_since = since,
           last_error = CASE WHEN condition IS NULL THEN x.last_error ELSE detail END
     WHERE x.lake_id = l.lake_id
       AND ((x.condition, x.last_error) IS DISTINCT FROM (lake_observe.condition, coalesce(detail, x.last_error))
            OR rolled_back OR new_lsn IS DISTINCT FROM x.seen_lsn OR head_id IS DISTINCT FROM x.seen_head_id
            OR x.polled_at IS NULL OR x.polled_at < now() - interval '1 minute');
    -- An incident is opened only while its condition lasts: leaving the
    -- condition resolves it.
    IF l.condition IS NOT NULL AND l.condition IS DISTINCT FROM condition THEN
        PERFORM finalize_internal.resolve_alerts(l.condition, tt.table_id, l.server_name, l.consumer);
    END IF;
    IF condition IS NOT NULL AND since <= now() - finalize_internal.alert_after() THEN
        PERFORM finalize_internal.raise_alert(condition, 'warning', tt.table_id, l.server_name, l.consumer,
            format('Consumer "%s" of table "%s" reads Iceberg table %s through catalog %s, which has failed since %s: %s The verdict waits for it.',
                   l.consumer, tt.table_name, l.iceberg_table, l.server_name, since, detail));
    END IF;
    IF condition IS NOT NULL THEN
        -- A malformed property on a ref shown to descend from the head seen
        -- last: that head moves on, so the next walk meets it.
        IF condition = 'property_malformed' AND head_id IS NOT NULL AND l.seen_lsn IS NOT NULL THEN
            UPDATE @extschema@.lake_consumer x SET seen_head_id = head_id, seen_head_sequence = head_sequence
             WHERE x.lake_id = l.lake_id AND x.seen_head_id IS DISTINCT FROM head_id;
        END IF;
        RETURN false;
    END IF;
    IF rolled_back THEN
        PERFORM finalize_internal.lake_rollback(tt, l, new_lsn, finalize_internal.lsn_arg(held_lsn, 'held_lsn'), reason);
        moved := true;
    ELSIF new_lsn IS NOT NULL THEN
        moved := finalize_internal.advance_report(tt.table_id, l.consumer, new_lsn);
    END IF;
    IF rolled_back OR new_lsn IS NOT NULL THEN
        -- What the ref holds now: the head, its newest carrier and LSN (after
        -- a rollback to nothing provable, nothing: the next carrier starts
        -- again).
        UPDATE @extschema@.lake_consumer x
           SET seen_snapshot_id = CASE WHEN new_lsn IS NULL THEN NULL ELSE coalesce(carrier_id, x.seen_snapshot_id) END,
               seen_head_id = CASE WHEN new_lsn IS NULL THEN NULL ELSE head_id END,
               seen_head_sequence = CASE WHEN new_lsn IS NULL THEN NULL ELSE head_sequence END,
               seen_lsn = new_lsn,
               seen_table_uuid = CASE WHEN new_lsn IS NULL THEN NULL ELSE table_uuid END,
               seen_at = now()
         WHERE x.lake_id = l.lake_id
           -- Without a rollback, what was proven only moves forward.
           AND (rolled_back OR x.seen_lsn IS NULL OR new_lsn >= x.seen_lsn)
           AND (x.seen_head_id, x.seen_lsn, x.seen_table_uuid, x.seen_snapshot_id)
               IS DISTINCT FROM (head_id, new_lsn, table_uuid, coalesce(carrier_id, x.seen_snapshot_id));
    END IF;
    RETURN moved;
END
$$;
-- Sharded tables (docs/sharding.md): one lake table fed by the same SQL
-- Server table in many databases, each database a shard. A sharded table
-- (kind sharded) holds the policy every shard follows (granularity, zone,
-- DDL and data-loss policies, event time) and is derived from its shards
-- (derived_input): its verdict is their least verdict, by the one rule of
-- derived tables (_inputs_until, _advance). Each shard is a tracked table
-- of kind source named <sharded table>/<shard> (shard_of, shard), read by
-- the worker of its server like any other, with its own verdict, status,
-- consumers and losses. The functions a role calls are C entry points
-- (finalize_as_owner) that run the body _<name>(caller, ...) as the
-- extension's owner.

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

-- Checks a shard's label: what the lake's partition paths write
-- (shard=<label>), so 1 to 63 characters, not only spaces, no "/" and no
-- control characters.
CREATE OR REPLACE FUNCTION finalize_internal.check_shard_label(table_name text, shard text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(shard, 'shard');
    IF shard !~ '\S' OR length(shard) > 63 OR shard ~ '[/[:cntrl:]]' THEN
        RAISE EXCEPTION 'invalid value for argument shard of sharded table "%": "%"', table_name,
                        regexp_replace(left(shard, 70), '[[:cntrl:]]', '?', 'g')
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A shard label is what the lake''s partition paths write (shard=<label>): 1 to 63 characters, not only spaces, without "/" or control characters.',
                  HINT = 'Name the shard after its database, for example ''db07''.';
    END IF;
END
$$;

-- The sharded table of a name (its row, no lock), or the errors for a name
-- that is not tracked or not a sharded table.
CREATE OR REPLACE FUNCTION finalize_internal.sharded(table_name text)
RETURNS @extschema@.tracked_table
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
BEGIN
    IF tt.kind <> 'sharded' THEN
        RAISE EXCEPTION 'table "%" is not a sharded table', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = CASE WHEN tt.shard_of IS NOT NULL
                                THEN format('It is shard "%s" of sharded table "%s".', tt.shard,
                                            (SELECT p.table_name FROM @extschema@.tracked_table p WHERE p.table_id = tt.shard_of))
                                ELSE format('It is a %s table.', tt.kind) END,
                  HINT = 'A sharded table is tracked with finalize.track_sharded(); its shards are added with finalize.add_shard().';
    END IF;
    RETURN tt;
END
$$;

-- The body of finalize.track_sharded: a lake table fed by many shards, with
-- the policy they all follow. Its verdict waits for its first shard's.
-- Returns its id.
CREATE OR REPLACE FUNCTION finalize_internal.track_sharded(
    caller name,
    table_name   text,
    granularity  interval DEFAULT interval '1 hour',
    ddl_policy   text DEFAULT 'warn',
    on_data_loss text DEFAULT 'stop',
    event_time_column text DEFAULT NULL,
    event_time_zone   text DEFAULT NULL,
    lateness_policy   text DEFAULT 'exact',
    allowed_lateness  interval DEFAULT interval '0',
    lateness_quantile double precision DEFAULT NULL,
    lateness_window   interval DEFAULT interval '7 days',
    period_zone       text DEFAULT 'UTC')
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    zone text;
    new_id bigint;
BEGIN
    PERFORM finalize_internal.check_table_name(table_name, 'sales.orders');
    IF EXISTS (SELECT FROM @extschema@.tracked_table t WHERE t.table_name = track_sharded.table_name
                                                        AND t.untracked_at IS NULL) THEN
        PERFORM finalize_internal.already_tracked(table_name);
    END IF;
    PERFORM finalize_internal.check_granularity(granularity, 'granularity');
    zone := finalize_internal.check_zone(period_zone, 'period_zone');
    PERFORM finalize_internal.check_ddl_policy(ddl_policy);
    PERFORM finalize_internal.check_on_data_loss(on_data_loss);
    PERFORM finalize_internal.require(lateness_policy, 'lateness_policy');
    PERFORM finalize_internal.require(allowed_lateness, 'allowed_lateness');
    PERFORM finalize_internal.require(lateness_window, 'lateness_window');
    IF event_time_column IS NULL
       AND (event_time_zone IS NOT NULL OR lateness_policy <> 'exact' OR allowed_lateness <> interval '0'
            OR lateness_quantile IS NOT NULL) THEN
        RAISE EXCEPTION 'lateness settings need an event_time_column'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A table without an event column is partitioned by commit time, which is exact: it has no lateness.',
                  HINT = 'Pass event_time_column => ''<captured date/time column>'' too.';
    END IF;
    PERFORM finalize_internal.check_event_time(event_time_column, event_time_zone, lateness_policy, allowed_lateness,
                                          lateness_quantile, lateness_window, granularity);
    BEGIN
        -- Lengths of time without days, as track_table keeps them.
        INSERT INTO @extschema@.tracked_table
            (table_name, kind, granularity, period_zone, ddl_policy, on_data_loss, created_by, event_time_column,
             event_time_zone, lateness_policy, allowed_lateness, lateness_quantile, lateness_window)
        VALUES (table_name, 'sharded', granularity, zone, ddl_policy, on_data_loss, caller, event_time_column,
                event_time_zone, lateness_policy, make_interval(secs => extract(epoch FROM allowed_lateness)),
                lateness_quantile, make_interval(secs => extract(epoch FROM lateness_window)))
        RETURNING tracked_table.table_id INTO new_id;
    EXCEPTION WHEN unique_violation THEN
        PERFORM finalize_internal.already_tracked(table_name);
    END;
    INSERT INTO @extschema@.watermark (table_id) VALUES (new_id);
    PERFORM finalize_internal.seal_catalog();
    RETURN new_id;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.track_sharded(
    table_name   text,
    granularity  interval DEFAULT interval '1 hour',
    ddl_policy   text DEFAULT 'warn',
    on_data_loss text DEFAULT 'stop',
    event_time_column text DEFAULT NULL,
    event_time_zone   text DEFAULT NULL,
    lateness_policy   text DEFAULT 'exact',
    allowed_lateness  interval DEFAULT interval '0',
    lateness_quantile double precision DEFAULT NULL,
    lateness_window   interval DEFAULT interval '7 days',
    period_zone       text DEFAULT 'UTC')
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.track_sharded(text, interval, text, text, text, text, text, interval,
                                              double precision, interval, text) IS
    'Track a lake table fed by many shards (the same SQL Server table in many databases): final for a period once every shard is; shards are added with finalize.add_shard';

-- Locks a sharded table for a change of its shards: its verdict
-- (_lock_tracked: its row, key share, then its watermark), the lock that
-- add_shard, drop_shard, alter_tracked_table and untrack_table all take on
-- it, so that they run one at a time. Returns its row as it is once
-- locked, never as it was read before: the policy alter_tracked_table
-- committed meanwhile is the one a new shard takes. A table untracked
-- meanwhile is an error naming it (a shard added to it would be left
-- tracked, with nothing that could remove it).
CREATE OR REPLACE FUNCTION finalize_internal.lock_sharded(table_id bigint, table_name text)
RETURNS @extschema@.tracked_table
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tt @extschema@.tracked_table := finalize_internal.lock_tracked(table_id, false);
BEGIN
    IF tt.table_id IS NULL OR tt.untracked_at IS NOT NULL THEN
        RAISE EXCEPTION 'sharded table "%" was untracked meanwhile', table_name
            USING ERRCODE = 'undefined_object',
                  DETAIL = 'Another transaction untracked it while this call waited for it; nothing was changed.',
                  HINT = 'Track it again with finalize.track_sharded() if it is still fed by its shards.';
    END IF;
    RETURN tt;
END
$$;

-- The body of finalize.add_shard: one more shard of a sharded table, the
-- SQL Server table source_table of server server_name, tracked as
-- <table_name>/<shard> with the sharded table's policy (track_table's
-- checks, the caller's USAGE on the server included) and its table-wide
-- consumers. Until the shard has a verdict of its own the sharded table's
-- verdict stands still; what was final stays final. Two shards of a table
-- may share a server (a database holding one schema per tenant, say), not
-- a source table: its changes would count twice. Returns the shard's id.
CREATE OR REPLACE FUNCTION finalize_internal.add_shard(
    caller name,
    table_name   text,
    shard        text,
    server_name  text,
    source_table text,
    start_from   text DEFAULT 'max_lsn')
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.sharded(table_name);
    wm @extschema@.watermark;
    shard_name text;
    parts text[];
    other text;
    new_id bigint;
    part @extschema@.tracked_table;
    c @extschema@.shard_consumer;
BEGIN
    PERFORM finalize_internal.check_shard_label(tt.table_name, shard);
    shard_name := tt.table_name || '/' || shard;
    IF length(shard_name) > 255 THEN
        RAISE EXCEPTION 'the name of shard "%" of sharded table "%" is longer than 255 characters', shard, tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('A shard is tracked as <sharded table>/<shard>, here %s characters.', length(shard_name)),
                  HINT = 'Choose a shorter label.';
    END IF;
    -- SQL Server's answer about the table, before any lock is taken (it may
    -- wait for the network).
    PERFORM finalize_internal.require(source_table, 'source_table');
    parts := finalize_internal.split_mssql_name(source_table, 'source_table');
    PERFORM finalize_internal.check_source_table((finalize_internal.tracking_server(caller, server_name)).oid,
                                            parts[1], parts[2]);
    -- Its verdict, so that shards are added and dropped one at a time, and
    -- its row again once locked: the policy the shard takes is the one
    -- committed last (alter_tracked_table), not the one read before.
    tt := finalize_internal.lock_sharded(tt.table_id, tt.table_name);
    IF EXISTS (SELECT FROM @extschema@.tracked_table t
                WHERE t.shard_of = tt.table_id AND t.shard = add_shard.shard AND t.untracked_at IS NULL) THEN
        RAISE EXCEPTION 'shard "%" of sharded table "%" already exists', shard, tt.table_name
            USING ERRCODE = 'duplicate_object',
                  HINT = format('Choose another label, or drop it first with finalize.drop_shard(%L, %L).', tt.table_name, shard);
    END IF;
    SELECT t.shard INTO other FROM @extschema@.tracked_table t
     WHERE t.shard_of = tt.table_id AND t.untracked_at IS NULL AND t.server_name = add_shard.server_name
       AND t.source_schema = parts[1] AND t.source_name = parts[2];
    IF FOUND THEN
        RAISE EXCEPTION 'shard "%" of sharded table "%" already reads %.% on server "%"', other, tt.table_name,
                        parts[1], parts[2], server_name
            USING ERRCODE = 'duplicate_object',
                  DETAIL = 'Each shard is one SQL Server table: two shards reading the same one would count its changes twice. A server may hold several shards of a table only in different source tables.',
                  HINT = 'Give this shard the server and table of its own database.';
    END IF;
    new_id := finalize_internal.track_table(caller, shard_name, server_name, source_table, tt.granularity, start_from,
                                       tt.ddl_policy, tt.on_data_loss, tt.event_time_column, tt.event_time_zone,
                                       tt.lateness_policy, tt.allowed_lateness, tt.lateness_quantile,
                                       tt.lateness_window, tt.period_zone, false);
    UPDATE @extschema@.tracked_table t SET shard_of = tt.table_id, shard = add_shard.shard WHERE t.table_id = new_id;
    INSERT INTO @extschema@.derived_input (table_id, input_id) VALUES (tt.table_id, new_id);
    -- The consumers of every shard are this one's too, from the start.
    SELECT t.* INTO part FROM @extschema@.tracked_table t WHERE t.table_id = new_id;
    FOR c IN SELECT x.* FROM @extschema@.shard_consumer x WHERE x.table_id = tt.table_id ORDER BY x.consumer LOOP
        PERFORM finalize_internal.insert_consumer(caller, part, c.consumer, c.required, c.reporter, c.reporter_name);
    END LOOP;
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    IF wm.finalized_until IS NOT NULL THEN
        RAISE NOTICE 'sharded table "%" is final until %; shard "%" holds it from now on', tt.table_name,
                     wm.finalized_until, shard
            USING DETAIL = 'The verdict waits for the shard''s first verdict, then moves only as far as every shard allows. Periods already final stay final (a verdict never moves back): what the shard committed in them must already be in the lake.';
    END IF;
    RETURN new_id;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.add_shard(
    table_name   text,
    shard        text,
    server_name  text,
    source_table text,
    start_from   text DEFAULT 'max_lsn')
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.add_shard(text, text, text, text, text) IS
    'Add a shard to a sharded table: the SQL Server table source_table of server server_name, tracked as <table_name>/<shard>; returns its id';

-- The body of finalize.drop_shard: the shard no longer feeds the sharded
-- table, whose verdict may then move on (never back). The shard is
-- untracked; its facts stay until retention removes them unless keep_facts
-- is false. Refused while another derived table uses the shard, and while
-- a loss of the shard is not acknowledged: dropping it would release the
-- sharded table's periods the loss holds.
CREATE OR REPLACE FUNCTION finalize_internal.drop_shard(caller name, table_name text, shard text, keep_facts boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.sharded(table_name);
    part @extschema@.tracked_table;
    users text[];
    before timestamptz;
    after timestamptz;
BEGIN
    PERFORM finalize_internal.require(shard, 'shard');
    PERFORM finalize_internal.require(keep_facts, 'keep_facts');
    tt := finalize_internal.lock_sharded(tt.table_id, tt.table_name);
    SELECT t.* INTO part FROM @extschema@.tracked_table t
     WHERE t.shard_of = tt.table_id AND t.shard = drop_shard.shard AND t.untracked_at IS NULL
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'sharded table "%" has no shard "%"', tt.table_name, left(shard, 63)
            USING ERRCODE = 'undefined_object',
                  HINT = format('Its shards are the rows of finalize.status with sharded_table = %L.', tt.table_name);
    END IF;
    users := ARRAY(SELECT u FROM unnest(finalize_internal.dependents(part.table_id)) AS u WHERE u <> tt.table_name);
    IF cardinality(users) > 0 THEN
        RAISE EXCEPTION 'shard "%" of sharded table "%" is an input of derived %', shard, tt.table_name,
                        (SELECT CASE WHEN count(*) > 1 THEN 'tables ' ELSE 'table ' END
                                || string_agg(format('"%s"', u), ', ') FROM unnest(users) AS u)
            USING ERRCODE = 'dependent_objects_still_exist',
                  DETAIL = 'A derived table is final only as far as its inputs are: without this shard its verdict would stop for ever.',
                  HINT = 'Untrack those derived tables first.';
    END IF;
    IF finalize_internal.has_open_loss(part.table_id) THEN
        RAISE EXCEPTION 'shard "%" of sharded table "%" has a loss that is not acknowledged', shard, tt.table_name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'The loss holds periods of the sharded table; dropping the shard would release them while the lake may still miss its changes.',
                  HINT = format('Acknowledge the loss on the shard first (finalize.explain_verdict(%L) names the call), once the lake''s copy was repaired or the loss accepted, then drop it.',
                                part.table_name);
    END IF;
    SELECT w.finalized_until INTO before FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    DELETE FROM @extschema@.derived_input d WHERE d.table_id = tt.table_id AND d.input_id = part.table_id;
    -- Nothing is watched for an untracked table: its incidents end here.
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.table_id = part.table_id AND a.state <> 'resolved';
    IF keep_facts THEN
        UPDATE @extschema@.tracked_table t SET untracked_at = now() WHERE t.table_id = part.table_id;
    ELSE
        DELETE FROM @extschema@.tracked_table t WHERE t.table_id = part.table_id;
    END IF;
    PERFORM finalize_internal.refresh_loss_blocked(tt.table_id);
    after := finalize_internal.advance(tt.table_id);
    IF after IS DISTINCT FROM before THEN
        RAISE NOTICE 'sharded table "%" is now final until % (it was until %): shard "%" no longer holds it',
                     tt.table_name, after, coalesce(before::text, 'nothing'), shard;
    END IF;
    IF NOT EXISTS (SELECT FROM @extschema@.tracked_table t WHERE t.shard_of = tt.table_id AND t.untracked_at IS NULL) THEN
        RAISE NOTICE 'sharded table "%" has no shard left', tt.table_name
            USING DETAIL = 'Its verdict stays where it is and moves again once a shard is added and has a verdict.';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.drop_shard(table_name text, shard text, keep_facts boolean DEFAULT true)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.drop_shard(text, text, boolean) IS
    'Remove a shard from a sharded table (its verdict may then move on, never back) and untrack it; refused while a loss of the shard is not acknowledged';

-- The active shards of a sharded table, in id order.
CREATE OR REPLACE FUNCTION finalize_internal.shards(table_id bigint)
RETURNS SETOF @extschema@.tracked_table
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT t.* FROM @extschema@.tracked_table t
     WHERE t.shard_of = shards.table_id AND t.untracked_at IS NULL
     ORDER BY t.table_id;
END;

-- add_consumer on a sharded table: the consumer of every shard, now and
-- when one is added, so that no shard is ever final before the pipeline
-- applied it. A shard that has a consumer of that name already (declared
-- on it alone) is an error naming it.
CREATE OR REPLACE FUNCTION finalize_internal.add_sharded_consumer(caller name, tt @extschema@.tracked_table, consumer text,
                                                  required boolean, reporter regrole, reporter_name name)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    part @extschema@.tracked_table;
    taken text;
BEGIN
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    SELECT t.table_name INTO taken FROM finalize_internal.shards(tt.table_id) AS t
      JOIN @extschema@.consumer c ON c.table_id = t.table_id AND c.consumer = add_sharded_consumer.consumer
     ORDER BY t.table_id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'consumer "%" already exists on shard "%" of sharded table "%"', consumer, taken, tt.table_name
            USING ERRCODE = 'duplicate_object',
                  DETAIL = 'A consumer declared on a sharded table is declared on each of its shards; this one was declared on the shard alone.',
                  HINT = format('Name the consumer otherwise, or drop it from the shard first with finalize.drop_consumer(%L, %L).',
                                taken, consumer);
    END IF;
    BEGIN
        INSERT INTO @extschema@.shard_consumer (table_id, consumer, required, reporter, reporter_name, created_by)
        VALUES (tt.table_id, consumer, required, reporter, reporter_name, caller);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'consumer "%" of sharded table "%" already exists', consumer, tt.table_name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Change it with finalize.alter_consumer() (dropping and adding it again would let the verdict move past what it applied).';
    END;
    FOR part IN SELECT t.* FROM finalize_internal.shards(tt.table_id) AS t LOOP
        PERFORM finalize_internal.insert_consumer(caller, part, consumer, required, reporter, reporter_name);
    END LOOP;
END
$$;

-- alter_consumer on a sharded table: the same change on the consumer of
-- every shard (reset forgets what each reported); made optional, the
-- shards' verdicts and then the sharded table's move at once.
CREATE OR REPLACE FUNCTION finalize_internal.alter_sharded_consumer(tt @extschema@.tracked_table, consumer text, required boolean,
                                                    reporter regrole, reporter_name name, reset boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    part @extschema@.tracked_table;
BEGIN
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    UPDATE @extschema@.shard_consumer c
       SET required = coalesce(alter_sharded_consumer.required, c.required),
           reporter = coalesce(alter_sharded_consumer.reporter, c.reporter),
           reporter_name = coalesce(alter_sharded_consumer.reporter_name, c.reporter_name)
     WHERE c.table_id = tt.table_id AND c.consumer = consumer;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" of sharded table "%" does not exist', consumer, tt.table_name
            USING ERRCODE = 'undefined_object',
                  HINT = format('Declare it with finalize.add_consumer(%L, %L), or name the shard whose consumer it is.',
                                tt.table_name, consumer);
    END IF;
    FOR part IN SELECT t.* FROM finalize_internal.shards(tt.table_id) AS t LOOP
        PERFORM finalize_internal.lock_tracked(part.table_id);
        UPDATE @extschema@.consumer c
           SET required = coalesce(alter_sharded_consumer.required, c.required),
               reporter = coalesce(alter_sharded_consumer.reporter, c.reporter),
               reporter_name = coalesce(alter_sharded_consumer.reporter_name, c.reporter_name)
         WHERE c.table_id = part.table_id AND c.consumer = consumer;
        IF reset THEN
            PERFORM finalize_internal.forget_report(part, consumer);
        END IF;
    END LOOP;
    IF reset THEN
        RAISE NOTICE 'consumer "%" of every shard of sharded table "%" starts again from nothing', consumer, tt.table_name
            USING DETAIL = 'What is final stays final; each shard''s verdict waits for the consumer''s next report for it.';
    END IF;
    IF reporter IS NOT NULL THEN
        PERFORM finalize_internal.reporter_notice(reporter, tt, consumer);
    END IF;
    IF required IS NOT NULL AND NOT required THEN
        FOR part IN SELECT t.* FROM finalize_internal.shards(tt.table_id) AS t LOOP
            PERFORM finalize_internal.advance(part.table_id);
        END LOOP;
        PERFORM finalize_internal.advance(tt.table_id);
    END IF;
END
$$;

-- drop_consumer on a sharded table: forgets the consumer of every shard;
-- the shards' verdicts and then the sharded table's may move at once, and
-- a NOTICE says how far. Returns whether it was declared.
CREATE OR REPLACE FUNCTION finalize_internal.drop_sharded_consumer(tt @extschema@.tracked_table, consumer text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    part @extschema@.tracked_table;
    before timestamptz;
    after timestamptz;
BEGIN
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    SELECT w.finalized_until INTO before FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    DELETE FROM @extschema@.shard_consumer c WHERE c.table_id = tt.table_id AND c.consumer = consumer;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    FOR part IN SELECT t.* FROM finalize_internal.shards(tt.table_id) AS t LOOP
        PERFORM finalize_internal.lock_tracked(part.table_id);
        DELETE FROM @extschema@.consumer c WHERE c.table_id = part.table_id AND c.consumer = consumer;
        UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
         WHERE a.kind IN ('consumer_stalled', 'consumer_locked', 'report_ahead')
           AND a.table_id = part.table_id AND a.subject = consumer AND a.state <> 'resolved';
        PERFORM finalize_internal.advance(part.table_id);
    END LOOP;
    after := finalize_internal.advance(tt.table_id);
    IF after IS DISTINCT FROM before THEN
        RAISE NOTICE 'table "%" is now final until % (it was until %): consumer "%" no longer holds it',
                     tt.table_name, after, coalesce(before::text, 'nothing'), consumer
            USING DETAIL = 'The periods in between are final whether or not the consumer applied them.';
    END IF;
    RETURN true;
END
$$;

-- Refuses to change or drop, on one shard, a consumer declared on its
-- sharded table: it must hold every shard alike (fn names the call that
-- was refused, for the hint).
CREATE OR REPLACE FUNCTION finalize_internal.refuse_shard_consumer(tt @extschema@.tracked_table, consumer text, fn text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    sharded text;
BEGIN
    IF tt.shard_of IS NULL
       OR NOT EXISTS (SELECT FROM @extschema@.shard_consumer c WHERE c.table_id = tt.shard_of AND c.consumer = consumer) THEN
        RETURN;
    END IF;
    SELECT p.table_name INTO sharded FROM @extschema@.tracked_table p WHERE p.table_id = tt.shard_of;
    RAISE EXCEPTION 'consumer "%" of shard "%" is declared on its sharded table "%"', consumer, tt.table_name, sharded
        USING ERRCODE = 'wrong_object_type',
              DETAIL = 'A consumer declared on a sharded table holds every shard alike; on one shard it can only be reset (alter_consumer(..., reset => true)).',
              HINT = format('Call finalize.%s(%L, %L%s) on the sharded table.', fn, sharded, consumer,
                            CASE WHEN fn = 'drop_consumer' THEN '' ELSE ', ...' END);
END
$$;
-- What the worker writes besides ranges: events that stop a verdict, why a
-- table could not be read, and what it saw of its source. Only superusers
-- (the worker) may call these; none is granted to a role.
--
-- NOTIFY channel "finalize_alert" (through _alert): one JSON payload when
-- something needs a person: {"alert": "data_loss" | "schema_blocked" |
-- "capture_stalled" | "capture_resumed" | "commit_time_ahead" |
-- "clock_skew" | "timezone_mismatch" | "consumer_stalled", ...}.

-- The active tables of a source, with what the worker needs to plan them
-- (one read per cycle); never a derived table, which has no source.
CREATE OR REPLACE FUNCTION finalize_internal.source_tables(server_name text)
RETURNS TABLE (table_id bigint, table_name text, source_schema text, source_name text,
               capture_instance text, start_at_capture boolean, offset_lsn text, resuming boolean,
               ddl_block boolean, auto_resume boolean, offset_commit_time timestamptz,
               schema_ack_lsn text, last_loss timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT t.table_id, t.table_name, t.source_schema, t.source_name, t.capture_instance,
           t.start_from = 'capture_start', w.offset_lsn, t.state = 'resuming',
           t.ddl_policy = 'block', t.on_data_loss = 'resume', w.offset_commit_time,
           w.schema_ack_lsn,
           (SELECT max(f.recorded_at) FROM @extschema@.fact f
             WHERE f.table_id = t.table_id AND f.event = 'data_loss')
      FROM @extschema@.tracked_table t
      JOIN @extschema@.watermark w ON w.table_id = t.table_id
     WHERE t.server_name = source_tables.server_name AND t.untracked_at IS NULL
       AND t.kind = 'source' AND t.state IN ('active', 'resuming')
     ORDER BY t.table_id;
END;

-- The foreign servers of finalize_mssql that have tracked tables: the
-- sources the scheduler keeps a worker for.
CREATE OR REPLACE FUNCTION finalize_internal.wanted_sources()
RETURNS TABLE (serverid oid, server_name text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT DISTINCT s.oid, s.srvname::text
      FROM @extschema@.tracked_table t
      JOIN pg_foreign_server s ON s.srvname = t.server_name
      JOIN pg_foreign_data_wrapper w ON w.oid = s.srvfdw
     WHERE t.untracked_at IS NULL AND w.fdwname = 'finalize_mssql';
END;

-- Whether a table is still tracked, locking its verdict for the worker's
-- write: the worker asks before it records anything for a table, so one
-- untracked meanwhile (perhaps tracked again under a new id) gets nothing.
CREATE OR REPLACE FUNCTION finalize_internal.still_tracked(table_id bigint)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
RETURN (finalize_internal.lock_tracked(table_id, false)).table_id IS NOT NULL;

-- Records an event fact (data loss, ...) and, when new_state is given, moves
-- the table to that state. Never touches the verdict or the offset.
CREATE OR REPLACE FUNCTION finalize_internal.record_event(
    table_id         bigint,
    event            text,
    start_lsn        text,
    end_lsn          text,
    capture_instance text,
    detail           jsonb,
    new_state        text DEFAULT NULL,
    state_detail     text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.lock_tracked(record_event.table_id);
BEGIN
    INSERT INTO @extschema@.fact (table_id, kind, event, start_lsn, end_lsn, capture_instance, detail)
    VALUES (record_event.table_id, 'event', event,
            finalize_internal.lsn_arg(start_lsn, 'start_lsn'), finalize_internal.lsn_arg(end_lsn, 'end_lsn'),
            capture_instance, detail);
    IF new_state IS NOT NULL THEN
        PERFORM finalize_internal.lock_tracked_row(record_event.table_id);
        UPDATE @extschema@.tracked_table t
           SET state = new_state, state_detail = record_event.state_detail, state_since = now()
         WHERE t.table_id = record_event.table_id;
    END IF;
    -- resume_table acknowledges this LSN, whatever happens to the fact.
    IF event = 'schema_blocked' THEN
        UPDATE @extschema@.watermark w
           SET blocked_ddl_lsn = finalize_internal.lsn_arg(end_lsn, 'end_lsn')
         WHERE w.table_id = record_event.table_id;
    END IF;
    IF event IN ('data_loss', 'schema_blocked') THEN
        PERFORM finalize_internal.alert(jsonb_build_object(
            'alert', event,
            'table', tt.table_name,
            'capture_instance', capture_instance, 'start_lsn', start_lsn, 'end_lsn', end_lsn,
            'detail', state_detail));
        PERFORM finalize_internal.raise_alert(event, 'critical', tt.table_id, tt.server_name, '',
                                         coalesce(state_detail,
                                                  format('Changes of table "%s" from LSN %s to %s were lost before finalize read them (%s); the periods they touch are not final until finalize.acknowledge_loss() covers them.',
                                                         tt.table_name, coalesce(detail ->> 'lost_from_lsn', start_lsn),
                                                         coalesce(detail ->> 'lost_to_lsn', end_lsn),
                                                         coalesce(detail ->> 'cause', event))),
                                         detail);
    END IF;
END
$$;

-- A commit-time table's changes that the worker read stamped in periods
-- already final under verdict_before (SQL Server's clock went back by
-- more than the source's clock_tolerance): late data, kept as an
-- event-time table's late rows are (late_period, listed by
-- finalize.late_data, read by the release gate's late_data check): per
-- range of the write (after start_lsn, up to end_lsn) that holds any,
-- the span of the final periods its commits lie in, and its changes (the
-- whole range's when it also holds commits of later periods). Returns
-- how many.
CREATE OR REPLACE FUNCTION finalize_internal.store_late_commits(tt @extschema@.tracked_table, start_lsn @extschema@.lsn,
                                                end_lsn @extschema@.lsn, verdict_before timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    late bigint;
BEGIN
    WITH r AS (
        SELECT @extschema@.period_start(f.first_commit_time, tt.granularity, tt.period_zone) AS p_start,
               @extschema@.period_end(LEAST(coalesce(f.last_commit_time, f.first_commit_time),
                                            verdict_before - interval '1 microsecond'),
                                      tt.granularity, tt.period_zone) AS p_end,
               f.inserts + f.updates + f.deletes AS changes
          FROM @extschema@.fact f
         WHERE f.table_id = tt.table_id AND f.kind = 'range'
           AND (start_lsn IS NULL OR f.end_lsn > start_lsn) AND f.end_lsn <= end_lsn
           AND f.inserts + f.updates + f.deletes > 0 AND f.first_commit_time < verdict_before),
    stored AS (
        INSERT INTO @extschema@.late_period AS l (table_id, event_period, rows, first_seen, last_seen,
                                                  verdict_at_arrival, period_end)
        SELECT tt.table_id, r.p_start, sum(r.changes), now(), now(), verdict_before, max(r.p_end)
          FROM r GROUP BY r.p_start
        ON CONFLICT (table_id, event_period) DO UPDATE
           SET rows = l.rows + EXCLUDED.rows, last_seen = EXCLUDED.last_seen,
               period_end = GREATEST(l.period_end, EXCLUDED.period_end)
        RETURNING 1)
    SELECT coalesce(sum(r.changes), 0) INTO late FROM r;
    RETURN late;
END
$$;

-- SQL Server's clock went back across a period boundary, as the worker read
-- it in the ranges of a table it has just recorded (ending at end_lsn):
-- commits stamped from first_time on came after commits stamped up to
-- until_time in a later period (the previous read's, or earlier ones of the
-- same read), and, with ran_ahead, in a period the source verdict had
-- already called final (the clock went back by more than the source's
-- clock_tolerance). Their counts per period are open to doubt: an event
-- fact (clock_stepped_back) makes the periods from first_time's to
-- until_time's inexact in changes_by_period, and, with incident, an
-- incident says so, critical when a verdict ran ahead (a partition
-- published before may lack those commits). Without incident the worker
-- could not tell a step back from the local times a DST fall-back repeats:
-- the periods are marked all the same. verdict_before is the table's
-- source verdict before the write: on a commit-time table the changes of
-- the write's ranges (after start_lsn) stamped before it are late data
-- (_store_late_commits), as rows landing in a final event period are; the
-- release gate refuses a partition of those periods built before now,
-- and any while the table's reads have not passed until_time (more
-- commits may be stamped there: _late_data_problem).
CREATE OR REPLACE FUNCTION finalize_internal.record_clock_step(table_id bigint, end_lsn text, first_time timestamptz,
                                               until_time timestamptz, ran_ahead boolean, incident boolean,
                                               start_lsn text, verdict_before timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.lock_tracked(record_clock_step.table_id);
    p_from timestamptz := @extschema@.period_start(first_time, tt.granularity, tt.period_zone);
    p_to timestamptz := @extschema@.period_end(GREATEST(first_time, until_time), tt.granularity, tt.period_zone);
    verdict timestamptz := coalesce(verdict_before, (SELECT w.source_until FROM @extschema@.watermark w
                                                      WHERE w.table_id = tt.table_id));
    late bigint := 0;
    detail jsonb;
    message text;
BEGIN
    IF ran_ahead AND tt.event_time_column IS NULL AND verdict_before IS NOT NULL THEN
        late := finalize_internal.store_late_commits(tt, finalize_internal.lsn_arg(start_lsn, 'start_lsn'),
                                                finalize_internal.lsn_arg(end_lsn, 'end_lsn'), verdict_before);
    END IF;
    detail := jsonb_build_object('from', finalize_internal.utc_iso(p_from), 'to', finalize_internal.utc_iso(p_to),
                                 'commit_time', finalize_internal.utc_iso(first_time),
                                 'after_commit_time', finalize_internal.utc_iso(until_time),
                                 'ran_ahead', ran_ahead, 'incident', incident, 'end_lsn', end_lsn,
                                 'late_rows', late);
    message := CASE WHEN ran_ahead
        THEN format('SQL Server''s clock went back: commits of table "%s" were stamped %s, in a period already final; the counts of its periods from %s to %s are not exact any more, and a partition of them released before may lack those commits (%s late row(s) so far, see finalize.late_data; the release gate refuses a partition of them built before they were read): check and republish it. Every verdict holds back by the clock_tolerance of server "%s", which this step exceeded.',
                    tt.table_name, finalize_internal.utc_iso(first_time), finalize_internal.utc_iso(p_from),
                    finalize_internal.utc_iso(p_to), late, tt.server_name)
        ELSE format('SQL Server''s clock went back across a period boundary: commits of table "%s" were stamped %s, after commits stamped up to %s; no verdict ran ahead (the clock_tolerance of server "%s" absorbed the step), but the counts of its periods from %s to %s are not exact.',
                    tt.table_name, finalize_internal.utc_iso(first_time), finalize_internal.utc_iso(until_time),
                    tt.server_name, finalize_internal.utc_iso(p_from), finalize_internal.utc_iso(p_to)) END;
    INSERT INTO @extschema@.fact (table_id, kind, end_lsn, end_commit_time, event, detail)
    VALUES (tt.table_id, 'event', finalize_internal.lsn_arg(end_lsn, 'end_lsn'), until_time, 'clock_stepped_back',
            detail);
    IF NOT incident THEN
        RETURN;
    END IF;
    PERFORM finalize_internal.alert(jsonb_build_object('alert', 'clock_stepped_back', 'table', tt.table_name,
                                                  'server', tt.server_name, 'ran_ahead', ran_ahead,
                                                  'verdict', finalize_internal.utc_iso(verdict),
                                                  'from', finalize_internal.utc_iso(p_from),
                                                  'to', finalize_internal.utc_iso(p_to), 'message', message));
    PERFORM finalize_internal.raise_alert('clock_stepped_back', CASE WHEN ran_ahead THEN 'critical' ELSE 'warning' END,
                                     tt.table_id, tt.server_name, finalize_internal.utc_iso(p_from), message, detail);
END
$$;

-- SQL Server's clock was found at clock_at, behind commit times the worker
-- of server_name had read by more than its clock_tolerance (the source is
-- now held with commit_time_ahead, and nothing is read until
-- release_source): commits may be stamped in any period from the step's
-- on, periods already final included. The step came after the source's
-- last good reading of the clock (its last successful cycle, at
-- last_success - cycle_time at the earliest), and the clock has run since
-- then: commits made after the step are stamped from clock_at minus that
-- time on, which may be a period before clock_at's (a step back to 09:59:50
-- found at 10:00:20 stamps commits in hour 09). Each of its tables with
-- an offset later than that records a clock_stepped_back event from
-- it to its offset's commit time (ran_ahead when a final period is
-- among them), so that changes_by_period calls those periods inexact at
-- once, and a release that would confirm an empty partition or reconcile a
-- count is refused while the source is held, not only once the commits
-- are read after release_source (once: a hold that starts again, the
-- clock still behind, finds them marked). The source's commit_time_ahead
-- incident says what happened; no incident per table. No late data
-- either: the hold reads no commit, and those read before it were read
-- before their periods were final (no verdict_before, so
-- _store_late_commits does not count them); the commits stamped in final
-- periods are counted when the worker reads them after release_source.
CREATE OR REPLACE FUNCTION finalize_internal.clock_went_back(server_name text, clock_at timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    since interval := (SELECT greatest(now() - (st.last_success - coalesce(st.cycle_time, interval '0')),
                                       interval '0')
                         FROM @extschema@.source_status st
                        WHERE st.server_name = clock_went_back.server_name);
    stamped_from timestamptz := clock_at - coalesce(since, interval '0');
BEGIN
    PERFORM finalize_internal.record_clock_step(t.table_id, w.offset_lsn::text, stamped_from, w.offset_commit_time,
                                           stamped_from < w.source_until, false, NULL, NULL)
       FROM @extschema@.tracked_table t
       JOIN @extschema@.watermark w ON w.table_id = t.table_id
      WHERE t.server_name = clock_went_back.server_name AND t.kind = 'source' AND t.untracked_at IS NULL
        AND w.offset_lsn IS NOT NULL AND w.offset_commit_time > stamped_from
        -- not again for a hold that starts again after release_source
        AND NOT EXISTS (SELECT FROM @extschema@.fact e
                         WHERE e.table_id = t.table_id AND e.event = 'clock_stepped_back'
                           AND e.end_lsn = w.offset_lsn
                           AND (e.detail ->> 'commit_time')::timestamptz <= stamped_from
                           AND (e.detail ->> 'after_commit_time')::timestamptz >= w.offset_commit_time)
      ORDER BY t.table_id;
END
$$;

-- Restarts a table after a data loss, at new_offset (just below its capture
-- instance's min LSN, whose commit time is new_offset_time): records the
-- lost LSN range as a "resumed" event and as a loss (the commit times from
-- the offset before the restart to lost_until, the latest instant the lost
-- commits may have: the worker reads the local time of a fall-back hour
-- both ways), moves the offset and makes the table active again. The verdict
-- is untouched: it moves again with the next range recorded, but the
-- periods of the loss stay not final, here and in the derived tables that
-- use this one, until finalize.acknowledge_loss() covers them. The lost
-- commit times begin clock_tolerance (the source's) before the old
-- offset's: after SQL Server's clock was stepped back by up to that much,
-- a lost commit may carry an earlier time than the offset's.
CREATE OR REPLACE FUNCTION finalize_internal.resume_after_loss(
    table_id         bigint,
    new_offset       text,
    new_offset_time  timestamptz,
    lost_until       timestamptz,
    capture_instance text,
    automatic        boolean,
    detail           jsonb,
    clock_tolerance  interval DEFAULT interval '0')
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    wm @extschema@.watermark;
    requested_by name;
BEGIN
    PERFORM finalize_internal.lock_tracked(resume_after_loss.table_id);
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = resume_after_loss.table_id;
    wm.offset_commit_time := finalize_internal.unread_from(wm.offset_commit_time, clock_tolerance);
    SELECT f.detail ->> 'by' INTO requested_by FROM @extschema@.fact f
     WHERE f.table_id = resume_after_loss.table_id AND f.event = 'resume_requested'
     ORDER BY f.fact_id DESC LIMIT 1;
    INSERT INTO @extschema@.fact (table_id, kind, event, start_lsn, end_lsn, capture_instance, detail)
    VALUES (resume_after_loss.table_id, 'event', 'resumed', wm.offset_lsn,
            finalize_internal.lsn_arg(new_offset, 'new_offset'), capture_instance,
            detail || jsonb_build_object(
                'after', 'data_loss',
                'by', CASE WHEN automatic THEN 'finalize worker (on_data_loss = resume)' ELSE requested_by END,
                'lost_from_lsn', wm.offset_lsn, 'lost_to_lsn', new_offset,
                'lost_from_time', wm.offset_commit_time, 'lost_to_time', lost_until));
    UPDATE @extschema@.watermark w
       SET offset_lsn = finalize_internal.lsn_arg(new_offset, 'new_offset'),
           offset_commit_time = new_offset_time,
           recorded_at = now()
     WHERE w.table_id = resume_after_loss.table_id;
    PERFORM finalize_internal.lock_tracked_row(resume_after_loss.table_id);
    UPDATE @extschema@.tracked_table t
       SET state = 'active', state_detail = NULL, state_since = now(),
           capture_instance = coalesce(resume_after_loss.capture_instance, t.capture_instance)
     WHERE t.table_id = resume_after_loss.table_id;
    PERFORM finalize_internal.record_loss(resume_after_loss.table_id, wm, new_offset, lost_until);
END
$$;

-- Records the loss of a restart: the commit times from the offset before
-- it (or -infinity) to the restart's (or infinity), in either order, and
-- the lost LSN range, linked to the table's latest data_loss fact; then
-- flags the table and its derived tables. clock_timestamp(): only an
-- acknowledgement made after this covers it (see _acked). On a table
-- partitioned by event time the loss holds the event times the lost rows
-- may have: from its start less the lateness allowance (rows later than
-- that are late data by the table's own policy) to its end plus
-- finalize.max_clock_skew (an event stamped after its commit), so that
-- every period the loss touches, and every acknowledgement it needs, is
-- an event period; commit_from keeps its commit-time start, from which
-- _advance reaches further back when the allowance grows.
CREATE OR REPLACE FUNCTION finalize_internal.record_loss(table_id bigint, prior @extschema@.watermark,
                                         new_offset text, lost_until timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    lost_from timestamptz := coalesce(prior.offset_commit_time, '-infinity');
    lost_to timestamptz := coalesce(lost_until, 'infinity');
    tt @extschema@.tracked_table;
    lo timestamptz;
BEGIN
    SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = record_loss.table_id;
    IF tt.event_time_column IS NOT NULL THEN
        lo := LEAST(lost_from, lost_to);
        lost_to := GREATEST(lost_from, lost_to);
        lost_from := coalesce(finalize_internal.instant_minus(lo, GREATEST(tt.allowed_lateness, prior.event_allowance)),
                              '-infinity');
        IF isfinite(lost_to) THEN
            lost_to := lost_to + finalize_internal.max_clock_skew();
        END IF;
    END IF;
    INSERT INTO @extschema@.loss (table_id, fact_id, lost_from, lost_to, from_lsn, to_lsn, created_at, commit_from)
    VALUES (table_id,
            (SELECT max(f.fact_id) FROM @extschema@.fact f
              WHERE f.table_id = record_loss.table_id AND f.event = 'data_loss'),
            LEAST(lost_from, lost_to), GREATEST(lost_from, lost_to),
            prior.offset_lsn, finalize_internal.lsn_arg(new_offset, 'new_offset'), clock_timestamp(), lo);
    PERFORM finalize_internal.refresh_loss_blocked(table_id);
END
$$;

-- Sets (or clears, with NULL) why the worker could not read or record a
-- table; writes only when something changed, and never for a table that is
-- gone.
CREATE OR REPLACE FUNCTION finalize_internal.set_condition(table_id bigint, condition text, detail text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    IF condition IS NULL THEN
        DELETE FROM @extschema@.table_condition c WHERE c.table_id = set_condition.table_id;
        PERFORM finalize_internal.table_alerts(set_condition.table_id, NULL, NULL, NULL);
        RETURN;
    END IF;
    INSERT INTO @extschema@.table_condition AS c (table_id, condition, detail)
    SELECT t.table_id, set_condition.condition, set_condition.detail
      FROM @extschema@.tracked_table t
     WHERE t.table_id = set_condition.table_id AND t.untracked_at IS NULL
    ON CONFLICT ON CONSTRAINT table_condition_pkey DO UPDATE
       SET condition = excluded.condition,
           detail = excluded.detail,
           since = CASE WHEN c.condition = excluded.condition THEN c.since ELSE now() END
     WHERE (c.condition, c.detail) IS DISTINCT FROM (excluded.condition, excluded.detail);
    PERFORM finalize_internal.table_alerts(c.table_id, c.condition, c.detail, c.since)
       FROM @extschema@.table_condition c WHERE c.table_id = set_condition.table_id;
END
$$;

-- Remembers the capture instance the worker follows for a table.
CREATE OR REPLACE FUNCTION finalize_internal.set_capture_instance(table_id bigint, capture_instance text)
RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT finalize_internal.lock_tracked_row(t.table_id) FROM @extschema@.tracked_table t
     WHERE t.table_id = set_capture_instance.table_id AND t.untracked_at IS NULL
       AND t.capture_instance IS DISTINCT FROM set_capture_instance.capture_instance;
    UPDATE @extschema@.tracked_table t
       SET capture_instance = set_capture_instance.capture_instance
     WHERE t.table_id = set_capture_instance.table_id AND t.untracked_at IS NULL
       AND t.capture_instance IS DISTINCT FROM set_capture_instance.capture_instance;
END;

-- A cycle that read the source: what it saw. condition is ok, or
-- capture_stalled (with a message) when the commit time of max LSN lags
-- SQL Server's clock by more than the source's threshold; entering and
-- leaving that condition sends an alert.
CREATE OR REPLACE FUNCTION finalize_internal.source_ok(
    server_name  text,
    worker_pid   integer,
    max_lsn      text,
    max_lsn_time timestamptz,
    server_time  timestamptz,
    condition    text DEFAULT 'ok',
    message      text DEFAULT NULL,
    cycle_started timestamptz DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    previous text;
    since timestamptz;
    took interval := clock_timestamp() - cycle_started;
BEGIN
    SELECT s.condition INTO previous FROM @extschema@.source_status s
     WHERE s.server_name = source_ok.server_name FOR UPDATE;
    INSERT INTO @extschema@.source_status AS s
        (server_name, worker_pid, condition, condition_since, last_poll, last_success, failures, cycles,
         next_attempt, max_lsn, max_lsn_time, max_lsn_changed, server_time, clock_skew, last_error, last_error_at,
         cycle_time)
    VALUES (source_ok.server_name, source_ok.worker_pid, condition, now(), now(), now(), 0, 1,
            NULL, source_ok.max_lsn, source_ok.max_lsn_time, now(), source_ok.server_time,
            source_ok.server_time - now(), message, CASE WHEN message IS NOT NULL THEN now() END, took)
    ON CONFLICT ON CONSTRAINT source_status_pkey DO UPDATE
       SET worker_pid = excluded.worker_pid,
           condition = excluded.condition,
           condition_since = CASE WHEN s.condition = excluded.condition THEN s.condition_since ELSE now() END,
           last_poll = now(),
           last_success = now(),
           last_error = coalesce(excluded.last_error, s.last_error),
           last_error_at = coalesce(excluded.last_error_at, s.last_error_at),
           failures = 0,
           cycles = s.cycles + 1,
           next_attempt = NULL,
           max_lsn = excluded.max_lsn,
           max_lsn_time = excluded.max_lsn_time,
           max_lsn_changed = CASE WHEN s.max_lsn IS DISTINCT FROM excluded.max_lsn
                                    OR s.max_lsn_time IS DISTINCT FROM excluded.max_lsn_time
                                  THEN now() ELSE s.max_lsn_changed END,
           server_time = excluded.server_time,
           clock_skew = excluded.clock_skew,
           cycle_time = excluded.cycle_time
    RETURNING s.condition_since INTO since;
    IF condition = 'capture_stalled' AND previous IS DISTINCT FROM 'capture_stalled' THEN
        PERFORM finalize_internal.alert(jsonb_build_object('alert', 'capture_stalled', 'server', server_name,
            'max_lsn', max_lsn, 'max_lsn_time', max_lsn_time, 'server_time', server_time, 'detail', message));
    ELSIF condition = 'ok' AND previous = 'capture_stalled' THEN
        PERFORM finalize_internal.alert(jsonb_build_object('alert', 'capture_resumed', 'server', server_name,
            'max_lsn', max_lsn, 'max_lsn_time', max_lsn_time));
    END IF;
    PERFORM finalize_internal.source_alerts(server_name, condition, message, since);
END
$$;

-- A cycle that could not read the source: why, and when it tries again.
-- Conditions that say SQL Server's times cannot be trusted (commit times
-- ahead of its clock, a clock far ahead of PostgreSQL's, a zone that
-- disagrees with the timezone option) stop every verdict of the source: the
-- first cycle that finds one sends an alert. Commit times ahead of the clock
-- also hold the source until finalize.release_source(): the check sees them
-- only while capture lags less than they lead, so a later cycle that does
-- not see them proves nothing.
CREATE OR REPLACE FUNCTION finalize_internal.source_failed(
    server_name  text,
    worker_pid   integer,
    condition    text,
    error        text,
    next_attempt timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    previous text;
BEGIN
    SELECT s.condition INTO previous FROM @extschema@.source_status s
     WHERE s.server_name = source_failed.server_name FOR UPDATE;
    INSERT INTO @extschema@.source_status AS s
        (server_name, worker_pid, condition, condition_since, last_poll, last_error, last_error_at,
         failures, cycles, next_attempt)
    VALUES (source_failed.server_name, source_failed.worker_pid, source_failed.condition, now(), now(),
            source_failed.error, now(), 1, CASE WHEN source_failed.condition = 'no_worker' THEN 0 ELSE 1 END,
            source_failed.next_attempt)
    ON CONFLICT ON CONSTRAINT source_status_pkey DO UPDATE
       SET worker_pid = excluded.worker_pid,
           condition = excluded.condition,
           condition_since = CASE WHEN s.condition = excluded.condition THEN s.condition_since ELSE now() END,
           last_poll = now(),
           last_error = excluded.last_error,
           last_error_at = now(),
           failures = s.failures + 1,
           cycles = s.cycles + CASE WHEN excluded.condition = 'no_worker' THEN 0 ELSE 1 END,
           next_attempt = excluded.next_attempt;
    IF condition = 'commit_time_ahead' THEN
        UPDATE @extschema@.source_status s
           SET held_by = condition, held_since = coalesce(s.held_since, now())
         WHERE s.server_name = source_failed.server_name;
    END IF;
    IF condition IN ('commit_time_ahead', 'clock_skew', 'timezone_mismatch')
       AND previous IS DISTINCT FROM condition THEN
        PERFORM finalize_internal.alert(jsonb_build_object('alert', condition, 'server', server_name,
            'detail', error));
    END IF;
    PERFORM finalize_internal.source_alerts(server_name, condition, error,
                                       (SELECT s.condition_since FROM @extschema@.source_status s
                                         WHERE s.server_name = source_failed.server_name));
END
$$;

-- Why a source is held, or NULL: read by its worker before every cycle.
CREATE OR REPLACE FUNCTION finalize_internal.source_hold(server_name text)
RETURNS TABLE (held_by text, held_since timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT s.held_by, s.held_since
      FROM @extschema@.source_status s
     WHERE s.server_name = source_hold.server_name AND s.held_by IS NOT NULL;
END;

-- The consumers of a source's active tracked tables that have reported an
-- LSN, read by its worker with the tables: it resolves each reported LSN
-- to a commit time on SQL Server (nothing to do when resolved_for_lsn is
-- the reported LSN).
CREATE OR REPLACE FUNCTION finalize_internal.source_consumers(server_name text)
RETURNS TABLE (table_id bigint, consumer text, reported_lsn @extschema@.lsn, resolved_for_lsn @extschema@.lsn)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT c.table_id, c.consumer, c.reported_lsn, c.resolved_for_lsn
      FROM @extschema@.consumer c
      JOIN @extschema@.tracked_table t ON t.table_id = c.table_id
     WHERE t.server_name = source_consumers.server_name AND t.untracked_at IS NULL
       AND t.kind = 'source' AND t.state IN ('active', 'resuming') AND c.reported_lsn IS NOT NULL
     ORDER BY c.table_id, c.consumer;
END;

-- Notes that another transaction held a consumer's row when the worker had
-- to write it: once, when first seen (finalize.consumers shows it as
-- consumer_locked); _check_consumers clears it once the row is free and
-- opens an incident if it lasts finalize.alert_after. Only the workers
-- write consumer_hold, and only when no row is there: ON CONFLICT alone
-- would wait for a transaction deleting one (it is there for two workers
-- serving one derived table's consumer).
CREATE OR REPLACE FUNCTION finalize_internal.consumer_held(table_id bigint, consumer text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    INSERT INTO @extschema@.consumer_hold (table_id, consumer)
    SELECT consumer_held.table_id, consumer_held.consumer
     WHERE NOT EXISTS (SELECT FROM @extschema@.consumer_hold h
                        WHERE h.table_id = consumer_held.table_id AND h.consumer = consumer_held.consumer)
    ON CONFLICT (table_id, consumer) DO NOTHING;
END;

-- Locks a consumer's row for the worker's write without waiting: false
-- (and the hold noted) when another transaction holds it, or when the
-- consumer is gone. A pipeline may keep its own report uncommitted for as
-- long as it likes; that must cost its own consumer's resolution only,
-- not its source's cycle time (finalize.lock_timeout for every table).
CREATE OR REPLACE FUNCTION finalize_internal.lock_consumer(table_id bigint, consumer text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM FROM @extschema@.consumer c WHERE c.table_id = lock_consumer.table_id AND c.consumer = consumer
       FOR NO KEY UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT FROM @extschema@.consumer c WHERE c.table_id = lock_consumer.table_id AND c.consumer = consumer) THEN
        PERFORM finalize_internal.consumer_held(table_id, consumer);
    END IF;
    RETURN false;
END
$$;

-- Stores what the worker resolved a consumer's LSN to: mapped_lsn, the
-- greatest mapping row at or below for_lsn (itself at most the reported LSN
-- and the cycle's max LSN), and its commit time less clock_tolerance (the
-- source's, as its tables' verdicts hold back): every commit before that
-- time is applied, even after SQL Server's clock was stepped back by up to
-- the tolerance. A report that was beyond max LSN (report_ahead) is so no
-- longer. Ignored when the consumer no longer reports at least
-- for_lsn (dropped, or added again lower, since the worker read it) or its
-- table is gone; a commit time never moves back. Then the verdict may
-- advance, in the worker's write transaction. A verdict or consumer row
-- that another transaction holds (an admin's change or a pipeline's
-- report left uncommitted) is skipped, never waited for: the resolution is
-- tried again next cycle, and a held consumer row is noted
-- (_consumer_held).
CREATE OR REPLACE FUNCTION finalize_internal.consumer_resolved(
    table_id    bigint,
    consumer    text,
    for_lsn     text,
    mapped_lsn  text,
    commit_time timestamptz,
    clock_tolerance interval DEFAULT interval '0')
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    f @extschema@.lsn := finalize_internal.lsn_arg(for_lsn, 'for_lsn');
    m @extschema@.lsn := finalize_internal.lsn_arg(mapped_lsn, 'mapped_lsn');
    tt @extschema@.tracked_table;
BEGIN
    PERFORM finalize_internal.require(f, 'for_lsn');
    PERFORM finalize_internal.require(m, 'mapped_lsn');
    PERFORM finalize_internal.require(commit_time, 'commit_time');
    commit_time := commit_time - coalesce(clock_tolerance, interval '0');
    IF m > f THEN
        RAISE EXCEPTION 'mapped LSN % lies above the LSN % it resolves', m, f
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A consumer''s LSN resolves to the greatest mapping row at or below it.';
    END IF;
    tt := finalize_internal.try_lock_tracked(table_id);
    IF tt.table_id IS NULL OR NOT finalize_internal.lock_consumer(tt.table_id, consumer) THEN
        RETURN;
    END IF;
    PERFORM finalize_internal.check_commit_time(tt.table_name, 'commit_time', commit_time);
    UPDATE @extschema@.consumer c
       SET resolved_for_lsn = GREATEST(c.resolved_for_lsn, f),
           mapped_lsn = CASE WHEN c.commit_time IS NULL OR commit_time > c.commit_time THEN m ELSE c.mapped_lsn END,
           commit_time = GREATEST(c.commit_time, commit_time),
           resolved_at = now(),
           resolve_error = NULL,
           condition = CASE WHEN c.condition = 'report_ahead' THEN NULL ELSE c.condition END,
           condition_since = CASE WHEN c.condition = 'report_ahead' THEN NULL ELSE c.condition_since END
     WHERE c.table_id = tt.table_id AND c.consumer = consumer AND c.reported_lsn >= f;
    IF FOUND THEN
        PERFORM finalize_internal.advance(tt.table_id);
    END IF;
END
$$;

-- Stores why the worker could not resolve a consumer's LSN (SQL Server's
-- own message, or a mapping row missing after cleanup), so that
-- finalize.consumers and explain_verdict show it; the verdict stays where
-- it was. Written only when the reason changes (every write of a consumer
-- row makes backends drop their cached verdicts), and only while the
-- consumer still reports at least for_lsn; skipped, like
-- _consumer_resolved, while another transaction holds the row.
CREATE OR REPLACE FUNCTION finalize_internal.consumer_unresolved(
    table_id    bigint,
    consumer    text,
    for_lsn     text,
    error       text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    f @extschema@.lsn := finalize_internal.lsn_arg(for_lsn, 'for_lsn');
    reason text := pg_catalog.left(error, 2000);
BEGIN
    PERFORM finalize_internal.require(f, 'for_lsn');
    PERFORM finalize_internal.require(reason, 'error');
    PERFORM 1 FROM @extschema@.consumer c
     WHERE c.table_id = consumer_unresolved.table_id AND c.consumer = consumer AND c.reported_lsn >= f
       AND c.resolve_error IS DISTINCT FROM reason;
    IF FOUND AND finalize_internal.lock_consumer(consumer_unresolved.table_id, consumer) THEN
        UPDATE @extschema@.consumer c
           SET resolve_error = reason,
               condition = CASE WHEN c.condition = 'report_ahead' THEN NULL ELSE c.condition END,
               condition_since = CASE WHEN c.condition = 'report_ahead' THEN NULL ELSE c.condition_since END
         WHERE c.table_id = consumer_unresolved.table_id AND c.consumer = consumer AND c.reported_lsn >= f;
    END IF;
END
$$;

-- Notes that a consumer reported an LSN beyond the max LSN its source's
-- worker read after the report: SQL Server had not captured that far, so
-- the pipeline cannot have applied it (a bug, or another database's LSN).
-- The report stays pending, never resolved to max LSN (which would let
-- the verdict follow the source without the pipeline); its condition is
-- report_ahead from now, with the reason in resolve_error, until max LSN
-- reaches it (_consumer_resolved) or an admin resets the consumer
-- (alter_consumer(..., reset => true)). Written once, while the consumer
-- still reports that LSN; a row another transaction holds is skipped.
CREATE OR REPLACE FUNCTION finalize_internal.consumer_ahead(
    table_id     bigint,
    consumer     text,
    reported_lsn text,
    max_lsn      text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    r @extschema@.lsn := finalize_internal.lsn_arg(reported_lsn, 'reported_lsn');
    m @extschema@.lsn := finalize_internal.lsn_arg(max_lsn, 'max_lsn');
BEGIN
    PERFORM finalize_internal.require(r, 'reported_lsn');
    PERFORM finalize_internal.require(m, 'max_lsn');
    PERFORM 1 FROM @extschema@.consumer c
     WHERE c.table_id = consumer_ahead.table_id AND c.consumer = consumer AND c.reported_lsn = r
       AND c.condition IS DISTINCT FROM 'report_ahead';
    IF FOUND AND finalize_internal.lock_consumer(consumer_ahead.table_id, consumer) THEN
        UPDATE @extschema@.consumer c
           SET condition = 'report_ahead', condition_since = now(),
               resolve_error = format('LSN %s lies beyond SQL Server''s max LSN %s, read after it was reported: '
                                      'a pipeline cannot have applied what SQL Server has not captured, so the '
                                      'report stays pending until capture reaches it', r, m)
         WHERE c.table_id = consumer_ahead.table_id AND c.consumer = consumer AND c.reported_lsn = r
           AND c.condition IS DISTINCT FROM 'report_ahead';
    END IF;
END
$$;

-- Brings every derived table whose inputs are final beyond its source
-- verdict up to date, and the loss flags up to date (_refresh_loss_blocked),
-- without waiting for a table whose verdict another transaction holds (it
-- is tried again next round). The scheduler runs it
-- every round, in a transaction of its own: this is how a derived table
-- follows a report on one of its inputs, at most a round (a second, or
-- finalize.poll_interval if shorter) after the report commits, and how one
-- skipped by an input's advance catches up. Passes are repeated while one
-- moved a verdict, so that a chain of derived tables comes up to date in
-- one call, also in a session (where _advance does not cascade). Returns
-- how many loss flags and source verdicts of derived tables it moved.
CREATE OR REPLACE FUNCTION finalize_internal.refresh_derived()
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    derived bigint;
    before timestamptz;
    moved integer := 0;
    pass integer;
BEGIN
    -- The loss flags (_refresh_loss_blocked): a table that has a loss to
    -- wait for below a flagged one gets its own flag (a worker skipped it,
    -- say, while a pipeline held it); then a flag is cleared whose table
    -- has none and no table below it has one (_open_below), looked at again under
    -- the table's lock (a statement of its own: a new snapshot). A table
    -- another transaction holds waits for a later round.
    FOR derived IN
        SELECT w.table_id FROM @extschema@.watermark w WHERE w.loss_blocked ORDER BY w.table_id
    LOOP
        moved := moved + finalize_internal.flag_below(derived);
    END LOOP;
    FOR derived IN
        SELECT w.table_id FROM @extschema@.watermark w
          JOIN @extschema@.tracked_table t ON t.table_id = w.table_id
         WHERE w.loss_blocked AND t.untracked_at IS NULL
         ORDER BY w.table_id
    LOOP
        CONTINUE WHEN finalize_internal.has_open_loss(derived) OR finalize_internal.open_below(derived);
        PERFORM FROM @extschema@.watermark w WHERE w.table_id = derived FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        CONTINUE WHEN finalize_internal.has_open_loss(derived) OR finalize_internal.open_below(derived);
        UPDATE @extschema@.watermark w SET loss_blocked = false WHERE w.table_id = derived;
        moved := moved + 1;
    END LOOP;
    LOOP
        pass := 0;
        -- Those behind (_inputs_until, for every derived table in one
        -- statement); _advance then does the exact work.
        FOR derived, before IN
            SELECT t.table_id, w.source_until
              FROM finalize_internal.inputs_final_untils(ARRAY(
                       SELECT x.table_id FROM @extschema@.tracked_table x
                        WHERE x.kind IN ('derived', 'sharded') AND x.untracked_at IS NULL)) AS i
              JOIN @extschema@.tracked_table t ON t.table_id = i.table_id
              JOIN @extschema@.watermark w ON w.table_id = t.table_id
             WHERE @extschema@.period_start(i.until, t.granularity, t.period_zone)
                   > coalesce(w.source_until, '-infinity')
             ORDER BY t.table_id
        LOOP
            PERFORM finalize_internal.advance(derived, false);
            IF (SELECT w.source_until FROM @extschema@.watermark w WHERE w.table_id = derived)
               IS DISTINCT FROM before THEN
                pass := pass + 1;
            END IF;
        END LOOP;
        moved := moved + pass;
        EXIT WHEN pass = 0;
    END LOOP;
    -- The derived and sharded tables whose verdict moved without a write of
    -- their own (an acknowledgement or a loss on an input, in a session
    -- that writes only the input's row) are announced (_announce), each
    -- whose row no other transaction holds.
    FOR derived IN
        SELECT w.table_id FROM @extschema@.tracked_table t
          JOIN @extschema@.watermark w ON w.table_id = t.table_id
         WHERE t.kind IN ('derived', 'sharded') AND t.untracked_at IS NULL
           AND finalize_internal.sensor_until(t.table_id, t.kind, w.finalized_until, t.granularity, t.period_zone,
                                         w.loss_blocked) IS DISTINCT FROM w.announced_until
         ORDER BY w.table_id
    LOOP
        PERFORM FROM @extschema@.watermark w WHERE w.table_id = derived FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        PERFORM finalize_internal.announce(ARRAY[derived]);
    END LOOP;
    RETURN moved;
END
$$;

-- finalize.consumer_stall_threshold as an interval (no days: comparing it
-- with now() - reported_at is exact in every session zone).
CREATE OR REPLACE FUNCTION finalize_internal.consumer_stall_threshold()
RETURNS interval
AS 'MODULE_PATHNAME', 'finalize_consumer_stall_threshold'
LANGUAGE C STABLE;

-- The tables a source's worker answers for: the server's tracked tables
-- and every derived table that uses one of them, directly or not.
CREATE OR REPLACE FUNCTION finalize_internal.served_tables(server_name text)
RETURNS SETOF bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH RECURSIVE served(id) AS (
        SELECT t.table_id FROM @extschema@.tracked_table t
         WHERE t.server_name = served_tables.server_name AND t.kind = 'source' AND t.untracked_at IS NULL
        UNION
        SELECT d.table_id FROM @extschema@.derived_input d JOIN served ON d.input_id = served.id)
    SELECT t.table_id FROM served JOIN @extschema@.tracked_table t ON t.table_id = served.id
     WHERE t.untracked_at IS NULL;
END;

-- Once per successful cycle of a source, in its write transaction: a
-- consumer of its tables (or of the derived tables that use them) that has
-- not reported for finalize.consumer_stall_threshold while the table's
-- source verdict is past the consumer's own is consumer_stalled. Entering
-- the condition sends an alert on finalize_alert; reporting (or the source
-- standing still) clears it. A consumer whose report has been beyond max
-- LSN (report_ahead, _consumer_ahead) for finalize.alert_after opens an
-- incident of that name. Writes only what changed. A consumer row
-- another transaction holds is not waited for: its change waits for the
-- next cycle. Then the holds: one that is over (the row is free, or the
-- consumer gone) is forgotten; one that has lasted finalize.alert_after
-- opens an incident (consumer_locked). Last, the incidents of the three
-- kinds whose condition is gone are resolved.
CREATE OR REPLACE FUNCTION finalize_internal.check_consumers(server_name text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    threshold interval := finalize_internal.consumer_stall_threshold();
    -- the tables the source's worker answers for, found once for the three
    -- statements below
    served bigint[] := ARRAY(SELECT s.id FROM finalize_internal.served_tables(check_consumers.server_name) AS s(id));
    r record;
BEGIN
    FOR r IN
        SELECT c.table_id, c.consumer, c.condition, c.condition_since, c.reported_lsn, c.reported_at,
               t.table_name, t.server_name, w.source_until, x.until,
               (SELECT st.max_lsn FROM @extschema@.source_status st WHERE st.server_name = t.server_name) AS max_lsn,
               coalesce(coalesce(c.reported_at, c.created_at) < now() - threshold
                        AND w.source_until > coalesce(x.until, '-infinity'), false) AS stalled
          FROM unnest(served) AS s(id)
          JOIN @extschema@.tracked_table t ON t.table_id = s.id
          JOIN @extschema@.watermark w ON w.table_id = t.table_id
          JOIN @extschema@.consumer c ON c.table_id = t.table_id
         CROSS JOIN LATERAL (SELECT finalize_internal.consumer_until(t.kind, t.granularity, t.period_zone, c.commit_time,
                                                                 c.processed_until) AS until) x
         ORDER BY c.table_id, c.consumer
    LOOP
        IF r.stalled AND r.condition IS NULL AND finalize_internal.lock_consumer(r.table_id, r.consumer) THEN
            UPDATE @extschema@.consumer c SET condition = 'consumer_stalled', condition_since = now()
             WHERE c.table_id = r.table_id AND c.consumer = r.consumer;
            PERFORM finalize_internal.alert(jsonb_build_object('alert', 'consumer_stalled', 'table', r.table_name,
                'consumer', r.consumer, 'reported_lsn', r.reported_lsn, 'reported_at', r.reported_at,
                'consumer_until', r.until, 'source_until', r.source_until,
                'detail', format('Consumer "%s" of table "%s" has not reported progress since %s while the source moved on to %s; the verdict waits for it.',
                                 r.consumer, r.table_name, coalesce(r.reported_at::text, 'it was added'), r.source_until)));
            PERFORM finalize_internal.raise_alert('consumer_stalled', 'warning', r.table_id, r.server_name, r.consumer,
                format('Consumer "%s" of table "%s" has not reported progress since %s while the source moved on to %s; the verdict waits for it.',
                       r.consumer, r.table_name, coalesce(r.reported_at::text, 'it was added'), r.source_until));
        -- (IS NOT DISTINCT FROM: a NULL condition must stop the AND before the lock.)
        ELSIF NOT r.stalled AND r.condition IS NOT DISTINCT FROM 'consumer_stalled'
              AND finalize_internal.lock_consumer(r.table_id, r.consumer) THEN
            UPDATE @extschema@.consumer c SET condition = NULL, condition_since = NULL
             WHERE c.table_id = r.table_id AND c.consumer = r.consumer AND c.condition = 'consumer_stalled';
        ELSIF r.condition IS NOT DISTINCT FROM 'report_ahead'
              AND r.condition_since <= now() - finalize_internal.alert_after() THEN
            PERFORM finalize_internal.raise_alert('report_ahead', 'warning', r.table_id, r.server_name, r.consumer,
                format('Consumer "%s" of table "%s" reported LSN %s, beyond what SQL Server had captured (max LSN %s now), and it has been pending since %s: the verdict waits for the consumer. A wrong report is forgotten with SELECT finalize.alter_consumer(%L, %L, reset => true).',
                       r.consumer, r.table_name, r.reported_lsn, coalesce(r.max_lsn::text, 'unknown'),
                       r.condition_since, r.table_name, r.consumer),
                jsonb_build_object('reported_lsn', r.reported_lsn, 'max_lsn', r.max_lsn,
                                   'since', finalize_internal.utc_iso(r.condition_since)));
        END IF;
    END LOOP;
    FOR r IN
        SELECT h.table_id, h.consumer, h.since, t.table_name, t.server_name
          FROM @extschema@.consumer_hold h
          JOIN @extschema@.tracked_table t ON t.table_id = h.table_id
         WHERE h.table_id IN (SELECT s.id FROM unnest(served) AS s(id))
         ORDER BY h.table_id, h.consumer
    LOOP
        IF finalize_internal.lock_consumer(r.table_id, r.consumer)
           OR NOT EXISTS (SELECT FROM @extschema@.consumer c WHERE c.table_id = r.table_id AND c.consumer = r.consumer) THEN
            DELETE FROM @extschema@.consumer_hold h WHERE h.table_id = r.table_id AND h.consumer = r.consumer;
        ELSIF r.since <= now() - finalize_internal.alert_after() THEN
            PERFORM finalize_internal.raise_alert('consumer_locked', 'warning', r.table_id, r.server_name, r.consumer,
                format('Another transaction has held the row of consumer "%s" of table "%s" since %s, so the worker cannot record what it reports; the verdict waits for it.',
                       r.consumer, r.table_name, r.since),
                jsonb_build_object('since', finalize_internal.utc_iso(r.since)));
        END IF;
    END LOOP;
    -- The incidents whose condition is gone (one statement, through the
    -- index of open incidents; one another transaction holds is left for
    -- the next cycle).
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.alert_id IN (
        SELECT x.alert_id FROM @extschema@.alert x
         WHERE x.kind IN ('consumer_stalled', 'consumer_locked', 'report_ahead') AND x.state <> 'resolved'
           AND x.table_id IN (SELECT s.id FROM unnest(served) AS s(id))
           AND NOT EXISTS (SELECT FROM @extschema@.consumer c
                            WHERE x.kind IN ('consumer_stalled', 'report_ahead') AND c.table_id = x.table_id
                              AND c.consumer = x.subject AND c.condition = x.kind)
           AND NOT EXISTS (SELECT FROM @extschema@.consumer_hold h
                            WHERE x.kind = 'consumer_locked' AND h.table_id = x.table_id AND h.consumer = x.subject)
           FOR NO KEY UPDATE SKIP LOCKED);
END
$$;

-- The source workers and what each does now, from finalize's shared memory:
-- the pool (worker = its number) or one dedicated process per source
-- (worker NULL, finalize.max_source_workers = 0).
CREATE OR REPLACE FUNCTION finalize_internal.source_workers(
    OUT pid integer, OUT worker integer, OUT serving text, OUT serving_since timestamptz,
    OUT retrying boolean, OUT connections integer, OUT cycles bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'finalize_source_workers'
LANGUAGE C VOLATILE;
CREATE OR REPLACE VIEW @extschema@.source_workers AS
SELECT w.pid, w.worker, w.serving, w.serving_since, w.retrying, w.connections, w.cycles
  FROM finalize_internal.source_workers() AS w;
COMMENT ON VIEW @extschema@.source_workers IS
    'The source workers: the source whose cycle each runs and since when, whether it is a retry of a failing source, the SQL Server connections each keeps open';
-- The durable alert log (docs/design/alerts.md): one row per incident,
-- deduplicated while it is open, resolved when its condition clears or
-- acknowledged by a person. NOTIFY finalize_alert (_alert) stays for
-- listeners; the incidents are what a person (or a webhook) reads later.

CREATE TABLE @extschema@.alert (
    alert_id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             text NOT NULL
                     CONSTRAINT alert_kind_check
                     CHECK (kind IN ('unreachable', 'timeout', 'tls_failed', 'configuration', 'sql_error',
                                     'no_max_lsn', 'internal_error', 'server_dropped', 'timezone_mismatch',
                                     'clock_skew', 'commit_time_ahead', 'capture_stalled', 'no_access',
                                     'read_failed', 'record_failed', 'lock_timeout', 'lsn_regressed',
                                     'no_capture_instance', 'source_replaced', 'event_column_invalid',
                                     'data_loss', 'schema_blocked', 'schema_change', 'consumer_stalled',
                                     'late_data', 'release_rejected', 'freshness', 'consumer_locked',
                                     'start_unreadable', 'catalog_unreachable', 'catalog_auth_failed',
                                     'table_not_found', 'property_malformed', 'metadata_malformed',
                                     'report_ahead', 'clock_stepped_back')),
    severity         text NOT NULL
                     CONSTRAINT alert_severity_check CHECK (severity IN ('info', 'warning', 'critical')),
    table_id         bigint REFERENCES @extschema@.tracked_table ON DELETE SET NULL,
    table_name       text,
    server_name      text,
    subject          text NOT NULL DEFAULT '',
    state            text NOT NULL DEFAULT 'open'
                     CONSTRAINT alert_state_check CHECK (state IN ('open', 'acknowledged', 'resolved')),
    opened_at        timestamptz NOT NULL DEFAULT now(),
    last_seen        timestamptz NOT NULL DEFAULT now(),
    count            bigint NOT NULL DEFAULT 1 CHECK (count >= 1),
    message          text NOT NULL,
    detail           jsonb,
    resolved_at      timestamptz,
    acknowledged_at  timestamptz,
    acknowledged_by  name,
    acknowledge_note text,
    -- The incident's name at webhook targets (PagerDuty's dedup_key,
    -- Opsgenie's alias): random, so two clusters, a reinstall or a copy
    -- restored elsewhere never share an incident there, and kept with the
    -- row, so a restore or a renamed database resolves what it opened.
    dedup_key        text NOT NULL UNIQUE DEFAULT 'finalize-' || pg_catalog.gen_random_uuid()::text,
    CHECK ((state = 'resolved') = (resolved_at IS NOT NULL)),
    CHECK ((state = 'acknowledged') <= (acknowledged_at IS NOT NULL))
);
COMMENT ON TABLE @extschema@.alert IS
    'Incidents: one row per condition that froze or endangered a verdict, deduplicated while open, resolved when it clears';
-- At most one incident per condition is not resolved: raising it again
-- updates that one. By table name, which stays when a deleted table's id
-- turns NULL (two tables' incidents never collapse into one).
CREATE UNIQUE INDEX alert_open_idx
    ON @extschema@.alert (kind, coalesce(table_name, ''), coalesce(server_name, ''), subject)
    WHERE state <> 'resolved';
-- Retention deletes resolved incidents by age.
CREATE INDEX alert_last_seen_idx ON @extschema@.alert (last_seen);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.alert', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.alert_alert_id_seq', '');

-- Opens an incident, or when one of the same kind, table, source and
-- subject is not resolved, counts it again (an acknowledged one stays
-- acknowledged: a person already knows). Returns its id. Runs in the
-- caller's transaction, so the incident commits with what raised it. In a
-- background worker an open incident another transaction holds (an
-- acknowledge_alert left uncommitted) is not waited for when its
-- condition is looked at again every cycle: it is counted again next time.
-- The others (a loss, a schema block, late rows, a refused release, a
-- clock stepped back) are raised once, and their holder may be resolving them (release_gate does
-- late_data's): they wait, at most finalize.lock_timeout, and the worker
-- records them again next cycle if that was not enough.
CREATE OR REPLACE FUNCTION finalize_internal.raise_alert(kind text, severity text, table_id bigint, server_name text,
                                         subject text, message text, detail jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    id bigint;
    tname text := (SELECT t.table_name FROM @extschema@.tracked_table t WHERE t.table_id = raise_alert.table_id);
BEGIN
    IF finalize_internal.in_background()
       AND raise_alert.kind NOT IN ('data_loss', 'schema_blocked', 'schema_change', 'late_data', 'release_rejected',
                                     'clock_stepped_back') THEN
        SELECT a.alert_id INTO id FROM @extschema@.alert a
         WHERE a.kind = raise_alert.kind AND coalesce(a.table_name, '') = coalesce(tname, '')
           AND coalesce(a.server_name, '') = coalesce(raise_alert.server_name, '')
           AND a.subject = coalesce(raise_alert.subject, '') AND a.state <> 'resolved';
        IF FOUND THEN
            PERFORM FROM @extschema@.alert a WHERE a.alert_id = id FOR NO KEY UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                RETURN id;
            END IF;
        END IF;
    END IF;
    INSERT INTO @extschema@.alert AS a (kind, severity, table_id, table_name, server_name, subject, message, detail)
    VALUES (raise_alert.kind, raise_alert.severity, raise_alert.table_id, tname,
            raise_alert.server_name, coalesce(raise_alert.subject, ''), raise_alert.message, raise_alert.detail)
    ON CONFLICT (kind, coalesce(table_name, ''), coalesce(server_name, ''), subject) WHERE state <> 'resolved'
    DO UPDATE SET last_seen = now(), count = a.count + 1, message = EXCLUDED.message, detail = EXCLUDED.detail,
                  severity = EXCLUDED.severity
    RETURNING a.alert_id INTO id;
    RETURN id;
END
$$;

-- Resolves the incident of a condition that cleared (none: nothing).
-- Returns how many it resolved. In a background worker one that another
-- transaction holds is left for a later call: every caller there looks
-- again each cycle (_source_alerts, _table_alerts, _check_consumers).
CREATE OR REPLACE FUNCTION finalize_internal.resolve_alerts(kind text, table_id bigint, server_name text, subject text DEFAULT '')
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    n integer;
BEGIN
    IF finalize_internal.in_background() THEN
        UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
         WHERE a.alert_id IN (
            SELECT x.alert_id FROM @extschema@.alert x
             WHERE x.kind = resolve_alerts.kind AND x.state <> 'resolved'
               AND coalesce(x.table_id, 0) = coalesce(resolve_alerts.table_id, 0)
               AND coalesce(x.server_name, '') = coalesce(resolve_alerts.server_name, '')
               AND x.subject = coalesce(resolve_alerts.subject, '')
               FOR NO KEY UPDATE SKIP LOCKED);
    ELSE
        UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
         WHERE a.kind = resolve_alerts.kind AND a.state <> 'resolved'
           AND coalesce(a.table_id, 0) = coalesce(resolve_alerts.table_id, 0)
           AND coalesce(a.server_name, '') = coalesce(resolve_alerts.server_name, '')
           AND a.subject = coalesce(resolve_alerts.subject, '');
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- The body of finalize.acknowledge_alert, run as the extension's owner by
-- its C entry point (owner.c) with the caller taken before the switch.
CREATE OR REPLACE FUNCTION finalize_internal.acknowledge_alert(caller name, alert_id bigint, note text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    a @extschema@.alert;
BEGIN
    PERFORM finalize_internal.require(alert_id, 'alert_id');
    PERFORM finalize_internal.require(note, 'note');
    IF note !~ '\S' THEN
        RAISE EXCEPTION 'invalid value for argument note: it must say what is being done'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The note is kept with the incident, for example ''SQL Server login fixed, ticket OPS-42''.';
    END IF;
    SELECT x.* INTO a FROM @extschema@.alert x WHERE x.alert_id = acknowledge_alert.alert_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'alert % does not exist', alert_id
            USING ERRCODE = 'undefined_object',
                  HINT = 'See the open incidents in finalize.alerts.';
    ELSIF a.state = 'resolved' THEN
        RAISE EXCEPTION 'alert % is already resolved', alert_id
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('Its condition cleared at %s; a new incident opens if it comes back.', a.resolved_at);
    END IF;
    UPDATE @extschema@.alert x
       SET state = 'acknowledged', acknowledged_at = now(), acknowledged_by = caller, acknowledge_note = note
     WHERE x.alert_id = a.alert_id;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.acknowledge_alert(alert_id bigint, note text)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.acknowledge_alert(bigint, text) IS
    'Say that a person handles an open incident; it stays acknowledged until its condition clears';

-- The incidents, newest first, for people and dashboards.
CREATE OR REPLACE VIEW @extschema@.alerts AS
SELECT a.alert_id, a.kind, a.severity, coalesce(t.table_name, a.table_name) AS table_name, a.server_name,
       a.subject, a.state, a.opened_at, a.last_seen, a.count, a.message, a.detail, a.resolved_at,
       a.acknowledged_at, a.acknowledged_by, a.acknowledge_note, a.dedup_key
  FROM @extschema@.alert a
  LEFT JOIN @extschema@.tracked_table t ON t.table_id = a.table_id
 ORDER BY a.alert_id DESC;
COMMENT ON VIEW @extschema@.alerts IS
    'Incidents: what froze or endangered a verdict, since when, how often, and whether it was resolved or acknowledged';

-- finalize.alert_after as an interval without days.
CREATE OR REPLACE FUNCTION finalize_internal.alert_after()
RETURNS interval
AS 'MODULE_PATHNAME', 'finalize_alert_after'
LANGUAGE C STABLE;

-- The incidents of a source's condition, as its worker records it each
-- cycle (_source_ok, _source_failed): a condition that stops the source
-- opens one once it has lasted finalize.alert_after (at once for those
-- that make SQL Server's times untrusted, and for a stalled capture);
-- every other source condition's incident is resolved. A condition that
-- says nothing about SQL Server (a worker starting, cancelled, or not
-- running) changes no incident.
CREATE OR REPLACE FUNCTION finalize_internal.source_alerts(server_name text, condition text, message text, since timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    kinds text[] := ARRAY['unreachable', 'timeout', 'tls_failed', 'configuration', 'sql_error', 'no_max_lsn',
                          'internal_error', 'server_dropped', 'timezone_mismatch', 'clock_skew',
                          'commit_time_ahead', 'capture_stalled'];
BEGIN
    IF condition NOT IN ('ok', 'capture_stalled') AND NOT (condition = ANY (kinds)) THEN
        RETURN;
    END IF;
    -- one statement, through the index of open incidents: it runs every
    -- cycle, so one another transaction holds (an acknowledge_alert left
    -- uncommitted) is skipped, never waited for, and resolved later
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.alert_id IN (
        SELECT x.alert_id FROM @extschema@.alert x
         WHERE x.kind = ANY (kinds) AND x.kind IS DISTINCT FROM condition AND x.state <> 'resolved'
           AND coalesce(x.table_id, 0) = 0 AND coalesce(x.server_name, '') = coalesce(source_alerts.server_name, '')
           AND x.subject = ''
           FOR NO KEY UPDATE SKIP LOCKED);
    IF condition = ANY (kinds)
       AND (condition IN ('timezone_mismatch', 'clock_skew', 'commit_time_ahead', 'capture_stalled')
            OR since <= now() - finalize_internal.alert_after()) THEN
        PERFORM finalize_internal.raise_alert(condition,
                                         CASE WHEN condition = 'capture_stalled' THEN 'warning' ELSE 'critical' END,
                                         NULL, server_name, '',
                                         coalesce(message, format('Source "%s": %s.', server_name, condition)),
                                         jsonb_build_object('since', finalize_internal.utc_iso(since)));
    END IF;
END
$$;

-- The incident kinds of a table's conditions: what _set_condition opens
-- and resolves (the other table incidents, such as freshness, late_data or
-- release_rejected, have their own lives).
CREATE OR REPLACE FUNCTION finalize_internal.condition_alert_kinds()
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN ARRAY['no_access', 'read_failed', 'record_failed', 'lock_timeout', 'lsn_regressed',
             'no_capture_instance', 'source_replaced', 'event_column_invalid', 'start_unreadable'];

-- Of some tables, those with a condition or an open incident of one: the
-- worker clears the condition of every table it read (_set_condition), and
-- a cycle over thousands of idle tables needs no write for the others.
CREATE OR REPLACE FUNCTION finalize_internal.held_conditions(table_ids bigint[])
RETURNS SETOF bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT c.table_id FROM @extschema@.table_condition c WHERE c.table_id = ANY (held_conditions.table_ids)
    UNION
    SELECT a.table_id FROM @extschema@.alert a
     WHERE a.table_id = ANY (held_conditions.table_ids) AND a.state <> 'resolved' AND a.subject = ''
       AND a.kind = ANY (finalize_internal.condition_alert_kinds());
END;

-- The incidents of a table's condition (_set_condition): one opens once
-- the condition has lasted finalize.alert_after; a cleared or changed
-- condition resolves the others.
CREATE OR REPLACE FUNCTION finalize_internal.table_alerts(table_id bigint, condition text, message text, since timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    kinds text[] := finalize_internal.condition_alert_kinds();
    server text := (SELECT t.server_name FROM @extschema@.tracked_table t WHERE t.table_id = table_alerts.table_id);
BEGIN
    -- one statement, through the index of open incidents: it runs every
    -- cycle while the table has a condition or an open incident
    -- (_held_conditions), so one another transaction holds is skipped
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.alert_id IN (
        SELECT x.alert_id FROM @extschema@.alert x
         WHERE x.kind = ANY (kinds) AND x.kind IS DISTINCT FROM condition AND x.state <> 'resolved'
           AND coalesce(x.table_id, 0) = coalesce(table_alerts.table_id, 0)
           AND coalesce(x.server_name, '') = coalesce(server, '') AND x.subject = ''
           FOR NO KEY UPDATE SKIP LOCKED);
    IF condition = ANY (kinds) AND since <= now() - finalize_internal.alert_after() THEN
        PERFORM finalize_internal.raise_alert(condition, CASE WHEN condition = 'lock_timeout' THEN 'warning' ELSE 'critical' END,
                                         table_id, server, '', coalesce(message, condition),
                                         jsonb_build_object('since', finalize_internal.utc_iso(since)));
    END IF;
END
$$;
CREATE TYPE @extschema@.verdict AS (
    table_name       text,
    period_start     timestamptz,
    period_end       timestamptz,
    is_final         boolean,
    finalized_until  timestamptz,
    captured_until   timestamptz,
    lag              interval,
    state            text,
    reason           text,
    period_zone      text,
    local_period_start text,
    local_finalized_until text,
    tracked_since    timestamptz
);
COMMENT ON TYPE @extschema@.verdict IS
    'A verdict with its explanation, as returned by finalize.explain_verdict';
-- What sensors and people read. The two verdict functions are C and read the
-- catalog directly (no SPI, no search_path): sensors poll them all day.
-- Neither is STRICT: a NULL argument is an error, never a NULL answer.
-- PARALLEL RESTRICTED: they run in the leader only, which takes their
-- fresh snapshot and knows whether its own transaction changed a verdict
-- (a parallel worker could do neither), so a query that filters a large
-- table with is_final may still scan it in parallel.

CREATE OR REPLACE FUNCTION @extschema@.finalized_until(table_name text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_finalized_until'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION @extschema@.finalized_until(text) IS
    'Every period of the table ending at or before this instant is complete; NULL while nothing is final';

CREATE OR REPLACE FUNCTION @extschema@.is_final(table_name text, period_start timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_is_final'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION @extschema@.is_final(text, timestamptz) IS
    'True iff the whole period containing period_start is complete: the watermark has passed it and no unacknowledged loss holds it';

-- The same for sensors that wait on several tables: the least verdict
-- (NULL if any is NULL), and whether the period is final for every table.
-- The first name that is not tracked is the error. A literal name still
-- calls the text versions (an unknown literal prefers the string type).
CREATE OR REPLACE FUNCTION @extschema@.finalized_until(table_names text[])
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_finalized_until_all'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION @extschema@.finalized_until(text[]) IS
    'The least finalized_until of the tables: every period ending at or before it is complete in all of them';

CREATE OR REPLACE FUNCTION @extschema@.is_final(table_names text[], period_start timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_is_final_all'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION @extschema@.is_final(text[], timestamptz) IS
    'True iff the period containing period_start is final in every one of the tables';

-- is_final that waits: true as soon as the period is final, false once
-- timeout has passed (interval '0' checks once). It sleeps on a condition
-- variable that commits moving a verdict wake, holding no lock and no
-- snapshot of its own while it sleeps (each check runs in a subtransaction
-- that is rolled back); the calling statement's snapshot stays, as for any
-- statement that runs, so keep timeouts bounded. READ COMMITTED only.
-- VOLATILE and PARALLEL UNSAFE: it waits, and checks in subtransactions.
CREATE OR REPLACE FUNCTION @extschema@.wait_final(table_name text, period_start timestamptz,
                                       timeout interval DEFAULT '1 hour')
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_wait_final'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.wait_final(text, timestamptz, interval) IS
    'Waits until is_final(table_name, period_start) is true (returns true) or timeout has passed (returns false); READ COMMITTED only';

CREATE OR REPLACE FUNCTION @extschema@.wait_final(table_names text[], period_start timestamptz,
                                       timeout interval DEFAULT '1 hour')
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_wait_final_all'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.wait_final(text[], timestamptz, interval) IS
    'Waits until the period containing period_start is final in every one of the tables (true) or timeout has passed (false)';

-- Where finalize began observing a table (watermark.tracked_since): for a
-- derived or sharded table, the latest of the tables it is built from
-- (transitively), NULL while one has not begun or it has none. Every
-- change of a period that ends at or before it was committed before then:
-- such a period may be final, but finalize recorded none of its changes.
-- SECURITY DEFINER for finalize.status, whose readers may not read
-- derived_input; it answers only this.
CREATE OR REPLACE FUNCTION finalize_internal.tracked_since(table_id bigint)
RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH RECURSIVE up(id) AS (
        SELECT tracked_since.table_id
        UNION
        SELECT d.input_id FROM @extschema@.derived_input d JOIN up ON d.table_id = up.id)
    SELECT CASE WHEN count(*) > 0 AND count(*) = count(w.tracked_since) THEN max(w.tracked_since) END
      FROM up
      JOIN @extschema@.tracked_table t ON t.table_id = up.id
      JOIN @extschema@.watermark w ON w.table_id = up.id
     WHERE t.kind = 'source';
END;

-- Why the source verdict holds a period back, or NULL when it does not: for
-- a tracked table how far SQL Server's capture has come, for a derived one
-- which inputs are not final that far, for a sharded one which shards
-- (_explain_shards).
CREATE OR REPLACE FUNCTION finalize_internal.explain_source(tt @extschema@.tracked_table, wm @extschema@.watermark,
                                            period_start timestamptz, period_end timestamptz)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF finalize_internal.period_final(period_start, tt.granularity, tt.period_zone, wm.source_until) THEN
        RETURN NULL;
    ELSIF tt.kind = 'derived' THEN
        RETURN finalize_internal.explain_inputs(tt.table_id, period_end);
    ELSIF tt.kind = 'sharded' THEN
        RETURN finalize_internal.explain_shards(tt, wm, period_start, period_end);
    ELSIF wm.offset_lsn IS NULL THEN
        RETURN format('the worker has not recorded any range for this table since it was tracked at %s', tt.created_at);
    ELSIF wm.offset_commit_time >= period_end
          AND wm.offset_commit_time - coalesce(finalize_internal.clock_tolerance(tt.server_name), interval '0') < period_end THEN
        RETURN format('SQL Server''s capture has reached %s (LSN %s), but the verdict holds back by the clock_tolerance of server "%s" (%s), so that a step back of SQL Server''s clock cannot put a commit into a final period',
                      wm.offset_commit_time, wm.offset_lsn, tt.server_name, finalize_internal.clock_tolerance(tt.server_name));
    ELSIF wm.offset_commit_time >= period_end THEN
        RETURN format('the watermark only moves in whole periods and stands at %s', wm.source_until);
    END IF;
    RETURN format('SQL Server''s capture has reached %s (LSN %s), %s before the period ends',
                  wm.offset_commit_time, wm.offset_lsn,
                  CASE WHEN isfinite(period_end) THEN (period_end - wm.offset_commit_time)::text
                       ELSE 'for ever' END);
END
$$;

-- The inputs of a derived table that are not final up to period_end.
CREATE OR REPLACE FUNCTION finalize_internal.explain_inputs(table_id bigint, period_end timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT string_agg(CASE WHEN v.until IS NULL
                           THEN format('input "%s" has nothing final yet', t.table_name)
                           ELSE format('input "%s" is final until %s', t.table_name, v.until) END,
                      '; ' ORDER BY v.until NULLS FIRST, t.table_name)
           || format('; the period ends at %s', explain_inputs.period_end)
      FROM @extschema@.derived_input d
      JOIN @extschema@.tracked_table t ON t.table_id = d.input_id
      JOIN @extschema@.watermark w ON w.table_id = d.input_id
     CROSS JOIN LATERAL (SELECT finalize_internal.sensor_until(t.table_id, t.kind, w.finalized_until, t.granularity,
                                                          t.period_zone, w.loss_blocked) AS until) v
     WHERE d.table_id = explain_inputs.table_id
       AND (w.finalized_until IS NULL OR w.finalized_until < explain_inputs.period_end);
END;

-- The shards of a sharded table that hold a period back (the least
-- verdicts first, at most five named), each with its own explanation; a
-- sharded table without shards is never final.
CREATE OR REPLACE FUNCTION finalize_internal.explain_shards(tt @extschema@.tracked_table, wm @extschema@.watermark,
                                            period_start timestamptz, period_end timestamptz)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    holding bigint;
    named text;
BEGIN
    IF NOT EXISTS (SELECT FROM finalize_internal.shards(tt.table_id)) THEN
        RETURN 'it has no shard, and a sharded table is final only for the periods every shard is final for: add one with finalize.add_shard()';
    END IF;
    SELECT count(*) INTO holding
      FROM finalize_internal.shards(tt.table_id) AS s JOIN @extschema@.watermark w ON w.table_id = s.table_id
     WHERE w.finalized_until IS NULL OR w.finalized_until < period_end;
    IF holding = 0 THEN
        RETURN format('every shard is final for it, and the sharded table''s verdict (at %s) follows them within a round of the scheduler',
                      coalesce(finalize_internal.sensor_until(tt.table_id, tt.kind, wm.finalized_until, tt.granularity,
                                                         tt.period_zone, wm.loss_blocked)::text, 'nothing yet'));
    END IF;
    -- Each shard's own reason, without its first words (the period) and
    -- speaking of the shard where it says "this table".
    SELECT string_agg(format('shard "%s" holds it back: %s', x.shard,
                             rtrim(replace(regexp_replace((@extschema@.explain_verdict(x.table_name, period_start)).reason,
                                                          '^Period \[[^)]*\) is not final( yet)?: ', ''),
                                           'This table is', 'The shard is'), '.')),
                      '; ' ORDER BY x.ord)
      INTO named
      FROM (SELECT s.shard, s.table_name,
                   row_number() OVER (ORDER BY w.finalized_until NULLS FIRST, s.shard) AS ord
              FROM finalize_internal.shards(tt.table_id) AS s JOIN @extschema@.watermark w ON w.table_id = s.table_id
             WHERE w.finalized_until IS NULL OR w.finalized_until < period_end
             ORDER BY w.finalized_until NULLS FIRST, s.shard LIMIT 5) AS x;
    RETURN named || CASE WHEN holding > 5 THEN format('; %s more shards are not final for it', holding - 5) ELSE '' END;
END
$$;

-- The required consumers that hold a period back, each with how far it got,
-- or NULL when none does.
CREATE OR REPLACE FUNCTION finalize_internal.explain_consumers(tt @extschema@.tracked_table, period_end timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT string_agg(CASE
               WHEN (tt).kind = 'derived' AND c.processed_until IS NULL
               THEN format('consumer "%s" has not reported any processed input yet', c.consumer)
               WHEN (tt).kind = 'derived'
               THEN format('consumer "%s" has processed its inputs up to %s', c.consumer, c.processed_until)
               WHEN c.reported_lsn IS NULL
               THEN format('consumer "%s" has not reported any progress yet', c.consumer)
               WHEN c.commit_time IS NULL
               THEN format('consumer "%s" has reported LSN %s, which the worker has not resolved to a commit time yet%s',
                           c.consumer, c.reported_lsn, ' (' || c.resolve_error || ')')
               WHEN c.reported_lsn = c.resolved_for_lsn
               THEN format('consumer "%s" has applied up to LSN %s (commit %s)', c.consumer, c.reported_lsn, c.commit_time)
               ELSE format('consumer "%s" has applied up to LSN %s (commit %s) and has since reported LSN %s, which the worker has not resolved yet%s',
                           c.consumer, c.resolved_for_lsn, c.commit_time, c.reported_lsn, ' (' || c.resolve_error || ')') END,
               '; ' ORDER BY x.until NULLS FIRST, c.consumer)
           || format('; the period ends at %s', explain_consumers.period_end)
      FROM @extschema@.consumer c
     CROSS JOIN LATERAL (SELECT finalize_internal.consumer_until((tt).kind, (tt).granularity, (tt).period_zone,
                                                             c.commit_time, c.processed_until) AS until) x
     WHERE c.table_id = (tt).table_id AND c.required
       AND (x.until IS NULL OR x.until < explain_consumers.period_end);
END;

-- The losses that hold a period, each with its table, times, LSNs and the
-- calls that release it: on the table that lost the data once the lake was
-- re-snapshotted, and on each derived table with a required consumer once
-- its job has rebuilt the periods (_loss_ackers), inputs first (a derived
-- table is tracked after its inputs); NULL when none does.
CREATE OR REPLACE FUNCTION finalize_internal.explain_losses(tt @extschema@.tracked_table, period_start timestamptz,
                                            period_end timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT string_agg(x.sentence, ' ' ORDER BY x.loss_id)
      FROM (SELECT l.loss_id,
                   format('changes of table "%s"%s %s from %s to %s (LSN range (%s, %s]) were lost before finalize could read them (see its data_loss event in finalize.facts)',
                          t.table_name,
                          CASE WHEN t.shard_of = (tt).table_id THEN format(', shard "%s" of this table,', t.shard)
                               WHEN t.table_id <> (tt).table_id THEN ', an input of this table,' ELSE '' END,
                          CASE WHEN t.event_time_column IS NOT NULL
                               THEN 'with event times (within the lateness allowance) possibly'
                               ELSE 'committed' END,
                          l.lost_from, l.lost_to, coalesce(l.from_lsn::text, 'its start'), coalesce(l.to_lsn::text, 'unknown'))
                   || CASE WHEN bool_or(o.acker_id = l.table_id)
                           THEN format('; run finalize.acknowledge_loss(%L, %L, %L, ''<how it was repaired>'') once the lake was re-snapshotted.',
                                       t.table_name, ls.span_from, ls.span_to)
                                || coalesce(' Also, '
                                            || string_agg(format('derived table "%s" has a required consumer, so acknowledge the loss on "%s" too once its job has rebuilt these periods: run finalize.acknowledge_loss(%L, %L, %L, ''<how it was rebuilt>'')',
                                                                 k.table_name, k.table_name, k.table_name, ks.span_from, ks.span_to),
                                                          '; ' ORDER BY k.table_id) FILTER (WHERE o.acker_id <> l.table_id)
                                            || '.', '')
                           ELSE format(' and were acknowledged on input "%s"; ', t.table_name)
                                || string_agg(format('derived table "%s" has a required consumer, so acknowledge the loss on "%s" once its job has rebuilt these periods: run finalize.acknowledge_loss(%L, %L, %L, ''<how it was rebuilt>'')',
                                                     k.table_name, k.table_name, k.table_name, ks.span_from, ks.span_to),
                                              '; ' ORDER BY k.table_id) FILTER (WHERE o.acker_id <> l.table_id)
                                || '.' END AS sentence
              FROM finalize_internal.open_loss_ackers((tt).table_id, explain_losses.period_start,
                                                 explain_losses.period_end) AS o
              JOIN @extschema@.loss l ON l.loss_id = o.loss_id
              JOIN @extschema@.tracked_table t ON t.table_id = l.table_id
              JOIN @extschema@.tracked_table k ON k.table_id = o.acker_id
             CROSS JOIN LATERAL finalize_internal.loss_span(l.lost_from, l.lost_to, t.granularity, t.period_zone) AS ls
             CROSS JOIN LATERAL finalize_internal.loss_span(l.lost_from, l.lost_to, k.granularity, k.period_zone) AS ks
             GROUP BY l.loss_id, t.table_id, t.table_name, ls.span_from, ls.span_to) AS x;
END;

-- Why a final period is final: how far the source verdict reached, the
-- required consumers that have applied (or processed) it, and those
-- declared after it became final (a verdict never moves back). A period
-- that ended before finalize began tracking the table (_tracked_since) is
-- final but was not observed: its changes were all committed before then,
-- and none is recorded (docs/periods.md); one that tracking began inside
-- is said to be partly so.
CREATE OR REPLACE FUNCTION finalize_internal.explain_final(tt @extschema@.tracked_table, wm @extschema@.watermark,
                                           period_start timestamptz, period_end timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT CASE WHEN explain_final.period_end <= s.since
                THEN format('Period [%s, %s) is final but was not observed: it ended before finalize began tracking %s, at %s, so %s were all committed before then, and finalize recorded none of them (finalize.changes_by_period counts nothing for it).',
                            explain_final.period_start, explain_final.period_end,
                            CASE WHEN (tt).kind = 'source' THEN 'this table'
                                 WHEN (tt).kind = 'sharded' THEN 'its shards' ELSE 'its inputs' END,
                            s.since,
                            CASE WHEN (tt).kind = 'source' THEN 'its changes (captured by SQL Server)'
                                 ELSE 'their changes in it' END)
                WHEN (tt).kind = 'source'
                THEN format('Period [%s, %s) is final: SQL Server''s capture has passed %s (LSN %s), so every change committed before %s is recorded.',
                            explain_final.period_start, explain_final.period_end, (wm).offset_commit_time,
                            (wm).offset_lsn, coalesce((wm).commit_until, (wm).finalized_until))
                WHEN (tt).kind = 'sharded'
                THEN format('Period [%s, %s) is final: every shard of this sharded table is final for it, and its verdict stands at %s.',
                            explain_final.period_start, explain_final.period_end, (wm).finalized_until)
                ELSE format('Period [%s, %s) is final: every input of this derived table is final for it, and its verdict stands at %s.',
                            explain_final.period_start, explain_final.period_end, (wm).finalized_until) END
           || CASE WHEN explain_final.period_start < s.since AND s.since < explain_final.period_end
                   THEN format(' Finalize began tracking %s at %s, inside this period: the changes committed before then are not in its facts.',
                               CASE WHEN (tt).kind = 'source' THEN 'this table'
                                    WHEN (tt).kind = 'sharded' THEN 'its shards' ELSE 'its inputs' END, s.since)
                   ELSE '' END
           || CASE WHEN count(*) FILTER (WHERE x.until >= explain_final.period_end) > 0
                   THEN format(' Its required consumers have %s it: %s.',
                               CASE WHEN (tt).kind = 'source' THEN 'applied' ELSE 'processed' END,
                               string_agg(format('"%s"', c.consumer), ', ' ORDER BY c.consumer)
                                   FILTER (WHERE x.until >= explain_final.period_end))
                   ELSE '' END
           || CASE WHEN count(c.consumer) FILTER (WHERE x.until IS NULL OR x.until < explain_final.period_end) > 0
                   THEN format(' It was final before %s %s declared; a verdict never moves back.',
                               CASE WHEN count(c.consumer) FILTER (WHERE x.until IS NULL OR x.until < explain_final.period_end) = 1
                                    THEN 'consumer' ELSE 'consumers' END,
                               string_agg(format('"%s"', c.consumer), ', ' ORDER BY c.consumer)
                                   FILTER (WHERE x.until IS NULL OR x.until < explain_final.period_end)
                               || CASE WHEN count(c.consumer) FILTER (WHERE x.until IS NULL OR x.until < explain_final.period_end) = 1
                                       THEN ' was' ELSE ' were' END)
                   ELSE '' END
      FROM (SELECT finalize_internal.tracked_since((tt).table_id) AS since) AS s
      LEFT JOIN @extschema@.consumer c ON c.table_id = (tt).table_id AND c.required
      LEFT JOIN LATERAL (SELECT finalize_internal.consumer_until((tt).kind, (tt).granularity, (tt).period_zone,
                                                             c.commit_time, c.processed_until) AS until) x ON true
     GROUP BY s.since;
END;

-- Explains a verdict in one sentence, for people and sensor failure
-- callbacks. Without a period, it explains the first period not yet final.
-- Its reason names instants as the table's zone writes them (TimeZone set
-- to period_zone for the call, ISO style), whatever the session's settings.
CREATE OR REPLACE FUNCTION @extschema@.explain_verdict(table_name text, period_start timestamptz DEFAULT NULL)
RETURNS @extschema@.verdict
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
SET IntervalStyle = 'postgres'
AS $$
#variable_conflict use_variable
DECLARE
    tt  @extschema@.tracked_table;
    wm  @extschema@.watermark;
    src @extschema@.source_status;
    cnd @extschema@.table_condition;
    v   @extschema@.verdict;
    shown @extschema@.watermark;
    why text;
    losses text;
    verdict_until timestamptz;
    blocked boolean;
BEGIN
    tt := finalize_internal.tracked(table_name);
    -- (until the call returns: the SET clauses above restore the session's)
    PERFORM set_config('TimeZone', tt.period_zone, true);
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    SELECT s.* INTO src FROM @extschema@.source_status s WHERE s.server_name = tt.server_name;
    SELECT c.* INTO cnd FROM @extschema@.table_condition c WHERE c.table_id = tt.table_id;
    -- What finalized_until() answers (_sensor_until, the sensors' rule):
    -- the watermark rounded down to a start of the table's periods (they
    -- may have changed since it was set), stopped at the first period a
    -- loss may still hold.
    verdict_until := finalize_internal.sensor_until(tt.table_id, tt.kind, wm.finalized_until, tt.granularity, tt.period_zone,
                                               wm.loss_blocked);
    blocked := finalize_internal.lineage_blocked(tt.table_id);

    -- Period bounds and finality come from the C period arithmetic, the
    -- one is_final uses: never from timestamptz + interval in this zone.
    v.table_name := tt.table_name;
    v.period_start := @extschema@.period_start(
        coalesce(period_start, verdict_until, now()), tt.granularity, tt.period_zone);
    v.period_end := @extschema@.period_end(v.period_start, tt.granularity, tt.period_zone);
    v.is_final := finalize_internal.period_final(v.period_start, tt.granularity, tt.period_zone, wm.finalized_until);
    v.finalized_until := verdict_until;
    v.captured_until := wm.offset_commit_time;
    v.lag := now() - verdict_until;
    v.state := tt.state;
    v.period_zone := tt.period_zone;
    v.local_period_start := finalize_internal.local_time(v.period_start, tt.period_zone);
    v.local_finalized_until := finalize_internal.local_time(verdict_until, tt.period_zone);
    v.tracked_since := finalize_internal.tracked_since(tt.table_id);
    IF blocked THEN
        losses := finalize_internal.explain_losses(tt, v.period_start, v.period_end);
    END IF;

    IF v.is_final AND losses IS NOT NULL THEN
        v.is_final := false;
        v.reason := format('Period [%s, %s) is not final: %s', v.period_start, v.period_end, losses);
        RETURN v;
    ELSIF v.is_final THEN
        -- (the verdict it names is the sensors', not the watermark)
        shown := wm;
        shown.finalized_until := verdict_until;
        v.reason := finalize_internal.explain_final(tt, shown, v.period_start, v.period_end);
        IF tt.event_time_column IS NOT NULL THEN
            v.reason := v.reason || ' ' || finalize_internal.explain_event_time(tt, wm, v.period_end);
        END IF;
        RETURN v;
    END IF;

    why := concat_ws('; ', finalize_internal.explain_source(tt, wm, v.period_start, v.period_end),
                     finalize_internal.explain_consumers(tt, v.period_end));
    v.reason := format('Period [%s, %s) is not final yet: %s.', v.period_start, v.period_end,
                       coalesce(nullif(why, ''), format('the verdict stands at %s', verdict_until)));
    IF tt.state <> 'active' THEN
        v.reason := v.reason || format(' The table is in state %s since %s: %s',
                                       tt.state, tt.state_since, coalesce(tt.state_detail, 'its verdict is stopped.'));
    END IF;
    IF src.condition = 'capture_stalled' THEN
        v.reason := v.reason || format(' SQL Server''s capture is stalled on source "%s" since %s: %s',
                                       tt.server_name, src.condition_since, src.last_error);
    END IF;
    IF cnd.condition IS NOT NULL THEN
        v.reason := v.reason || format(' The worker cannot read this table (%s since %s): %s',
                                       cnd.condition, cnd.since, cnd.detail);
    END IF;
    IF src.condition NOT IN ('ok', 'capture_stalled') AND src.last_error IS NOT NULL THEN
        v.reason := v.reason || format(' The source "%s" failed at %s: %s', tt.server_name, src.last_error_at, src.last_error);
    END IF;
    IF losses IS NOT NULL THEN
        v.reason := v.reason || ' It also waits for a loss to be acknowledged: ' || losses;
    END IF;
    IF tt.event_time_column IS NOT NULL THEN
        v.reason := v.reason || ' ' || finalize_internal.explain_event_time(tt, wm, v.period_end);
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION @extschema@.explain_verdict(text, timestamptz) IS
    'Why a period of a table is or is not final, with the watermark and its lag';

-- One row per tracked table: its verdict and what its source's worker saw.
CREATE OR REPLACE VIEW @extschema@.status AS
SELECT t.table_name,
       t.server_name,
       t.source_schema || '.' || t.source_name AS source_table,
       t.capture_instance,
       t.granularity,
       t.state,
       t.state_detail,
       c.condition,
       c.detail AS condition_detail,
       sc.detail ->> 'summary' AS last_schema_change,
       sc.recorded_at AS last_schema_change_at,
       r.until AS finalized_until,
       now() - r.until AS lag,
       w.offset_lsn,
       w.offset_commit_time AS captured_until,
       w.advanced_at,
       w.recorded_at,
       s.condition AS source_condition,
       s.max_lsn AS source_max_lsn,
       s.last_poll,
       s.last_success,
       s.last_error,
       s.last_error_at,
       s.next_attempt,
       s.clock_skew,
       s.live_pid AS worker_pid,
       t.kind,
       w.source_until,
       -- The required consumer furthest behind, while the verdict waits for
       -- it (asked only then: most rows need no look at consumers).
       CASE WHEN w.source_until > coalesce(w.commit_until, w.finalized_until, '-infinity')
            THEN (SELECT x.consumer FROM @extschema@.consumer x
                   CROSS JOIN LATERAL (SELECT @extschema@.period_start(
                              CASE WHEN t.kind = 'source' THEN x.commit_time ELSE x.processed_until END,
                              t.granularity, t.period_zone) AS until) u
                   WHERE x.table_id = t.table_id AND x.required
                     AND w.source_until > coalesce(u.until, '-infinity')
                   ORDER BY u.until NULLS FIRST, x.consumer LIMIT 1)
       END AS held_back_by,
       -- Whether a loss holds some periods: asked (_loss_holds) only while
       -- its own flag or any input's, transitively, is set, as the sensors
       -- read it (_lineage_blocked, inlined here: readers may not call it).
       CASE WHEN w.loss_blocked OR (t.kind IN ('derived', 'sharded') AND EXISTS (
                     WITH RECURSIVE up(id) AS (
                         SELECT d.input_id FROM @extschema@.derived_input d WHERE d.table_id = t.table_id
                         UNION
                         SELECT d.input_id FROM @extschema@.derived_input d JOIN up ON d.table_id = up.id)
                     SELECT FROM up JOIN @extschema@.watermark u ON u.table_id = up.id WHERE u.loss_blocked))
            THEN finalize_internal.loss_holds(t.table_id) ELSE false END AS loss_blocked,
       t.event_time_column,
       w.commit_until,
       w.event_allowance,
       -- Late rows: an event-time table's, or a commit-time table's whose
       -- SQL Server clock was stepped back into final periods. A sharded
       -- table's are its shards'; a derived table has none of its own.
       CASE WHEN t.kind = 'sharded'
            THEN (SELECT sum(l.rows) FROM @extschema@.tracked_table x
                    JOIN @extschema@.late_period l ON l.table_id = x.table_id
                   WHERE x.shard_of = t.table_id AND x.untracked_at IS NULL)::bigint
            WHEN t.kind <> 'derived'
            THEN (SELECT sum(l.rows) FROM @extschema@.late_period l WHERE l.table_id = t.table_id)::bigint
       END AS late_rows,
       s.cycle_time AS source_cycle_time,
       t.period_zone,
       -- The conditions of the table's Iceberg consumers ("consumer:
       -- condition"), NULL while they read their catalogs.
       (SELECT string_agg(l.consumer || ': ' || l.condition, ', ' ORDER BY l.consumer)
          FROM @extschema@.lake_consumer l
         WHERE l.table_id = t.table_id AND l.condition IS NOT NULL) AS consumer_conditions,
       -- A shard: its sharded table and its label; a sharded table: how
       -- many shards it has and the one furthest behind (nothing final
       -- first), asked only for those rows.
       CASE WHEN t.shard_of IS NOT NULL
            THEN (SELECT p.table_name FROM @extschema@.tracked_table p WHERE p.table_id = t.shard_of)
       END AS sharded_table,
       t.shard,
       CASE WHEN t.kind = 'sharded'
            THEN (SELECT count(*) FROM @extschema@.tracked_table x
                   WHERE x.shard_of = t.table_id AND x.untracked_at IS NULL)
       END AS shards,
       CASE WHEN t.kind = 'sharded'
            THEN (SELECT x.shard FROM @extschema@.tracked_table x
                    JOIN @extschema@.watermark xw ON xw.table_id = x.table_id
                   WHERE x.shard_of = t.table_id AND x.untracked_at IS NULL
                   ORDER BY xw.finalized_until NULLS FIRST, x.shard LIMIT 1)
       END AS slowest_shard,
       -- Where finalize began observing it (a derived or sharded table: the
       -- latest of the tables it is built from, asked only for those rows).
       CASE WHEN t.kind = 'source' THEN w.tracked_since
            ELSE finalize_internal.tracked_since(t.table_id) END AS tracked_since,
       -- The verdict as its zone writes it.
       finalize_internal.local_time(r.until, t.period_zone) AS local_finalized_until
  FROM @extschema@.tracked_table t
  JOIN @extschema@.watermark w USING (table_id)
  -- The verdict as finalized_until() answers it (_sensor_until, which
  -- readers may call): the watermark rounded down to a start of the
  -- table's periods (they may have changed since it was set), stopped
  -- where a loss holds periods.
 CROSS JOIN LATERAL (SELECT finalize_internal.sensor_until(t.table_id, t.kind, w.finalized_until, t.granularity, t.period_zone,
                                                      w.loss_blocked) AS until) r
  LEFT JOIN @extschema@.table_condition c ON c.table_id = t.table_id
  -- Whether a source's worker runs, asked once per source, not per table
  -- (OFFSET 0 keeps the subquery from being flattened into each row).
  LEFT JOIN (SELECT ss.*,
                    CASE WHEN ss.worker_pid IS NOT NULL
                          AND EXISTS (SELECT FROM pg_catalog.pg_stat_get_activity(ss.worker_pid))
                         THEN ss.worker_pid END AS live_pid
               FROM @extschema@.source_status ss OFFSET 0) s ON s.server_name = t.server_name
  -- Each table's latest schema change, from the few DDL events (fact_ddl_idx).
  LEFT JOIN (SELECT DISTINCT ON (f.table_id) f.table_id, f.detail, f.recorded_at
               FROM @extschema@.fact f
              WHERE f.event IS NOT NULL AND f.detail OPERATOR(pg_catalog.?) 'ddl'
              ORDER BY f.table_id, f.fact_id DESC) sc ON sc.table_id = t.table_id
 WHERE t.untracked_at IS NULL;
COMMENT ON VIEW @extschema@.status IS
    'One row per tracked table (a sharded table and each of its shards): state, verdict, lag and what its source''s worker last saw';

-- One row per consumer of a tracked (or derived) table: how far it got
-- (the LSN it reported and its commit time; for a derived table's job, the
-- processed input watermark in consumer_until), how far its verdict lags
-- the source verdict, and whether its row was held by another transaction
-- when the worker had to write it (consumer_locked: what the worker last
-- stored may be stale then), its report lies beyond SQL Server's max LSN
-- (report_ahead) or it is stalled (consumer_stalled).
CREATE OR REPLACE VIEW @extschema@.consumers AS
SELECT t.table_name,
       c.consumer,
       c.required,
       c.reporter,
       c.reported_lsn,
       c.reported_at,
       c.commit_time,
       u.until AS consumer_until,
       CASE WHEN w.source_until > u.until THEN w.source_until - u.until
            WHEN w.source_until <= u.until THEN interval '0' END AS lag,
       coalesce(l.condition, CASE WHEN h.since IS NOT NULL THEN 'consumer_locked' END, c.condition) AS condition,
       CASE WHEN l.condition IS NOT NULL THEN l.condition_since
            WHEN h.since IS NOT NULL THEN h.since ELSE c.condition_since END AS condition_since,
       coalesce(CASE WHEN l.condition IS NOT NULL THEN l.last_error END, c.resolve_error) AS resolve_error,
       l.server_name AS iceberg_server,
       l.iceberg_table,
       l.ref AS iceberg_ref,
       l.seen_snapshot_id AS iceberg_snapshot_id,
       l.polled_at AS iceberg_polled_at,
       -- A shard's consumer: its sharded table and shard, and whether it
       -- was declared on the sharded table (a consumer of every shard).
       CASE WHEN t.shard_of IS NOT NULL
            THEN (SELECT p.table_name FROM @extschema@.tracked_table p WHERE p.table_id = t.shard_of)
       END AS sharded_table,
       t.shard,
       EXISTS (SELECT FROM @extschema@.shard_consumer x
                WHERE x.table_id = t.shard_of AND x.consumer = c.consumer) AS table_wide
  FROM @extschema@.consumer c
  JOIN @extschema@.tracked_table t USING (table_id)
  JOIN @extschema@.watermark w USING (table_id)
  LEFT JOIN @extschema@.consumer_hold h USING (table_id, consumer)
  LEFT JOIN @extschema@.lake_consumer l USING (table_id, consumer)
 CROSS JOIN LATERAL (SELECT @extschema@.period_start(
            CASE WHEN t.kind = 'source' THEN c.commit_time ELSE c.processed_until END,
            t.granularity, t.period_zone) AS until) u
 WHERE t.untracked_at IS NULL;
COMMENT ON VIEW @extschema@.consumers IS
    'One row per consumer (pipeline) of a tracked table: what it applied, its lag behind the source and its condition';

-- Every fact, with the name of its table.
CREATE OR REPLACE VIEW @extschema@.facts AS
SELECT f.fact_id,
       t.table_name,
       f.kind,
       f.event,
       f.start_lsn,
       f.end_lsn,
       f.end_commit_time,
       f.inserts,
       f.updates,
       f.deletes,
       f.first_commit_time,
       f.last_commit_time,
       f.capture_instance,
       f.ranges,
       f.detail,
       f.recorded_at,
       t.untracked_at IS NOT NULL AS untracked
  FROM @extschema@.fact f
  JOIN @extschema@.tracked_table t USING (table_id);
COMMENT ON VIEW @extschema@.facts IS
    'Facts per CDC range and events, per tracked table (including untracked tables until retention)';

-- Changes per period between two instants. A period is covered when every
-- commit in it lies after the start of the recorded facts (tracking began, or
-- retention removed older facts, before it) and outside every range lost to
-- retention cleanup. A range whose rows all committed
-- inside one period counts there; a range whose rows straddle a period
-- boundary is counted in straddling_ranges of every period it touches (its
-- rows may belong to either). Counts are exact where the period is covered,
-- no range straddles it and SQL Server's clock went back across none of its
-- boundaries (a clock_stepped_back event: commits stamped in it after
-- commits of a later period, maybe after it was final). is_final is what
-- is_final() answers, losses included; before_tracking says that the
-- period began before finalize began observing the table
-- (_tracked_since), so that some or all of its changes were never seen:
-- such a period may be final (docs/periods.md), but it is never covered.
-- A derived table has no facts of its own: its periods are never
-- covered nor exact, and their counts are NULL (unknown), so the release
-- gate checks that they are final and cannot confirm an empty one; nor has
-- a sharded table (its shards have them: ask a shard).
CREATE OR REPLACE FUNCTION @extschema@.changes_by_period(table_name text, from_time timestamptz, to_time timestamptz)
RETURNS TABLE (period_start timestamptz, period_end timestamptz, is_final boolean, covered boolean,
               inserts bigint, updates bigint, deletes bigint,
               straddling_ranges bigint, exact boolean, before_tracking boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    tt @extschema@.tracked_table;
    wm @extschema@.watermark;
    covered_after timestamptz;
    since timestamptz;
BEGIN
    PERFORM finalize_internal.require(changes_by_period.table_name, 'table_name');
    PERFORM finalize_internal.require(from_time, 'from_time');
    PERFORM finalize_internal.require(to_time, 'to_time');
    tt := finalize_internal.tracked(changes_by_period.table_name);
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    -- A period that began before finalize observed the table (or before it
    -- has begun to) holds changes it never saw.
    since := finalize_internal.tracked_since(tt.table_id);
    IF tt.kind IN ('derived', 'sharded') THEN
        RETURN QUERY
        SELECT g.period_start, g.period_end, finalize_internal.final(tt, wm, g.period_start), false,
               NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, false,
               coalesce(g.period_start < since, true)
          FROM finalize_internal.periods(from_time, to_time, tt.granularity, tt.period_zone) AS g;
        RETURN;
    END IF;
    -- Facts count every commit after the end of the oldest range kept.
    SELECT min(f.end_commit_time) INTO covered_after
      FROM @extschema@.fact f WHERE f.table_id = tt.table_id AND f.kind = 'range';
    -- Periods, their ends and finality come from the C period arithmetic
    -- (_periods checks the range and caps it at 100000 periods).
    RETURN QUERY
    WITH periods AS (
        SELECT g.period_start AS ps, g.period_end AS pe,
               g.period_start > coalesce(covered_after, 'infinity') AND NOT EXISTS (
                   SELECT FROM @extschema@.fact e
                    WHERE e.table_id = tt.table_id AND e.event = 'resumed' AND e.detail ->> 'after' = 'data_loss'
                      AND coalesce((e.detail ->> 'lost_from_time')::timestamptz, '-infinity') < g.period_end
                      AND coalesce((e.detail ->> 'lost_to_time')::timestamptz, 'infinity') >= g.period_start)
               AND NOT EXISTS (
                   SELECT FROM @extschema@.loss l
                    WHERE l.table_id = tt.table_id AND l.lost_from < g.period_end AND l.lost_to >= g.period_start) AS covered
          FROM finalize_internal.periods(from_time, to_time, tt.granularity, tt.period_zone) AS g)
    SELECT p.ps, p.pe,
           finalize_internal.final(tt, wm, p.ps),
           p.covered,
           coalesce(sum(f.inserts) FILTER (WHERE f.inside), 0)::bigint,
           coalesce(sum(f.updates) FILTER (WHERE f.inside), 0)::bigint,
           coalesce(sum(f.deletes) FILTER (WHERE f.inside), 0)::bigint,
           count(f.fact_id) FILTER (WHERE NOT f.inside),
           p.covered AND count(f.fact_id) FILTER (WHERE NOT f.inside) = 0
           AND NOT EXISTS (SELECT FROM @extschema@.fact c
                            WHERE c.table_id = tt.table_id AND c.event = 'clock_stepped_back'
                              AND (c.detail ->> 'from')::timestamptz < p.pe
                              AND (c.detail ->> 'to')::timestamptz > p.ps),
           coalesce(p.ps < since, true)
      FROM periods AS p
      LEFT JOIN LATERAL (
            SELECT x.fact_id, x.inserts, x.updates, x.deletes,
                   x.first_commit_time >= p.ps AND x.last_commit_time < p.pe AS inside
              FROM @extschema@.fact x
             WHERE x.table_id = tt.table_id AND x.kind = 'range'
               AND x.end_commit_time >= p.ps
               AND x.last_commit_time >= p.ps
               AND x.first_commit_time < p.pe) f ON true
     GROUP BY p.ps, p.pe, p.covered
     ORDER BY p.ps;
END
$$;
COMMENT ON FUNCTION @extschema@.changes_by_period(text, timestamptz, timestamptz) IS
    'Rows inserted, updated and deleted per period, from the recorded facts';
-- A partition location registered explicitly (the catalog of engines that
-- list partitions).
CREATE TABLE @extschema@.partition_registration (
    table_id       bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    partition      text NOT NULL CHECK (partition <> ''),
    location       text NOT NULL,
    registered_at  timestamptz NOT NULL DEFAULT now(),
    registered_by  name NOT NULL,
    PRIMARY KEY (table_id, partition),
    period_start   timestamptz,
    period_end     timestamptz,
    CONSTRAINT partition_registration_period_check
        CHECK ((period_start IS NULL) = (period_end IS NULL) AND period_end > period_start)
);
COMMENT ON TABLE @extschema@.partition_registration IS
    'Explicitly registered partition locations (prefixes inside the store)';
COMMENT ON COLUMN @extschema@.partition_registration.period_start IS
    'The periods the partition holds, [period_start, period_end), whole periods of its table (NULL: not registered; the manifest must give them)';

-- A projection rule: partitions whose period starts in [range_start,
-- range_end) are visible at the location the template renders (UTC).
CREATE TABLE @extschema@.projection (
    table_id           bigint PRIMARY KEY REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    location_template  text NOT NULL,
    range_start        timestamptz NOT NULL,
    range_end          timestamptz NOT NULL CHECK (range_end > range_start),
    set_at             timestamptz NOT NULL DEFAULT now(),
    set_by             name NOT NULL
);
COMMENT ON TABLE @extschema@.projection IS
    'Partition projection: a location template and the range of periods it makes visible';

-- Every release attempt, with its full comparison report: the report
-- column holds the catalog view, the facts, the problems and a summary of
-- the listing; the manifest is kept as the publisher gave it, and the
-- listing as what differs from it (listing_delta, the compact form of
-- src/gate/inventory_codec.c). finalize.release_report() rebuilds the full
-- report. Attempts stored by 0.1.0 hold the whole listing in report and
-- NULL in the two columns.
CREATE TABLE @extschema@.release (
    release_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_id       bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    partition      text NOT NULL,
    generation     text NOT NULL,
    store          text NOT NULL,
    prefix         text NOT NULL,
    released       boolean NOT NULL,
    period_start   timestamptz,
    problems       jsonb NOT NULL,
    report         jsonb NOT NULL,
    requested_by   name NOT NULL,
    requested_at   timestamptz NOT NULL DEFAULT now(),
    manifest       jsonb,
    listing_delta  bytea,
    period_end     timestamptz
);
CREATE INDEX release_partition_idx ON @extschema@.release (table_id, partition, release_id);
-- Manifests of large partitions hold millions of entries: lz4 compresses
-- them several times faster than pglz, where the server was built with it.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_settings
                WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE @extschema@.release ALTER COLUMN report SET COMPRESSION lz4,
            ALTER COLUMN manifest SET COMPRESSION lz4, ALTER COLUMN listing_delta SET COMPRESSION lz4;
    END IF;
END
$$;
COMMENT ON TABLE @extschema@.release IS
    'Release attempts: manifest, listing, catalog view, problems and outcome';
COMMENT ON COLUMN @extschema@.release.manifest IS
    'The manifest as the publisher gave it (NULL for attempts stored by 0.1.0, whose report holds it)';
COMMENT ON COLUMN @extschema@.release.period_end IS
    'With period_start: the periods the release held and was checked for, [period_start, period_end)';
COMMENT ON COLUMN @extschema@.release.listing_delta IS
    'The listing as what differs from the manifest, front-coded (finalize.release_report rebuilds it)';

-- The published generation of each partition: what readers see.
CREATE TABLE @extschema@.published (
    table_id       bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    partition      text NOT NULL,
    generation     text NOT NULL,
    prefix         text NOT NULL,
    release_id     bigint NOT NULL REFERENCES @extschema@.release,
    published_at   timestamptz NOT NULL,
    PRIMARY KEY (table_id, partition)
);
COMMENT ON TABLE @extschema@.published IS
    'The release marker: the generation readers of each partition see';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.partition_registration', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.projection', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.release', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.published', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.release_release_id_seq', '');

-- Serializes everything that reads or changes the catalog view of one
-- partition until the end of the transaction. First the tracked table's row
-- (shared, so it cannot be untracked meanwhile, and in the order
-- untrack_table locks), then finalize.catalog_lock: the table's row
-- (partition '') shared by releases and registrations and taken exclusively
-- by set_projection, which changes every partition's view, then the
-- partition's row exclusively. Row locks of tables only finalize writes,
-- not advisory locks, whose keys any role could take and hold.
CREATE TABLE @extschema@.catalog_lock (
    table_id   bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    partition  text NOT NULL,
    PRIMARY KEY (table_id, partition)
);
COMMENT ON TABLE @extschema@.catalog_lock IS
    'Rows locked to serialize changes of a partition''s catalog view (partition '''' stands for the whole table)';

-- Where readers may be sent: the published prefixes and the registered
-- locations (with one trailing slash), indexed bytewise so that
-- retired_generations finds overlaps by probes, not by comparing every pair.
CREATE INDEX published_prefix_idx ON @extschema@.published ((prefix COLLATE "C"));
CREATE INDEX partition_registration_location_idx
    ON @extschema@.partition_registration (((rtrim(location, '/') || '/') COLLATE "C"));
-- The release gate: object stores, the catalog view of partitions, release
-- attempts and the published marker of each partition.

-- Object stores are foreign servers of finalize_s3; keys live in user
-- mappings, and the gate uses the calling user's mapping.
CREATE OR REPLACE FUNCTION finalize_internal.s3_validator(options text[], catalog oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_s3_validator'
LANGUAGE C STRICT;

-- Checks a location or path inside a store: relative, no "." or ".." parts,
-- no empty parts; the error names the argument.
CREATE OR REPLACE FUNCTION finalize_internal.check_location(location text, argname text, trailing_slash boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(location, argname);
    IF location = '' OR location LIKE '/%' OR location ~ '(^|/)\.\.?(/|$)' OR location ~ '//'
       OR (NOT trailing_slash AND location LIKE '%/') THEN
        RAISE EXCEPTION 'invalid value for argument %: "%"', argname, location
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A location is a relative path inside the store, without a leading /, without empty, "." or ".." parts.';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION finalize_internal.lock_table_catalog(table_id bigint, exclusive boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM FROM @extschema@.tracked_table t
     WHERE t.table_id = lock_table_catalog.table_id AND t.untracked_at IS NULL FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tracked table with id % was untracked meanwhile', table_id
            USING ERRCODE = 'serialization_failure',
                  DETAIL = 'It was untracked (and perhaps tracked again under a new id) during the call; nothing was released or registered.',
                  HINT = 'Try again.';
    END IF;
    INSERT INTO @extschema@.catalog_lock VALUES (table_id, '') ON CONFLICT DO NOTHING;
    IF exclusive THEN
        PERFORM FROM @extschema@.catalog_lock c WHERE c.table_id = lock_table_catalog.table_id AND c.partition = '' FOR UPDATE;
    ELSE
        PERFORM FROM @extschema@.catalog_lock c WHERE c.table_id = lock_table_catalog.table_id AND c.partition = '' FOR SHARE;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION finalize_internal.lock_partition(table_id bigint, partition text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM finalize_internal.lock_table_catalog(table_id, false);
    INSERT INTO @extschema@.catalog_lock VALUES (table_id, partition) ON CONFLICT DO NOTHING;
    PERFORM FROM @extschema@.catalog_lock c
     WHERE c.table_id = lock_partition.table_id AND c.partition = lock_partition.partition FOR UPDATE;
END
$$;

-- The body of finalize.register_partition, run as the extension's owner by its C entry
-- point (owner.c) with the caller taken before the switch.
CREATE OR REPLACE FUNCTION finalize_internal.register_partition(
    caller name,
    table_name text, partition text, location text,
    period_start timestamptz DEFAULT NULL, period_end timestamptz DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    span_end timestamptz;
BEGIN
    PERFORM finalize_internal.require(partition, 'partition');
    PERFORM finalize_internal.check_location(location, 'location', true);
    IF period_end IS NOT NULL AND period_start IS NULL THEN
        RAISE EXCEPTION 'argument period_end needs period_start'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Give the start of the first period the partition holds as well.';
    END IF;
    -- Whole periods of the table, so that the gate checks the right ones.
    IF period_start IS NOT NULL THEN
        span_end := finalize_internal.check_period_span(period_start, period_end, tt.granularity, tt.period_zone,
                                                   format('partition "%s" of "%s"', partition, tt.table_name));
    END IF;
    PERFORM finalize_internal.lock_partition(tt.table_id, partition);
    INSERT INTO @extschema@.partition_registration AS r (table_id, partition, location, registered_by,
                                                         period_start, period_end)
    VALUES (tt.table_id, partition, location, caller, period_start, span_end)
    ON CONFLICT ON CONSTRAINT partition_registration_pkey DO UPDATE
       SET location = excluded.location, registered_at = now(), registered_by = excluded.registered_by,
           period_start = excluded.period_start, period_end = excluded.period_end;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.register_partition(table_name text, partition text, location text,
                                               period_start timestamptz DEFAULT NULL,
                                               period_end timestamptz DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.register_partition(text, text, text, timestamptz, timestamptz) IS
    'Register (or move) the location of a partition in the catalog view, with the periods it holds';

-- The periods registered with a partition (no row when it is not
-- registered; NULLs when it was registered without them).
CREATE OR REPLACE FUNCTION finalize_internal.registered_period(table_id bigint, partition text,
                                               OUT period_start timestamptz, OUT period_end timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT r.period_start, r.period_end FROM @extschema@.partition_registration r
     WHERE r.table_id = registered_period.table_id AND r.partition = registered_period.partition;
END;

-- Renders a projection template for a period start, in the local time of
-- the table's zone (zero-padded): dt={date} is the local date of a local
-- day. A period that starts at the end of a DST gap renders the local time
-- it starts at.
CREATE OR REPLACE FUNCTION @extschema@.render_location(location_template text, period_start timestamptz, zone text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN replace(replace(replace(replace(replace(replace(location_template,
        '{year}', to_char(timezone(zone, period_start), 'YYYY')),
        '{month}', to_char(timezone(zone, period_start), 'MM')),
        '{day}', to_char(timezone(zone, period_start), 'DD')),
        '{hour}', to_char(timezone(zone, period_start), 'HH24')),
        '{minute}', to_char(timezone(zone, period_start), 'MI')),
        '{date}', to_char(timezone(zone, period_start), 'YYYY-MM-DD'));
COMMENT ON FUNCTION @extschema@.render_location(text, timestamptz, text) IS
    'The location a projection template gives a period (placeholders {year} {month} {day} {hour} {minute} {date}, in the local time of the zone)';

-- The same for a shard's partition of a sharded table: {shard} is the
-- shard's label (as in shard={shard}/dt={date}/).
CREATE OR REPLACE FUNCTION @extschema@.render_location(location_template text, period_start timestamptz, zone text, shard text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN replace(@extschema@.render_location(location_template, period_start, zone), '{shard}', shard);
COMMENT ON FUNCTION @extschema@.render_location(text, timestamptz, text, text) IS
    'The location a projection template gives a period of a shard (placeholders {year} {month} {day} {hour} {minute} {date} in the local time of the zone, and {shard})';

CREATE OR REPLACE FUNCTION @extschema@.render_location(location_template text, period_start timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.render_location(location_template, period_start, 'UTC');
COMMENT ON FUNCTION @extschema@.render_location(text, timestamptz) IS
    'The location a projection template gives a period (placeholders {year} {month} {day} {hour} {minute} {date}, UTC)';

-- The body of finalize.set_projection, run as the extension's owner by its C entry
-- point (owner.c) with the caller taken before the switch.
CREATE OR REPLACE FUNCTION finalize_internal.set_projection(
    caller name,
    table_name text, location_template text,
                                           range_start timestamptz, range_end timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    id bigint := tt.table_id;
    rest text;
BEGIN
    PERFORM finalize_internal.require(location_template, 'location_template');
    PERFORM finalize_internal.require(range_start, 'range_start');
    PERFORM finalize_internal.require(range_end, 'range_end');
    rest := regexp_replace(location_template, '\{(year|month|day|hour|minute|date|shard)\}', '', 'g');
    IF rest ~ '[{}]' OR location_template !~ '\{(year|month|day|hour|minute|date)\}' THEN
        RAISE EXCEPTION 'invalid value for argument location_template: "%"', location_template
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A template uses the placeholders {year}, {month}, {day}, {hour}, {minute} and {date} (the local date, YYYY-MM-DD, in the table''s period_zone), on a sharded table also {shard}, and no other braces.',
                  HINT = 'For example ''dt={date}/'' or ''year={year}/month={month}/day={day}/hour={hour}/''.';
    END IF;
    -- {shard} is the label of a shard of a sharded table (finalize.add_shard).
    IF location_template ~ '\{shard\}' AND tt.kind <> 'sharded' THEN
        RAISE EXCEPTION 'invalid value for argument location_template: table "%" is not sharded, so it has no {shard}', tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The placeholder {shard} is the label of the shard a partition of a sharded table holds (finalize.track_sharded, finalize.add_shard).',
                  HINT = 'Remove {shard} from the template.';
    END IF;
    PERFORM finalize_internal.check_location(@extschema@.render_location(location_template, range_start,
                                                                    (finalize_internal.tracked(table_name)).period_zone),
                                        'location_template', true);
    IF range_end <= range_start THEN
        RAISE EXCEPTION 'invalid projection range from % to %', range_start, range_end
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'range_end must be after range_start.';
    END IF;
    PERFORM finalize_internal.lock_table_catalog(id, true);
    INSERT INTO @extschema@.projection AS p (table_id, location_template, range_start, range_end, set_by)
    VALUES (id, location_template, range_start, range_end, caller)
    ON CONFLICT ON CONSTRAINT projection_pkey DO UPDATE
       SET location_template = excluded.location_template, range_start = excluded.range_start,
           range_end = excluded.range_end, set_at = now(), set_by = excluded.set_by;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.set_projection(table_name text, location_template text,
                                           range_start timestamptz, range_end timestamptz)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.set_projection(text, text, timestamptz, timestamptz) IS
    'Declare partition projection for a table: a location template and the range of visible periods';

-- Why a partition of a sharded table cannot be released as shard
-- `shard`'s alone, judged by that shard's verdict (NULL when it can). A
-- shard's verdict decides only a partition the catalog binds to that
-- shard: one whose key names it (shard=<label>), or one that is not
-- registered and that the table's projection places by a template with
-- {shard} (rendered with the shard: the only location the gate then
-- accepts). A registered location, or a template without {shard}, may
-- hold every shard, whatever the manifest's "shard" says. And a partition
-- keeps the scope it was published with: its marker is keyed by the
-- partition alone, so a partition published as every shard's, or as
-- another shard's, is never published again as this shard's (its readers
-- would be sent to one shard's data, judged by one shard's verdict, where
-- they read more or other). The gate asks before the partition's lock
-- (_gate_table) and again after it (_catalog_view).
CREATE OR REPLACE FUNCTION finalize_internal.shard_scope_problem(table_id bigint, partition text, shard text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    sharded text;
    reg @extschema@.partition_registration;
    template text;
    pub_generation text;
    pub_shard text;
BEGIN
    IF shard IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT t.table_name INTO sharded FROM @extschema@.tracked_table t WHERE t.table_id = shard_scope_problem.table_id;
    IF NOT shard = ANY (ARRAY(SELECT m[1] FROM regexp_matches(partition, '(?:^|/)shard=([^/]*)', 'g') AS m)) THEN
        SELECT r.* INTO reg FROM @extschema@.partition_registration r
         WHERE r.table_id = shard_scope_problem.table_id AND r.partition = shard_scope_problem.partition;
        IF FOUND THEN
            RETURN format('Partition "%s" of sharded table "%s" names no shard (shard=<label>), and the catalog registers it at "%s", a location that may hold every shard, so it cannot be released as shard "%s"''s alone: it is checked as a partition of every shard. Name the shard in the partition key (shard=%s/...), or leave "shard" out of the manifest to release it once every shard is final.',
                          partition, sharded, reg.location, left(shard, 63), left(shard, 63));
        END IF;
        SELECT p.location_template INTO template FROM @extschema@.projection p
         WHERE p.table_id = shard_scope_problem.table_id;
        IF template IS NULL OR strpos(template, '{shard}') = 0 THEN
            RETURN format('Partition "%s" of sharded table "%s" names no shard (shard=<label>), and %s, so it cannot be released as shard "%s"''s alone: it is checked as a partition of every shard. Name the shard in the partition key (shard=%s/...), project the table with {shard} in its template, or leave "shard" out of the manifest to release it once every shard is final.',
                          partition, sharded,
                          CASE WHEN template IS NULL THEN 'the catalog neither registers nor projects it'
                               ELSE format('the projection places it by template "%s", which has no {shard} and may hold every shard', template) END,
                          left(shard, 63), left(shard, 63));
        END IF;
    END IF;
    SELECT p.generation, r.report -> 'catalog' ->> 'shard' INTO pub_generation, pub_shard
      FROM @extschema@.published p JOIN @extschema@.release r ON r.release_id = p.release_id
     WHERE p.table_id = shard_scope_problem.table_id AND p.partition = shard_scope_problem.partition;
    IF FOUND AND pub_shard IS DISTINCT FROM shard THEN
        RETURN format('Partition "%s" of sharded table "%s" is published as %s (generation "%s"), and a partition has one marker whatever shard it holds: released as shard "%s"''s, it would send its readers to %s. It is checked as a partition of every shard. %s keys of their own (shard=%s/...).',
                      partition, sharded,
                      CASE WHEN pub_shard IS NULL THEN 'a partition of every shard'
                           ELSE format('shard "%s"''s partition', pub_shard) END,
                      pub_generation, left(shard, 63),
                      CASE WHEN pub_shard IS NULL
                           THEN 'one shard''s data, judged by that shard''s verdict alone, where they read every shard''s'
                           ELSE 'another shard''s data' END,
                      CASE WHEN pub_shard IS NULL THEN 'Release it without "shard", or give each shard''s partitions'
                           ELSE 'Give each shard''s partitions' END,
                      left(shard, 63));
    END IF;
    RETURN NULL;
END
$$;

-- What else the catalog places at or inside a generation's location
-- ("location", ending in "/"): a partition released there on the verdict
-- of one shard and of the periods [period_start, period_end) is complete
-- only if the location holds nothing of another shard or of other
-- periods. The other partitions' registered locations and published
-- prefixes (Iceberg releases aside, whose files are their snapshots'), and
-- what a projection renders for the periods next to these, of the table
-- and of every table of its sharded table (the sharded table and each
-- shard, dropped ones included: their files stay), are such evidence: a
-- template without {shard} places every shard's partition of a period at
-- one location, a coarser template (dt={date}/ on an hourly table) the
-- neighbouring periods, one without {date} or {day} (h={hour}/) the same
-- hour of every day of its range, and a location registered for two
-- shards holds both. At most one row per problem, the first such entry by location:
-- unknown_shard when the release is one shard's (scope: the sharded
-- table's partition of shard "shard", or a shard named as the table) and
-- the entry holds another shard or every shard (holds NULL),
-- catalog_mismatch when the entry's periods, [entry_start, entry_end)
-- (NULL: not known), are not inside the release's. entry says what the
-- catalog does, for the problem's detail.
CREATE OR REPLACE FUNCTION finalize_internal.location_sharers(table_id bigint, partition text, location text,
                                              period_start timestamptz, period_end timestamptz, shard text)
RETURNS TABLE (code text, entry text, holds text, entry_start timestamptz, entry_end timestamptz,
               scope text, sharded_table text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
    root bigint;
    label text;
    upper text := left(location, -1) || '0';
    near timestamptz[];
BEGIN
    SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = location_sharers.table_id;
    root := coalesce(tt.shard_of, tt.table_id);
    label := CASE WHEN tt.shard_of IS NOT NULL THEN tt.shard ELSE shard END;
    -- The period before the partition's, its first one and the one after it
    -- (a coarser template's neighbours), and the periods an hour, a day, a
    -- month or two, a year or four away in local time (where a template
    -- without {hour}, {day}, {month} or {year} places them again: day 31 is
    -- back within two months, February 29 within four years).
    near := ARRAY[@extschema@.period_start(period_start - interval '1 microsecond', tt.granularity, tt.period_zone),
                  period_start, period_end]
            || ARRAY(SELECT @extschema@.period_start(timezone(tt.period_zone, timezone(tt.period_zone, period_start) + x.d),
                                                     tt.granularity, tt.period_zone)
                       FROM unnest(ARRAY['1 hour', '1 day', '1 month', '2 months', '1 year', '4 years']::interval[]) AS s(d)
                      CROSS JOIN LATERAL (VALUES (s.d), (-s.d)) AS x(d));
    RETURN QUERY
    WITH family AS (
        SELECT x.table_id, x.table_name, x.shard FROM @extschema@.tracked_table x
         WHERE x.table_id = root OR x.shard_of = root),
    entries AS (
        SELECT rtrim(g.location, '/') || '/' AS at,
               format('registers partition "%s" of "%s" at "%s"', g.partition, f.table_name, g.location) AS what,
               coalesce(f.shard, (regexp_match(g.partition, '(?:^|/)shard=([^/]*)'))[1]) AS holder,
               g.period_start AS p_start, g.period_end AS p_end
          FROM @extschema@.partition_registration g JOIN family f ON f.table_id = g.table_id
         WHERE ((rtrim(g.location, '/') || '/') COLLATE "C") >= (location COLLATE "C")
           AND ((rtrim(g.location, '/') || '/') COLLATE "C") < (upper COLLATE "C")
           AND NOT (g.table_id = location_sharers.table_id AND g.partition = location_sharers.partition)
        UNION ALL
        SELECT q.prefix,
               format('publishes generation "%s" of partition "%s" of "%s" at "%s"', q.generation, q.partition,
                      f.table_name, q.prefix),
               coalesce(f.shard, r.report -> 'catalog' ->> 'shard'), r.period_start, r.period_end
          FROM @extschema@.published q JOIN family f ON f.table_id = q.table_id
          JOIN @extschema@.release r ON r.release_id = q.release_id
         WHERE (q.prefix COLLATE "C") >= (location COLLATE "C") AND (q.prefix COLLATE "C") < (upper COLLATE "C")
           AND NOT (q.table_id = location_sharers.table_id AND q.partition = location_sharers.partition)
           AND NOT coalesce(r.manifest ? 'iceberg', false)
        UNION ALL
        SELECT v.at,
               format('projects %s of "%s" at "%s" (template "%s")',
                      CASE WHEN v.holder IS NOT NULL THEN format('shard "%s"''s partition', v.holder)
                           WHEN tt.kind = 'sharded' OR tt.shard_of IS NOT NULL THEN 'every shard''s partition'
                           ELSE 'the partition' END, f.table_name, v.at, j.location_template),
               v.holder, c.p, @extschema@.period_end(c.p, tt.granularity, tt.period_zone)
          FROM @extschema@.projection j JOIN family f ON f.table_id = j.table_id
         CROSS JOIN LATERAL unnest(near) AS c(p)
         -- A shard's own template renders its shard; a sharded table's with
         -- {shard} every shard it ever had; one without {shard}, every shard.
         CROSS JOIN LATERAL (
             SELECT coalesce(f.shard, s.label) AS holder,
                    @extschema@.render_location(j.location_template, c.p, tt.period_zone,
                                                coalesce(f.shard, s.label, '{shard}')) AS at
               FROM (SELECT x.shard FROM @extschema@.tracked_table x
                      WHERE f.shard IS NULL AND strpos(j.location_template, '{shard}') > 0 AND x.shard_of = f.table_id
                     UNION ALL
                     SELECT NULL WHERE f.shard IS NOT NULL OR strpos(j.location_template, '{shard}') = 0) AS s(label)) AS v
         WHERE c.p >= j.range_start AND c.p < j.range_end AND starts_with(v.at, location)),
    problems AS (
        SELECT 'unknown_shard' AS code, e.* FROM entries e
         WHERE label IS NOT NULL AND e.holder IS DISTINCT FROM label
        UNION ALL
        SELECT 'catalog_mismatch', e.* FROM entries e
         WHERE NOT coalesce(e.p_start >= period_start AND e.p_end <= period_end, false))
    SELECT DISTINCT ON (p.code) p.code, p.what, p.holder, p.p_start, p.p_end, label,
           (SELECT t.table_name FROM @extschema@.tracked_table t WHERE t.table_id = root)
      FROM problems p
     ORDER BY p.code, p.at COLLATE "C", p.p_start DESC NULLS FIRST, p.what;
END
$$;

-- The catalog view of one partition, as the gate sees it: where the catalog
-- points (registration first, else projection), or why it cannot. shard:
-- the label of the shard the partition holds, on a sharded table ({shard}
-- of a projection; without one the template keeps it, and places the
-- partition nowhere a generation is). The gate reads it once it holds the
-- partition's lock: the shard it judges the partition by (_gate_table,
-- before the lock) must still be one the catalog binds the partition to,
-- else a registration, projection or release committed meanwhile changed
-- that and nothing is released (serialization failure; a retry reports
-- why).
CREATE OR REPLACE FUNCTION finalize_internal.catalog_view(table_id bigint, partition text, period_start timestamptz, shard text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    reg @extschema@.partition_registration;
    proj @extschema@.projection;
    zone text;
    unbound text;
BEGIN
    unbound := finalize_internal.shard_scope_problem(table_id, partition, shard);
    IF unbound IS NOT NULL THEN
        RAISE EXCEPTION 'could not serialize access to the catalog of partition "%" of "%"', partition,
                        (SELECT t.table_name FROM @extschema@.tracked_table t WHERE t.table_id = catalog_view.table_id)
            USING ERRCODE = 'serialization_failure',
                  DETAIL = format('Another transaction changed the catalog view or the published marker of the partition while the gate checked it as shard "%s"''s; nothing was released. %s',
                                  left(shard, 63), unbound),
                  HINT = 'Retry the release: the gate then reports what the catalog says now.';
    END IF;
    SELECT r.* INTO reg FROM @extschema@.partition_registration r
     WHERE r.table_id = catalog_view.table_id AND r.partition = catalog_view.partition;
    IF FOUND THEN
        RETURN jsonb_build_object('source', 'registration', 'location', reg.location,
                                  'registered_at', reg.registered_at, 'registered_by', reg.registered_by)
               || CASE WHEN reg.period_start IS NOT NULL
                       THEN jsonb_build_object('period_start', reg.period_start, 'period_end', reg.period_end)
                       ELSE '{}' END
               || CASE WHEN shard IS NOT NULL THEN jsonb_build_object('shard', shard) ELSE '{}' END;
    END IF;
    SELECT p.* INTO proj FROM @extschema@.projection p WHERE p.table_id = catalog_view.table_id;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('source', 'none');
    END IF;
    IF period_start IS NULL THEN
        RETURN jsonb_build_object('source', 'projection', 'template', proj.location_template,
                                  'range_start', proj.range_start, 'range_end', proj.range_end,
                                  'location', NULL)
               || CASE WHEN shard IS NOT NULL THEN jsonb_build_object('shard', shard) ELSE '{}' END;
    END IF;
    SELECT t.period_zone INTO zone FROM @extschema@.tracked_table t WHERE t.table_id = catalog_view.table_id;
    RETURN jsonb_build_object('source', 'projection', 'template', proj.location_template,
                              'range_start', proj.range_start, 'range_end', proj.range_end,
                              'in_range', period_start >= proj.range_start AND period_start < proj.range_end,
                              'location', @extschema@.render_location(proj.location_template, period_start, zone,
                                                                      coalesce(shard, '{shard}')))
           || CASE WHEN shard IS NOT NULL THEN jsonb_build_object('shard', shard) ELSE '{}' END;
END
$$;

-- The catalog view of a partition as typed columns, for the gate's C code
-- (which then needs no operators of its own).
CREATE OR REPLACE FUNCTION finalize_internal.gate_catalog(table_id bigint, partition text, period_start timestamptz, shard text)
RETURNS TABLE (catalog jsonb, source text, location text, in_range boolean, range_start text,
               range_end text, registered_at text, registered_by text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT c, c ->> 'source', c ->> 'location', (c ->> 'in_range')::boolean, c ->> 'range_start',
           c ->> 'range_end', c ->> 'registered_at', c ->> 'registered_by'
      FROM finalize_internal.catalog_view(table_id, partition, period_start, shard) AS c;
END;

-- The manifest's table as the gate checks it (or the not-tracked error):
-- its id and periods, the table whose verdict and facts decide whether the
-- partition's periods are final (verdict_table), and on a sharded table
-- the shard the partition holds: the partition key's shard=<label>, else
-- the manifest's "shard" (manifest_shard) where the catalog binds the
-- partition to it (_shard_scope_problem). A shard's partition is final
-- when that shard is; a partition of no shard, when every shard is. A
-- "shard" the catalog does not bind the partition to, or that is not the
-- scope the partition was published with, is never believed:
-- the partition is checked as one of every shard (shard NULL) and
-- shard_problem says why (the gate's problem unknown_shard, so it is not
-- released). A partition of a shard the table does not have gets no
-- verdict_table and says why in shard_problem too, and so does a shard
-- named as the table whose partition key names another. A "shard" on a table
-- that is not sharded, or one that the partition key contradicts, is a
-- malformed manifest (22023).
CREATE OR REPLACE FUNCTION finalize_internal.gate_table(table_name text, partition text, manifest_shard text)
RETURNS TABLE (table_id bigint, granularity interval, period_zone text, verdict_table text, shard text,
               shard_problem text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(gate_table.table_name);
    named text[];
    label text;
    part text;
    dropped timestamptz;
    unbound text;
BEGIN
    IF tt.kind <> 'sharded' THEN
        IF manifest_shard IS NOT NULL THEN
            RAISE EXCEPTION 'invalid manifest: field "shard" names a shard of table "%", which is not sharded', tt.table_name
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'Only a sharded table (finalize.track_sharded) has shards.',
                      HINT = 'Remove "shard" from the manifest, or name the sharded table in "table".';
        END IF;
        -- A shard named as the table releases its own partitions: a key
        -- naming another shard holds that shard's rows.
        named := ARRAY(SELECT DISTINCT m[1] FROM regexp_matches(gate_table.partition, '(?:^|/)shard=([^/]*)', 'g') AS m
                        WHERE tt.shard_of IS NOT NULL AND m[1] <> tt.shard ORDER BY 1);
        RETURN QUERY
        SELECT tt.table_id, tt.granularity, tt.period_zone, tt.table_name, NULL::text,
               CASE WHEN cardinality(named) > 0
                    THEN format('Table "%s" is shard "%s" of sharded table "%s", but partition "%s" names shard "%s": it holds that shard''s rows, which shard "%s"''s verdict cannot release. Release it as "%s/%s", or as "%s" (whose partitions are final when the shard their key names is).',
                                tt.table_name, tt.shard, s.table_name, gate_table.partition, left(named[1], 63),
                                tt.shard, s.table_name, left(named[1], 63), s.table_name) END
          FROM (SELECT NULL) AS one
          LEFT JOIN @extschema@.tracked_table s ON s.table_id = tt.shard_of;
        RETURN;
    END IF;
    named := ARRAY(SELECT DISTINCT m[1] FROM regexp_matches(gate_table.partition, '(?:^|/)shard=([^/]*)', 'g') AS m
                    ORDER BY 1);
    IF cardinality(named) > 1 THEN
        RAISE EXCEPTION 'invalid manifest: field "partition" names % shards (%)', cardinality(named),
                        array_to_string(named, ', ')
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('A partition of sharded table "%s" holds one shard (shard=<label>) or all of them (no shard).', tt.table_name);
    END IF;
    IF manifest_shard IS NOT NULL AND named[1] IS NOT NULL AND named[1] <> manifest_shard THEN
        RAISE EXCEPTION 'invalid manifest: field "shard" is "%" but the partition key "%" names shard "%"',
                        manifest_shard, gate_table.partition, named[1]
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Give the shard the partition holds, or leave "shard" out.';
    END IF;
    label := coalesce(named[1], manifest_shard);
    IF label IS NULL THEN
        RETURN QUERY SELECT tt.table_id, tt.granularity, tt.period_zone, tt.table_name, NULL::text, NULL::text;
        RETURN;
    END IF;
    -- Never one shard's verdict for a partition that may hold more.
    unbound := finalize_internal.shard_scope_problem(tt.table_id, gate_table.partition, label);
    IF unbound IS NOT NULL THEN
        RETURN QUERY SELECT tt.table_id, tt.granularity, tt.period_zone, tt.table_name, NULL::text, unbound;
        RETURN;
    END IF;
    SELECT t.table_name INTO part FROM @extschema@.tracked_table t
     WHERE t.shard_of = tt.table_id AND t.shard = label AND t.untracked_at IS NULL;
    IF FOUND THEN
        RETURN QUERY SELECT tt.table_id, tt.granularity, tt.period_zone, part, label, NULL::text;
        RETURN;
    END IF;
    SELECT max(t.untracked_at) INTO dropped FROM @extschema@.tracked_table t
     WHERE t.shard_of = tt.table_id AND t.shard = label;
    RETURN QUERY
    SELECT tt.table_id, tt.granularity, tt.period_zone, NULL::text, label,
           format('Partition "%s" holds shard "%s", which sharded table "%s" %s, so whether its periods are final cannot be checked: check the partition key (or the manifest''s "shard"), or add the shard with finalize.add_shard(%L, %L, ...).',
                  gate_table.partition, left(label, 63), tt.table_name,
                  CASE WHEN dropped IS NOT NULL THEN format('no longer has (it was dropped at %s)', dropped)
                       ELSE 'does not have' END,
                  tt.table_name, left(label, 63));
END
$$;

-- What the CDC facts say about the periods [period_start, period_end) of a
-- release (whole periods of the table): final when every one is (losses
-- included), covered and exact when every one is, the changes in them, and
-- why the first one that is not final is not (explain_verdict). Finality
-- comes from the C period arithmetic, through changes_by_period.
CREATE OR REPLACE FUNCTION finalize_internal.period_facts(table_name text, period_start timestamptz, period_end timestamptz)
RETURNS TABLE (facts jsonb, is_final boolean, covered boolean, exact boolean, changes bigint,
               straddling_ranges bigint, not_final_reason text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- An event-time table's partitions hold event periods: their facts are
    -- the rows per event period (with the late ones), not per commit time.
    IF (finalize_internal.tracked(period_facts.table_name)).event_time_column IS NOT NULL THEN
        RETURN QUERY
        SELECT jsonb_build_object('period_start', min(c.period_start), 'period_end', max(c.period_end),
                                  'periods', count(*), 'is_final', bool_and(c.is_final),
                                  'covered', bool_and(c.covered), 'exact', bool_and(c.exact),
                                  'inserts', sum(c.inserts), 'updates', sum(c.updates), 'deletes', sum(c.deletes),
                                  'late_rows', sum(c.late_rows), 'partitioned_by', 'event_time'),
               bool_and(c.is_final), bool_and(c.covered), bool_and(c.exact),
               sum(c.inserts + c.updates + c.deletes)::bigint, sum(c.straddling_ranges)::bigint,
               (@extschema@.explain_verdict(period_facts.table_name,
                                            min(c.period_start) FILTER (WHERE NOT c.is_final))).reason
          FROM @extschema@.changes_by_event_period(period_facts.table_name, period_facts.period_start,
                                                   period_facts.period_end) AS c;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT jsonb_build_object('period_start', min(c.period_start), 'period_end', max(c.period_end),
                              'periods', count(*), 'is_final', bool_and(c.is_final),
                              'covered', bool_and(c.covered), 'exact', bool_and(c.exact),
                              'inserts', sum(c.inserts), 'updates', sum(c.updates), 'deletes', sum(c.deletes),
                              'straddling_ranges', sum(c.straddling_ranges)),
           bool_and(c.is_final), bool_and(c.covered), bool_and(c.exact),
           sum(c.inserts + c.updates + c.deletes)::bigint, sum(c.straddling_ranges)::bigint,
           (@extschema@.explain_verdict(period_facts.table_name,
                                        min(c.period_start) FILTER (WHERE NOT c.is_final))).reason
      FROM @extschema@.changes_by_period(period_facts.table_name, period_facts.period_start,
                                         period_facts.period_end) AS c;
END
$$;

-- Why a partition must not be released as it is, or NULL: late rows
-- landed in its periods [period_start, period_end) after they were
-- declared final (a late_period span that overlaps them, which may be a
-- period of other periods the table had then): rows of an event-time
-- table in a final event period, or commits of a commit-time table that
-- SQL Server's clock, stepped back, stamped in a final period
-- (_store_late_commits); and this generation does not say it was built
-- after the last of them (the manifest's built_at): a correction is due.
-- Without built_at only a partition whose late rows all landed before its
-- previous release passes: that release's generation was checked against
-- them. A commit-time table whose clock went back into these periods
-- after they were final (a clock_stepped_back event that ran ahead) and
-- whose reads have not passed the commit times read before the step yet
-- (the source held, or its clock still behind them) may still get late
-- commits there, unread or unstamped: no generation can hold them, so
-- none passes until its reads do. On a sharded table the late rows and
-- steps are those of the partition's shard, or of every shard for a
-- partition of no shard (shard NULL).
CREATE OR REPLACE FUNCTION finalize_internal.late_data_problem(table_name text, partition text, period_start timestamptz,
                                               period_end timestamptz, built_at timestamptz, shard text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    ids bigint[];
    step jsonb;
    late_rows bigint;
    last_seen timestamptz;
    pub @extschema@.published;
BEGIN
    IF tt.kind = 'sharded' THEN
        ids := ARRAY(SELECT x.table_id FROM @extschema@.tracked_table x
                      WHERE x.shard_of = tt.table_id AND (shard IS NULL OR x.shard = shard));
    ELSE
        ids := ARRAY[tt.table_id];
    END IF;
    IF tt.event_time_column IS NULL THEN
        SELECT c.detail INTO step
          FROM @extschema@.fact c
          JOIN @extschema@.watermark w ON w.table_id = c.table_id
         WHERE c.table_id = ANY (ids) AND c.event = 'clock_stepped_back'
           AND (c.detail ->> 'ran_ahead')::boolean
           AND (c.detail ->> 'from')::timestamptz < period_end AND (c.detail ->> 'to')::timestamptz > period_start
           AND NOT coalesce(w.offset_commit_time > (c.detail ->> 'after_commit_time')::timestamptz, false)
         ORDER BY c.fact_id DESC LIMIT 1;
        IF step IS NOT NULL THEN
            RETURN format('SQL Server''s clock was stepped back to %s, into this partition''s periods after they were declared final (commits stamped up to %s had been read): commits stamped in them may not all be read yet, so no generation can be known to hold them. They are read once the source is not held (finalize.release_source) and its clock has passed %s; then release a generation built after the last of them (finalize.late_data says when), with "built_at" in its manifest.',
                          step ->> 'commit_time', step ->> 'after_commit_time', step ->> 'after_commit_time');
        END IF;
    END IF;
    SELECT sum(l.rows), max(l.last_seen) INTO late_rows, last_seen FROM @extschema@.late_period l
     WHERE l.table_id = ANY (ids) AND l.event_period < period_end AND l.period_end > period_start;
    IF last_seen IS NULL OR built_at >= last_seen THEN
        RETURN NULL;
    END IF;
    SELECT p.* INTO pub FROM @extschema@.published p
     WHERE p.table_id = tt.table_id AND p.partition = late_data_problem.partition;
    IF built_at IS NULL AND FOUND AND pub.published_at >= last_seen THEN
        RETURN NULL;
    END IF;
    RETURN format('%s late row(s) %s after they were declared final (the last at %s)%s: a correction is due. Write a generation that includes them and give "built_at" (when its data was read, at or after %s) in its manifest.',
                  late_rows,
                  CASE WHEN tt.event_time_column IS NOT NULL THEN 'landed in this partition''s event periods'
                       ELSE 'were stamped in this partition''s periods by SQL Server''s clock, stepped back,' END,
                  last_seen,
                  CASE WHEN built_at IS NOT NULL THEN format(', after this generation was built (%s)', built_at)
                       WHEN pub.generation IS NOT NULL
                       THEN format(', after generation "%s" was released (%s)', pub.generation, pub.published_at)
                       ELSE ', and this manifest does not say when its data was read' END,
                  last_seen);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.release_gate(manifest jsonb,
                                         OUT released boolean, OUT generation text, OUT problems jsonb)
RETURNS record
AS 'MODULE_PATHNAME', 'finalize_release_gate'
LANGUAGE C VOLATILE
-- It runs parts as the extension's owner: the caller's search_path must not
-- reach them (its SPI text is schema-qualified as well).
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.release_gate(jsonb) IS
    'Compare a partition''s manifest, the object-store listing and the catalog; publish the generation if they agree';

-- The comparison alone, on a listing given as jsonb ({"key": size} or
-- {"key": {"size": n, "etag": "..."}}): for tests, benchmarks and dry runs.
CREATE OR REPLACE FUNCTION @extschema@.compare_inventories(manifest_files jsonb, listing jsonb, prefix text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'finalize_compare_inventories'
LANGUAGE C IMMUTABLE;
COMMENT ON FUNCTION @extschema@.compare_inventories(jsonb, jsonb, text) IS
    'The problems the gate finds between a manifest''s files and a listing under a prefix';

-- A release attempt's full report: the stored one with the manifest's files
-- and the listing put back (rebuilt from the manifest and listing_delta).
CREATE OR REPLACE FUNCTION @extschema@.release_report(release_id bigint)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'finalize_release_report'
LANGUAGE C STABLE STRICT
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.release_report(bigint) IS
    'The full report of a release attempt: manifest files, listing, catalog view, facts and problems';

CREATE OR REPLACE FUNCTION @extschema@.released_generation(table_name text, partition text)
RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN (SELECT p.generation FROM @extschema@.published p
         WHERE p.table_id = finalize_internal.tracked_id(table_name) AND p.partition = released_generation.partition);
COMMENT ON FUNCTION @extschema@.released_generation(text, text) IS
    'The published generation of a partition (NULL if none was released)';

-- Every release attempt: who, when, what, outcome.
CREATE OR REPLACE VIEW @extschema@.releases AS
SELECT r.release_id, t.table_name, r.partition, r.generation, r.released,
       jsonb_array_length(r.problems) AS problem_count, r.problems,
       r.store, r.prefix, r.requested_by, r.requested_at,
       p.release_id IS NOT NULL AS current
  FROM @extschema@.release r
  JOIN @extschema@.tracked_table t USING (table_id)
  LEFT JOIN @extschema@.published p ON p.release_id = r.release_id;
COMMENT ON VIEW @extschema@.releases IS
    'Release attempts with who, when and the outcome; current marks the published one';

CREATE OR REPLACE FUNCTION finalize_internal.generation_retention()
RETURNS interval
AS 'MODULE_PATHNAME', 'finalize_generation_retention'
LANGUAGE C STABLE;

-- The prefixes a prefix lies inside: "a/", "a/b/" and "a/b/c/" for "a/b/c/".
CREATE OR REPLACE FUNCTION finalize_internal.ancestor_prefixes(prefix text)
RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN ARRAY(SELECT left(prefix, p) FROM generate_series(1, length(prefix)) AS p WHERE substr(prefix, p, 1) = '/');

-- Whether a generation's prefix (ending in "/") contains or lies inside a
-- location readers may be sent to: a published prefix or a registered
-- location of any partition, or what a projection gives its period: its
-- table's, or another's of its sharded table (a shard's generation inside
-- the sharded table's projected location is live data too), rendered for
-- every shard ({shard}). Descendants are a range: in bytewise order every
-- key starting with "a/b/" lies in ["a/b/", "a/b0"), "0" following "/".
CREATE OR REPLACE FUNCTION finalize_internal.overlaps_live(prefix text, table_id bigint, period_start timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN right(overlaps_live.prefix, 1) <> '/'
    OR EXISTS (SELECT FROM @extschema@.published q
                WHERE (q.prefix COLLATE "C") >= (overlaps_live.prefix COLLATE "C")
                  AND (q.prefix COLLATE "C") < ((left(overlaps_live.prefix, -1) || '0') COLLATE "C"))
    OR EXISTS (SELECT FROM @extschema@.published q
                WHERE (q.prefix COLLATE "C") = ANY (finalize_internal.ancestor_prefixes(overlaps_live.prefix)))
    OR EXISTS (SELECT FROM @extschema@.partition_registration g
                WHERE ((rtrim(g.location, '/') || '/') COLLATE "C") >= (overlaps_live.prefix COLLATE "C")
                  AND ((rtrim(g.location, '/') || '/') COLLATE "C") < ((left(overlaps_live.prefix, -1) || '0') COLLATE "C"))
    OR EXISTS (SELECT FROM @extschema@.partition_registration g
                WHERE ((rtrim(g.location, '/') || '/') COLLATE "C") = ANY (finalize_internal.ancestor_prefixes(overlaps_live.prefix)))
    OR EXISTS (SELECT FROM @extschema@.projection j
                 JOIN @extschema@.tracked_table t ON t.table_id = j.table_id
                 -- every shard the table ever had ({shard}), and the template itself
                CROSS JOIN LATERAL (SELECT @extschema@.render_location(j.location_template, overlaps_live.period_start,
                                                                       t.period_zone, x.label) AS location
                                      FROM (SELECT s.shard FROM @extschema@.tracked_table s WHERE s.shard_of = t.table_id
                                            UNION ALL SELECT '{shard}') AS x(label)) AS r
                -- of the table, or of any table of its sharded table (the sharded
                -- table and its shards: one lake table's locations)
                WHERE j.table_id IN (SELECT x.table_id FROM @extschema@.tracked_table x
                                       JOIN @extschema@.tracked_table me
                                         ON coalesce(me.shard_of, me.table_id) IN (x.table_id, x.shard_of)
                                      WHERE me.table_id = overlaps_live.table_id)
                  AND overlaps_live.period_start >= j.range_start AND overlaps_live.period_start < j.range_end
                  AND (starts_with(r.location, overlaps_live.prefix) OR starts_with(overlaps_live.prefix, r.location)));

-- Generations that were published, then superseded longer ago than the
-- retention: their objects may be deleted. The current one never appears.
CREATE OR REPLACE FUNCTION @extschema@.retired_generations(of_table text DEFAULT NULL, retention interval DEFAULT NULL)
RETURNS TABLE (table_name text, partition text, generation text, store text, prefix text,
               superseded_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH pubs AS (
        SELECT r.table_id, r.partition, r.generation, r.store, r.prefix, r.release_id, r.requested_at,
               r.period_start, lead(r.requested_at) OVER w AS superseded_at
          FROM @extschema@.release r
         -- An Iceberg release's files are its snapshots' (Iceberg's
         -- expire_snapshots deletes them), never a generation's to retire.
         WHERE r.released AND NOT coalesce(r.manifest ? 'iceberg', false)
        WINDOW w AS (PARTITION BY r.table_id, r.partition ORDER BY r.release_id))
    SELECT t.table_name, x.partition, x.generation, x.store, x.prefix, max(x.superseded_at)
      FROM pubs x
      JOIN @extschema@.tracked_table t ON t.table_id = x.table_id
      JOIN @extschema@.published p ON p.table_id = x.table_id AND p.partition = x.partition
     WHERE x.superseded_at IS NOT NULL
       AND x.generation <> p.generation
       -- Never a prefix readers may still be sent to (of any partition, in
       -- any store: deleting it would delete live data).
       AND NOT finalize_internal.overlaps_live(x.prefix, x.table_id, x.period_start)
       AND (retired_generations.of_table IS NULL OR t.table_name = retired_generations.of_table)
     GROUP BY t.table_name, x.partition, x.generation, x.store, x.prefix
    HAVING max(x.superseded_at) < now() - coalesce(retired_generations.retention, finalize_internal.generation_retention())
     ORDER BY 1, 2, 6;
END;
COMMENT ON FUNCTION @extschema@.retired_generations(text, interval) IS
    'Superseded generations whose retention window has passed (safe to delete); never the published one';

-- One message to one target about one transition of an incident. The
-- event is the incident as it was at the transition (the json format's
-- body), so a retry sends the same bytes under the same idempotency key.
CREATE TABLE @extschema@.alert_delivery (
    delivery_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    alert_id        bigint NOT NULL REFERENCES @extschema@.alert ON DELETE CASCADE,
    -- by name, not OID: a dump and restore or pg_upgrade keeps names only
    target_name     text NOT NULL,
    transition      text NOT NULL
                    CONSTRAINT alert_delivery_transition_check
                    CHECK (transition IN ('open', 'acknowledge', 'resolve')),
    idempotency_key text NOT NULL,
    event           jsonb NOT NULL,
    -- the incident's severity as a rank (3 critical .. 1 info): claimed first
    priority        smallint NOT NULL,
    state           text NOT NULL DEFAULT 'pending'
                    CONSTRAINT alert_delivery_state_check CHECK (state IN ('pending', 'delivered', 'failed')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt    timestamptz NOT NULL DEFAULT now(),
    claimed_at      timestamptz,
    last_attempt_at timestamptz,
    last_status     integer,
    last_error      text,
    delivered_at    timestamptz,
    UNIQUE (target_name, idempotency_key)
);
CREATE INDEX alert_delivery_due_idx ON @extschema@.alert_delivery (priority DESC, next_attempt) WHERE state = 'pending';
CREATE INDEX alert_delivery_alert_idx ON @extschema@.alert_delivery (alert_id, target_name);
COMMENT ON TABLE @extschema@.alert_delivery IS
    'Webhook deliveries: one per incident transition and target, retried with backoff until delivered or failed';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.alert_delivery', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.alert_delivery_delivery_id_seq', '');

-- The circuit breaker of each target: after five failures in a row it
-- opens for 30 s, doubling to 10 minutes while probes fail; one delivery
-- probes it once it is due again.
CREATE TABLE @extschema@.alert_target_state (
    target_name          text PRIMARY KEY,
    consecutive_failures integer NOT NULL DEFAULT 0,
    open_until           timestamptz,
    last_success         timestamptz,
    last_failure         timestamptz,
    last_error           text
);
COMMENT ON TABLE @extschema@.alert_target_state IS
    'Webhook targets'' circuit breakers: failures in a row and until when no delivery is tried';
-- Alert delivery (docs/design/alerts.md): the incidents of release
-- rejections and freshness SLAs, webhook targets, and the queue the
-- "finalize alerts" background worker drains. After the gate's part, since
-- a release that was refused opens an incident.

-- A release that was refused is an informational incident of its
-- partition; the next released generation resolves it, and the late_data
-- incident of its period. Runs in the gate's transaction, as the
-- extension's owner (who records releases); rows a restore brings back are
-- not attempts of now and change nothing.
CREATE OR REPLACE FUNCTION finalize_internal.release_alert()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    codes text;
BEGIN
    -- A row restored by pg_restore keeps its old time: history, not news.
    IF NEW.requested_at IS DISTINCT FROM now() THEN
        RETURN NULL;
    END IF;
    IF NEW.released THEN
        PERFORM finalize_internal.resolve_alerts('release_rejected', NEW.table_id, NULL, NEW.partition);
        -- The gate released the period only with a build after its late
        -- rows (problem late_data): the correction they called for is out.
        UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
         WHERE a.kind = 'late_data' AND a.table_id = NEW.table_id AND a.state <> 'resolved'
           AND NEW.period_start IS NOT NULL AND a.subject = finalize_internal.utc_iso(NEW.period_start);
        RETURN NULL;
    END IF;
    SELECT string_agg(format('%s %s', c.n, c.code), ', ' ORDER BY c.n DESC, c.code) INTO codes
      FROM (SELECT p->>'code' AS code, count(*) AS n
              FROM jsonb_array_elements(CASE jsonb_typeof(NEW.problems) WHEN 'array' THEN NEW.problems
                                             ELSE '[]'::jsonb END) AS p
             GROUP BY 1) c;
    PERFORM finalize_internal.raise_alert(
        'release_rejected', 'info', NEW.table_id, NULL, NEW.partition,
        format('Generation "%s" of partition "%s" was not released: %s.', NEW.generation, NEW.partition,
               coalesce(codes, 'no problem was recorded')),
        jsonb_build_object('release_id', NEW.release_id, 'generation', NEW.generation,
                           'problems', jsonb_array_length(CASE jsonb_typeof(NEW.problems) WHEN 'array'
                                                               THEN NEW.problems ELSE '[]'::jsonb END),
                           'requested_by', NEW.requested_by));
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER release_alert AFTER INSERT ON @extschema@.release
    FOR EACH ROW EXECUTE FUNCTION finalize_internal.release_alert();

-- The freshness SLA of every table that has one (tracked_table.max_lag),
-- run by the scheduler each round: a table whose verdict lags now() by more
-- than its max_lag opens one incident (refreshed at most once a minute
-- while it lasts); one back within, untracked, or without an SLA any more
-- is resolved. A table without a verdict yet lags from when it was
-- tracked. The verdict is what finalized_until() answers (_sensor_until:
-- a start of the table's periods, stopped where a loss holds periods), as
-- finalize.status shows its lag. Returns how many tables are over their SLA.
CREATE OR REPLACE FUNCTION finalize_internal.check_freshness()
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    r record;
    n integer := 0;
    msg text;
    detail jsonb;
BEGIN
    -- Rows another session holds (an admin's open transaction) are skipped
    -- this round, never waited for: the scheduler must go on.
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.alert_id IN (
        SELECT x.alert_id FROM @extschema@.alert x
         WHERE x.kind = 'freshness' AND x.state <> 'resolved'
           AND NOT EXISTS (SELECT FROM @extschema@.tracked_table t
                             JOIN @extschema@.watermark w ON w.table_id = t.table_id
                            WHERE t.table_id = x.table_id AND t.untracked_at IS NULL AND t.max_lag IS NOT NULL
                              AND now() - coalesce(finalize_internal.sensor_until(t.table_id, t.kind, w.finalized_until,
                                                                             t.granularity, t.period_zone,
                                                                             w.loss_blocked),
                                                   t.created_at) > t.max_lag)
           FOR UPDATE SKIP LOCKED);
    FOR r IN
        SELECT t.table_id, t.table_name, t.server_name, t.max_lag, v.until AS finalized_until,
               make_interval(secs => floor(extract(epoch FROM now() - coalesce(v.until, t.created_at)))) AS lag,
               (SELECT a.alert_id FROM @extschema@.alert a
                 WHERE a.kind = 'freshness' AND a.table_id = t.table_id AND a.state <> 'resolved') AS open_id,
               (SELECT a.last_seen FROM @extschema@.alert a
                 WHERE a.kind = 'freshness' AND a.table_id = t.table_id AND a.state <> 'resolved') AS seen
          FROM @extschema@.tracked_table t
          JOIN @extschema@.watermark w ON w.table_id = t.table_id
         CROSS JOIN LATERAL (SELECT finalize_internal.sensor_until(t.table_id, t.kind, w.finalized_until, t.granularity,
                                                              t.period_zone, w.loss_blocked) AS until) v
         WHERE t.untracked_at IS NULL AND t.max_lag IS NOT NULL
           AND now() - coalesce(v.until, t.created_at) > t.max_lag
    LOOP
        n := n + 1;
        CONTINUE WHEN r.seen > now() - interval '1 minute';
        msg := CASE WHEN r.finalized_until IS NULL
                 THEN format('Table "%s" has no verdict %s after it was tracked; its freshness SLA (max_lag) is %s.',
                             r.table_name, r.lag, r.max_lag)
                 ELSE format('Table "%s" is final only until %s, %s ago; its freshness SLA (max_lag) is %s.',
                             r.table_name, finalize_internal.utc_iso(r.finalized_until),
                             r.lag, r.max_lag) END;
        detail := jsonb_build_object('finalized_until', finalize_internal.utc_iso(r.finalized_until),
                                     'lag_seconds', floor(extract(epoch FROM r.lag)),
                                     'max_lag_seconds', extract(epoch FROM r.max_lag));
        IF r.open_id IS NULL THEN
            PERFORM finalize_internal.raise_alert('freshness', 'warning', r.table_id, r.server_name, '', msg, detail);
        ELSE
            -- counted again, unless another session holds it just now
            UPDATE @extschema@.alert a SET last_seen = now(), count = a.count + 1, message = msg, detail = detail
             WHERE a.alert_id IN (SELECT x.alert_id FROM @extschema@.alert x WHERE x.alert_id = r.open_id
                                     FOR UPDATE SKIP LOCKED);
        END IF;
    END LOOP;
    RETURN n;
END
$$;

-- Sources whose foreign server was dropped while tables are still
-- tracked through it, run by the scheduler each round: their worker is
-- gone and their verdicts stopped, which no worker can report any more.
-- Opens one server_dropped incident per such source at once (dropping is
-- deliberate; finalize.alert_after rides out blips, not decisions) and
-- shows it in source_status; resolved once a server of that name exists
-- again or its tables are untracked. Sources with no tracked table left
-- (untracked, or dropped with their server) leave source_status, and
-- with them their stopped worker's pid; only a hold (commit_time_ahead)
-- stays while its server exists, without a pid: tracking a table through
-- the server again must not forget that its commit times were not to be
-- trusted. Returns how many sources are dropped under tracked tables.
CREATE OR REPLACE FUNCTION finalize_internal.check_dropped_sources()
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    n integer := 0;
    msg text;
BEGIN
    -- A row its worker holds just now (its last cycle) goes a round later.
    DELETE FROM @extschema@.source_status st
     WHERE st.server_name IN (
        SELECT x.server_name FROM @extschema@.source_status x
         WHERE NOT EXISTS (SELECT FROM @extschema@.tracked_table t
                            WHERE t.server_name = x.server_name AND t.untracked_at IS NULL AND t.kind = 'source')
           AND (x.held_by IS NULL
                OR NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_server s
                                 JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
                                WHERE s.srvname = x.server_name AND w.fdwname = 'finalize_mssql'))
           FOR UPDATE SKIP LOCKED);
    UPDATE @extschema@.source_status st SET worker_pid = NULL
     WHERE st.server_name IN (
        SELECT x.server_name FROM @extschema@.source_status x
         WHERE x.worker_pid IS NOT NULL
           AND NOT EXISTS (SELECT FROM @extschema@.tracked_table t
                            WHERE t.server_name = x.server_name AND t.untracked_at IS NULL AND t.kind = 'source')
           FOR UPDATE SKIP LOCKED);
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.alert_id IN (
        SELECT x.alert_id FROM @extschema@.alert x
         WHERE x.kind = 'server_dropped' AND x.state <> 'resolved'
           AND (EXISTS (SELECT FROM pg_catalog.pg_foreign_server s
                          JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
                         WHERE s.srvname = x.server_name AND w.fdwname = 'finalize_mssql')
                OR NOT EXISTS (SELECT FROM @extschema@.tracked_table t
                                WHERE t.server_name = x.server_name AND t.untracked_at IS NULL))
           FOR UPDATE SKIP LOCKED);
    FOR r IN
        SELECT t.server_name, count(*) AS tables, string_agg(format('"%s"', t.table_name), ', ' ORDER BY t.table_name) AS names,
               EXISTS (SELECT FROM @extschema@.alert a WHERE a.kind = 'server_dropped' AND a.server_name = t.server_name
                          AND a.state <> 'resolved') AS raised
          FROM @extschema@.tracked_table t
         WHERE t.untracked_at IS NULL AND t.kind = 'source'
           AND NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_server s
                             JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
                            WHERE s.srvname = t.server_name AND w.fdwname = 'finalize_mssql')
         GROUP BY t.server_name
    LOOP
        n := n + 1;
        CONTINUE WHEN r.raised;
        msg := format('Server "%s" no longer exists (DROP SERVER) while %s table(s) are tracked through it (%s): their verdicts stopped. Create the server again, or untrack the tables.',
                      r.server_name, r.tables, left(r.names, 1000));
        PERFORM finalize_internal.raise_alert('server_dropped', 'critical', NULL, r.server_name, '', msg,
                                         jsonb_build_object('tables', r.tables));
        UPDATE @extschema@.source_status st
           SET condition = 'server_dropped', condition_since = now(), last_error = msg, last_error_at = now(),
               worker_pid = NULL
         WHERE st.server_name = r.server_name AND st.condition <> 'server_dropped';
    END LOOP;
    RETURN n;
END
$$;

-- Webhook targets are foreign servers of finalize_webhook; secrets (a
-- bearer token, a routing key, an API key, an HMAC key, or the URL itself
-- when it is the secret, as Slack's are) live in the user mapping of the
-- server's owner, which only its owner and superusers can read.
CREATE OR REPLACE FUNCTION finalize_internal.webhook_validator(options text[], catalog oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_webhook_validator'
LANGUAGE C STRICT;

-- The webhook targets: foreign servers of finalize_webhook with their
-- options (never the user mapping's secrets).
CREATE OR REPLACE FUNCTION finalize_internal.alert_targets()
RETURNS TABLE (target_name text, format text, min_severity text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT s.srvname::text,
           coalesce((SELECT o.option_value FROM pg_catalog.pg_options_to_table(s.srvoptions) o
                      WHERE o.option_name = 'format'), 'json'),
           coalesce((SELECT o.option_value FROM pg_catalog.pg_options_to_table(s.srvoptions) o
                      WHERE o.option_name = 'min_severity'), 'warning')
      FROM pg_catalog.pg_foreign_server s
      JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
     WHERE w.fdwname = 'finalize_webhook';
END;

-- The rank of a severity, for min_severity.
CREATE OR REPLACE FUNCTION finalize_internal.severity_rank(severity text)
RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN CASE severity WHEN 'info' THEN 1 WHEN 'warning' THEN 2 WHEN 'critical' THEN 3 END;

-- The documented body of the json format: the incident at one transition.
-- dedup_key names the incident (PagerDuty's dedup_key, Opsgenie's alias);
-- idempotency_key names the transition. The message of a resolution says
-- it resolved (and when), then what the incident was.
CREATE OR REPLACE FUNCTION finalize_internal.alert_event(a @extschema@.alert, transition text)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT jsonb_build_object(
        'schema', 'finalize.alert/1',
        'event', transition,
        'dedup_key', (a).dedup_key,
        'idempotency_key', format('%s-%s', (a).dedup_key, transition),
        'database', current_database(),
        'alert', jsonb_build_object(
            'id', (a).alert_id, 'kind', (a).kind, 'severity', (a).severity, 'state', (a).state,
            'table', (a).table_name, 'source', (a).server_name, 'subject', nullif((a).subject, ''),
            'message', CASE WHEN transition = 'resolve' AND (a).resolved_at IS NOT NULL
                            THEN format('Resolved at %s (open since %s). It was: %s',
                                        finalize_internal.utc_iso((a).resolved_at), finalize_internal.utc_iso((a).opened_at),
                                        (a).message)
                            ELSE (a).message END,
            'detail', (a).detail, 'count', (a).count,
            'opened_at', finalize_internal.utc_iso((a).opened_at), 'last_seen', finalize_internal.utc_iso((a).last_seen),
            'resolved_at', finalize_internal.utc_iso((a).resolved_at),
            'acknowledged_at', finalize_internal.utc_iso((a).acknowledged_at),
            'acknowledged_by', (a).acknowledged_by, 'acknowledge_note', (a).acknowledge_note));
END;

-- Wakes the alerts worker once the transaction that queued deliveries
-- commits (a no-op without one).
CREATE OR REPLACE FUNCTION finalize_internal.wake_alert_delivery()
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_wake_alert_delivery'
LANGUAGE C VOLATILE;

-- Queues the deliveries of an incident's transition: its opening to every
-- target whose min_severity it reaches; its acknowledgement and its
-- resolution to the targets that were told it opened (a target created
-- later hears of the next incident, never of a resolution alone). An
-- incident born resolved (informational) opens and resolves at once.
CREATE OR REPLACE FUNCTION finalize_internal.queue_alert_delivery()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    transitions text[];
    tr text;
    n integer := 0;
    k integer;
BEGIN
    -- A row restored by pg_restore keeps its old opened_at: it was news
    -- once, and its deliveries come back with the queue's own rows.
    IF TG_OP = 'INSERT' AND NEW.opened_at IS DISTINCT FROM now() THEN
        RETURN NULL;
    ELSIF TG_OP = 'INSERT' THEN
        transitions := CASE WHEN NEW.state = 'resolved' THEN ARRAY['open', 'resolve'] ELSE ARRAY['open'] END;
    ELSIF NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('acknowledged', 'resolved') THEN
        transitions := ARRAY[CASE NEW.state WHEN 'acknowledged' THEN 'acknowledge' ELSE 'resolve' END];
    ELSE
        RETURN NULL;
    END IF;
    FOREACH tr IN ARRAY transitions LOOP
        INSERT INTO @extschema@.alert_delivery (alert_id, target_name, transition, idempotency_key, event, priority)
        SELECT NEW.alert_id, t.target_name, tr, e.event->>'idempotency_key', e.event,
               finalize_internal.severity_rank(NEW.severity)
          FROM finalize_internal.alert_targets() t,
               LATERAL (SELECT finalize_internal.alert_event(NEW, tr) AS event) e
         WHERE CASE WHEN tr = 'open'
                    THEN finalize_internal.severity_rank(NEW.severity) >= finalize_internal.severity_rank(t.min_severity)
                    ELSE EXISTS (SELECT FROM @extschema@.alert_delivery d
                                  WHERE d.alert_id = NEW.alert_id AND d.target_name = t.target_name
                                    AND d.transition = 'open') END
        ON CONFLICT (target_name, idempotency_key) DO NOTHING;
        GET DIAGNOSTICS k = ROW_COUNT;
        n := n + k;
    END LOOP;
    IF n > 0 THEN
        PERFORM finalize_internal.wake_alert_delivery();
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER alert_delivery_queue AFTER INSERT OR UPDATE OF state ON @extschema@.alert
    FOR EACH ROW EXECUTE FUNCTION finalize_internal.queue_alert_delivery();

-- The deliveries the alerts worker may send, and from when: pending, not
-- in flight, every earlier transition of the incident to that target
-- settled (a resolution never overtakes its opening), due at their
-- next_attempt or when their target's breaker lets a probe through.
CREATE OR REPLACE FUNCTION finalize_internal.claimable_deliveries()
RETURNS TABLE (delivery_id bigint, due timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT d.delivery_id, greatest(d.next_attempt, coalesce(s.open_until, d.next_attempt))
      FROM @extschema@.alert_delivery d
      LEFT JOIN @extschema@.alert_target_state s ON s.target_name = d.target_name
     WHERE d.state = 'pending' AND d.claimed_at IS NULL
       AND NOT EXISTS (SELECT FROM @extschema@.alert_delivery e
                        WHERE e.alert_id = d.alert_id AND e.target_name = d.target_name
                          AND e.state = 'pending' AND e.delivery_id < d.delivery_id);
END;

-- Claims the next due delivery for the alerts worker (one at a time, so a
-- breaker that opens stops the very next one), critical incidents first:
-- its target's breaker closed or due for a probe, and every earlier
-- transition of its incident to that target settled (a resolution never overtakes its
-- opening), and not already claimed (in flight until its outcome is
-- recorded, or until the worker restarts: _release_claims). Counts the
-- attempt before it is made: a crash mid-request costs an attempt, never
-- a silent retry for ever.
CREATE OR REPLACE FUNCTION finalize_internal.claim_delivery()
RETURNS TABLE (delivery_id bigint, target_name text, event jsonb, attempts integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- Nothing while the catalog is being restored (11d_catalog_seal.sql).
    IF finalize_internal.catalog_restoring() IS NOT NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH due AS (
        SELECT d.delivery_id
          FROM finalize_internal.claimable_deliveries() c
          JOIN @extschema@.alert_delivery d ON d.delivery_id = c.delivery_id
         WHERE c.due <= now()
         ORDER BY d.priority DESC, c.due, d.delivery_id
         LIMIT 1
           FOR UPDATE OF d SKIP LOCKED)
    UPDATE @extschema@.alert_delivery d
       SET attempts = d.attempts + 1, claimed_at = now(), last_attempt_at = now()
      FROM due
     WHERE d.delivery_id = due.delivery_id
    RETURNING d.delivery_id, d.target_name, d.event, d.attempts;
END
$$;

-- When the next pending delivery falls due (NULL: none), so that the
-- alerts worker sleeps until then.
CREATE OR REPLACE FUNCTION finalize_internal.next_delivery()
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT min(c.due) FROM finalize_internal.claimable_deliveries() c;
END;

-- Records the outcome of one attempt. Delivered: the target's breaker
-- closes. Failed: the breaker counts it; the delivery is retried after
-- an exponential backoff with jitter (1 s doubling to 10 minutes, at
-- least the target's Retry-After), or fails for good when the answer
-- cannot change (permanent) or retry_limit attempts were made; one that
-- never reached its target (target_answered false: dropped, renamed, or
-- no request could be built) fails at once without touching the breaker.
CREATE OR REPLACE FUNCTION finalize_internal.delivery_result(delivery_id bigint, delivered boolean, http_status integer,
                                             error text, retry_after double precision, permanent boolean,
                                             retry_limit integer, target_answered boolean DEFAULT true)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    d @extschema@.alert_delivery;
    failures integer;
    backoff double precision;
BEGIN
    SELECT x.* INTO d FROM @extschema@.alert_delivery x WHERE x.delivery_id = delivery_result.delivery_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;        -- its incident was purged meanwhile
    END IF;
    IF delivered THEN
        UPDATE @extschema@.alert_delivery x
           SET state = 'delivered', delivered_at = now(), last_status = http_status, last_error = NULL,
               claimed_at = NULL
         WHERE x.delivery_id = d.delivery_id;
        INSERT INTO @extschema@.alert_target_state AS s (target_name, last_success)
        VALUES (d.target_name, now())
        ON CONFLICT (target_name) DO UPDATE
           SET consecutive_failures = 0, open_until = NULL, last_success = now();
        RETURN 'delivered';
    END IF;
    -- A target that is gone (or a request that could not be built) fails
    -- the delivery, not the target: its breaker is left alone, and the
    -- state of a target no longer there is forgotten.
    IF NOT target_answered THEN
        UPDATE @extschema@.alert_delivery x
           SET state = 'failed', last_status = NULL, last_error = error, claimed_at = NULL
         WHERE x.delivery_id = d.delivery_id;
        DELETE FROM @extschema@.alert_target_state s
         WHERE s.target_name = d.target_name
           AND NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_server f WHERE f.srvname = d.target_name);
        RETURN 'failed';
    END IF;
    INSERT INTO @extschema@.alert_target_state AS s (target_name, consecutive_failures, last_failure, last_error)
    VALUES (d.target_name, 1, now(), error)
    ON CONFLICT (target_name) DO UPDATE
       SET consecutive_failures = s.consecutive_failures + 1, last_failure = now(), last_error = EXCLUDED.last_error
    RETURNING s.consecutive_failures INTO failures;
    IF failures >= 5 THEN
        UPDATE @extschema@.alert_target_state s
           SET open_until = now() + make_interval(secs => least(600, 30 * power(2, least(failures - 5, 10))))
         WHERE s.target_name = d.target_name;
    END IF;
    IF permanent OR d.attempts >= retry_limit THEN
        UPDATE @extschema@.alert_delivery x
           SET state = 'failed', last_status = http_status, last_error = error, claimed_at = NULL
         WHERE x.delivery_id = d.delivery_id;
        RETURN 'failed';
    END IF;
    -- full jitter in the upper half: retries of many incidents spread out
    backoff := least(600, power(2, least(d.attempts - 1, 20))) * (0.5 + random() / 2);
    UPDATE @extschema@.alert_delivery x
       SET last_status = http_status, last_error = error, claimed_at = NULL,
           next_attempt = now() + make_interval(secs => greatest(backoff, least(coalesce(retry_after, 0), 3600)))
     WHERE x.delivery_id = d.delivery_id;
    RETURN 'retry';
END
$$;

-- After a restart of the alerts worker, deliveries it had claimed are
-- due again (their attempt was counted).
CREATE OR REPLACE FUNCTION finalize_internal.release_claims()
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    UPDATE @extschema@.alert_delivery d SET claimed_at = NULL WHERE d.state = 'pending' AND d.claimed_at IS NOT NULL;
END;

-- The request a delivery sends (format, URL, event, secrets as jsonb):
-- what the alerts worker builds, for tests. Not granted: its headers hold
-- the secrets.
CREATE OR REPLACE FUNCTION finalize_internal.alert_request(format text, url text, event jsonb, secrets jsonb,
                                           OUT request_url text, OUT headers text[], OUT body text)
RETURNS record
AS 'MODULE_PATHNAME', 'finalize_alert_request'
LANGUAGE C STABLE STRICT;

-- Deliveries per incident and target, for people: attempts, the last HTTP
-- status and error, and the target's breaker.
CREATE OR REPLACE VIEW @extschema@.alert_deliveries AS
SELECT d.delivery_id, d.alert_id, a.kind, a.severity, d.target_name AS target, d.transition, d.state,
       d.attempts, CASE WHEN d.state = 'pending' THEN d.next_attempt END AS next_attempt,
       d.last_attempt_at, d.last_status,
       -- a receiver's answer may quote what it was sent: admins only
       -- (by name; a renamed role shows nobody the texts, never everybody)
       CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_roles r
                          WHERE r.rolname = 'finalize_admin' AND pg_catalog.pg_has_role(r.oid, 'MEMBER'))
            THEN d.last_error END AS last_error,
       d.delivered_at, d.created_at,
       CASE WHEN s.open_until > now() THEN s.open_until END AS breaker_open_until
  FROM @extschema@.alert_delivery d
  JOIN @extschema@.alert a ON a.alert_id = d.alert_id
  LEFT JOIN @extschema@.alert_target_state s ON s.target_name = d.target_name
 ORDER BY d.delivery_id DESC;
COMMENT ON VIEW @extschema@.alert_deliveries IS
    'Webhook deliveries of incidents: per target and transition, attempts, last HTTP status and error';
-- ===========================================================================
-- Releases of Iceberg tables: write-audit-publish with the release gate as
-- the audit (finalize.release_iceberg, src/publish/). The snapshot's own
-- manifests say what the partition holds; the catalog commit publishes it.
-- ===========================================================================

-- Release a partition of an Iceberg table: audit a snapshot (a WAP branch's
-- head, a wap.id, a snapshot id) against the store and the CDC facts, then
-- publish it through the catalog (fast-forward a branch, or create a tag).
CREATE OR REPLACE FUNCTION @extschema@.release_iceberg(request jsonb,
                                            OUT released boolean, OUT generation text, OUT problems jsonb)
RETURNS record
AS 'MODULE_PATHNAME', 'finalize_release_iceberg'
LANGUAGE C VOLATILE
-- It runs parts as the extension's owner: the caller's search_path must not
-- reach them (its SPI text is schema-qualified as well).
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.release_iceberg(jsonb) IS
    'Audit an Iceberg snapshot''s partition (files, finality, row counts) and publish it through the catalog if nothing disagrees';

-- Whether this very request (as stored: the request and the snapshot's
-- manifest list) released this snapshot of the partition before: the same
-- request again, when nothing changed, stores nothing.
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_released(table_id bigint, partition text, generation text, stored jsonb)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT EXISTS (
        SELECT FROM @extschema@.release r
         WHERE r.table_id = iceberg_released.table_id AND r.partition = iceberg_released.partition
           AND r.generation = iceberg_released.generation AND r.released
           AND r.manifest = iceberg_released.stored);
END;

-- The lake consumers whose LSN properties must hold a partition's changes
-- when it is released from an Iceberg table: a plain table's own; on a
-- sharded table (shards are databases, each with its own LSNs) the
-- partition's shard's, or every shard's for a partition of no shard. One
-- row per consumer that follows this Iceberg table (by its name, or the
-- uuid it was seen with), through any catalog server, and one row with no
-- consumer for each table in scope that has none: followed_elsewhere when
-- another shard of the table has one (then the lake's copy of this shard
-- is not known to be followed, which is a problem, never a skip).
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_lake_consumers(table_id bigint, shard text, iceberg_table text,
                                                    table_uuid text)
RETURNS TABLE (table_name text, consumer text, lsn_property text, followed_elsewhere boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH scope AS (
        SELECT t.table_id, t.table_name
          FROM @extschema@.tracked_table t
         WHERE t.untracked_at IS NULL
           AND ((t.table_id = iceberg_lake_consumers.table_id AND t.kind <> 'sharded')
                OR (t.shard_of = iceberg_lake_consumers.table_id
                    AND (iceberg_lake_consumers.shard IS NULL OR t.shard = iceberg_lake_consumers.shard)))),
    followed AS (
        SELECT l.table_id, l.consumer, l.lsn_property
          FROM @extschema@.lake_consumer l
         WHERE l.iceberg_table = iceberg_lake_consumers.iceberg_table
            OR l.seen_table_uuid = iceberg_lake_consumers.table_uuid)
    SELECT s.table_name, f.consumer, f.lsn_property,
           f.consumer IS NULL AND EXISTS (
               SELECT FROM followed o
                 JOIN @extschema@.tracked_table t ON t.table_id = o.table_id
                WHERE t.shard_of = iceberg_lake_consumers.table_id AND t.untracked_at IS NULL)
      FROM scope s
      LEFT JOIN followed f ON f.table_id = s.table_id
     ORDER BY 1, 2;
END;

-- Why a release that names a shard as its table cannot take the Iceberg
-- partition for that shard's rows alone, or NULL: the Iceberg table holds
-- other shards of its sharded table (its specs have a field "shard", or a
-- lake consumer of another shard follows it) and the partition's key does
-- not name this shard (shard=<label>). One shard's verdict would release
-- every shard's rows, which the gate never lets a manifest's "shard" do
-- either (_shard_scope_problem).
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_shard_scope(table_id bigint, partition text, iceberg_table text,
                                                 table_uuid text, shard_field boolean)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
    sharded text;
    other text;
BEGIN
    SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = iceberg_shard_scope.table_id;
    IF tt.shard_of IS NULL
       OR tt.shard = ANY (ARRAY(SELECT m[1] FROM regexp_matches(partition, '(?:^|/)shard=([^/]*)', 'g') AS m)) THEN
        RETURN NULL;
    END IF;
    SELECT s.table_name INTO sharded FROM @extschema@.tracked_table s WHERE s.table_id = tt.shard_of;
    SELECT o.table_name INTO other
      FROM @extschema@.lake_consumer l
      JOIN @extschema@.tracked_table o ON o.table_id = l.table_id
     WHERE o.shard_of = tt.shard_of AND o.table_id <> tt.table_id AND o.untracked_at IS NULL
       AND (l.iceberg_table = iceberg_shard_scope.iceberg_table OR l.seen_table_uuid = iceberg_shard_scope.table_uuid)
     ORDER BY o.table_name
     LIMIT 1;
    IF other IS NULL AND NOT shard_field THEN
        RETURN NULL;
    END IF;
    RETURN pg_catalog.format('Table "%s" is shard "%s" of sharded table "%s", and Iceberg table "%s" holds other '
                             'shards'' rows too (%s), but partition "%s" does not name shard=%s: its files may hold '
                             'every shard''s rows, which one shard''s verdict cannot release. Release "%s" with the '
                             'shard in the partition ({"shard": "%s", ...}), or without it once every shard is final.',
                             tt.table_name, tt.shard, sharded, iceberg_table,
                             CASE WHEN other IS NOT NULL
                                  THEN pg_catalog.format('a lake consumer of shard "%s" follows it', other)
                                  ELSE 'its partition specs have a field "shard"' END,
                             partition, tt.shard, sharded, tt.shard);
END
$$;

-- The CDC ranges of a table's facts that hold changes committed in
-- [period_start, period_end), at most 20, as the row-count problems name
-- them: [{"start_lsn", "end_lsn", "inserts", "updates", "deletes", "inside"}].
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_ranges(table_id bigint, period_start timestamptz, period_end timestamptz)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT coalesce(jsonb_agg(x.r ORDER BY x.start_lsn), '[]')
      FROM (SELECT f.start_lsn,
                   jsonb_build_object('start_lsn', f.start_lsn, 'end_lsn', f.end_lsn, 'inserts', f.inserts,
                                      'updates', f.updates, 'deletes', f.deletes,
                                      'inside', f.first_commit_time >= iceberg_ranges.period_start
                                                AND f.last_commit_time < iceberg_ranges.period_end) AS r
              FROM @extschema@.fact f
             WHERE f.table_id = iceberg_ranges.table_id AND f.kind = 'range'
               AND f.first_commit_time < iceberg_ranges.period_end
               AND f.last_commit_time >= iceberg_ranges.period_start
             ORDER BY f.start_lsn
             LIMIT 20) AS x;
END;

-- What the CDC facts say against an Iceberg partition of [period_start,
-- period_end) of table_name (the table whose verdict decides), beyond
-- finality (checked by the gate's own rule): its row count under the
-- request's rule ('default': net for an event-time table, else none;
-- records less position deletes against inserts, inserts
-- less deletes, or every change) and, for each lake consumer of a table the
-- partition holds (lake: _iceberg_lake_consumers' rows with the LSN the
-- audited snapshot's ancestry carries in each one's property), whether
-- that LSN reaches every change of that table (the shard's own, in its own
-- LSN space) committed before period_end. A count that cannot be known
-- (equality deletes, facts that are not exact) and a shard whose lake
-- consumer is missing where other shards have one are problems too:
-- nothing is published on a guess.
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_checks(table_name text, period_start timestamptz, period_end timestamptz,
                                            row_rule text, records bigint, position_deletes bigint,
                                            uncountable_delete_files bigint, lake jsonb)
RETURNS TABLE (code text, detail text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    f record;
    expected bigint;
    actual bigint := records - position_deletes;
    span text := pg_catalog.format('[%s, %s)', period_start, period_end);
    behind record;
    c record;
    held bigint;
BEGIN
    IF row_rule = 'default' THEN
        row_rule := CASE WHEN tt.event_time_column IS NOT NULL THEN 'net' ELSE 'none' END;
    END IF;
    IF row_rule <> 'none' THEN
        SELECT x.facts, x.is_final, x.exact INTO f
          FROM finalize_internal.period_facts(table_name, period_start, period_end) AS x;
        expected := CASE row_rule
            WHEN 'inserts' THEN (f.facts ->> 'inserts')::bigint
            WHEN 'net' THEN (f.facts ->> 'inserts')::bigint - (f.facts ->> 'deletes')::bigint
            ELSE (f.facts ->> 'inserts')::bigint + (f.facts ->> 'updates')::bigint + (f.facts ->> 'deletes')::bigint
        END;
        IF uncountable_delete_files > 0 THEN
            code := 'row_count_unknown';
            detail := pg_catalog.format('The partition has %s delete file(s) whose deleted rows cannot be counted from '
                                        'the manifests (equality deletes, or position deletes that do not name one '
                                        'live data file of the partition written before them, or that share one), so '
                                        'its row count cannot be checked against the CDC facts; compact them away '
                                        '(rewrite the data files) and audit again, or release with "row_count": '
                                        '"none".', uncountable_delete_files);
            RETURN NEXT;
        ELSIF f.is_final IS NOT TRUE THEN
            NULL;       -- not_finalized says it: a count may still change
        ELSIF f.exact IS NOT TRUE OR expected IS NULL THEN
            code := 'row_count_unknown';
            detail := pg_catalog.format('The CDC facts of %s are not exact (%s CDC range(s) straddle its boundaries, or '
                                        'tracking did not cover it), so the partition''s %s rows cannot be checked '
                                        'against them.', span, coalesce(f.facts ->> 'straddling_ranges', '?'), actual);
            RETURN NEXT;
        ELSIF row_rule = 'inserts' AND ((f.facts ->> 'updates')::bigint > 0 OR (f.facts ->> 'deletes')::bigint > 0) THEN
            code := 'row_count_unknown';
            detail := pg_catalog.format('The release says the table is append-only ("row_count": "inserts"), but the '
                                        'CDC facts of %s record %s update(s) and %s delete(s); say "net" or '
                                        '"changes" for what the lake table holds. Ranges: %s', span,
                                        f.facts ->> 'updates', f.facts ->> 'deletes',
                                        finalize_internal.iceberg_ranges(tt.table_id, period_start, period_end));
            RETURN NEXT;
        ELSIF actual <> expected THEN
            code := 'row_count_mismatch';
            detail := pg_catalog.format('The partition''s files hold %s row(s) (%s record(s) less %s position '
                                        'delete(s)), but the CDC facts of %s say %s (%s: %s insert(s), %s update(s), '
                                        '%s delete(s)): %s. Ranges: %s', actual, records, position_deletes, span,
                                        expected, row_rule, f.facts ->> 'inserts', f.facts ->> 'updates',
                                        f.facts ->> 'deletes',
                                        CASE WHEN actual < expected THEN 'rows are missing (a dropped batch?)'
                                             ELSE 'rows are there twice or do not belong (a duplicate batch?)' END,
                                        finalize_internal.iceberg_ranges(tt.table_id, period_start, period_end));
            RETURN NEXT;
        END IF;
    END IF;
    FOR c IN SELECT x.* FROM pg_catalog.jsonb_to_recordset(lake)
                   AS x(table_name text, consumer text, lsn_property text, followed_elsewhere boolean,
                        committed_lsn text, lsn_carrier bigint)
    LOOP
        IF c.consumer IS NULL THEN
            IF c.followed_elsewhere THEN
                code := 'lake_consumer_missing';
                detail := pg_catalog.format('No lake consumer of shard "%s" follows this Iceberg table, while other '
                                            'shards of "%s" have one: whether the audited snapshot holds that '
                                            'shard''s changes committed before %s cannot be checked. Declare one '
                                            'with finalize.add_consumer(%L, ..., iceberg_server => ..., iceberg_table '
                                            '=> ..., lsn_property => ...) with the property that carries its LSN.',
                                            c.table_name, (SELECT s.table_name FROM @extschema@.tracked_table s
                                                           WHERE s.table_id = (finalize_internal.tracked(c.table_name)).shard_of),
                                            period_end, c.table_name);
                RETURN NEXT;
            END IF;
            CONTINUE;
        END IF;
        IF c.committed_lsn IS NULL THEN
            code := 'lake_behind';
            detail := pg_catalog.format('Lake consumer "%s" of "%s" follows this table by the snapshot property "%s", '
                                        'but no snapshot on the audited snapshot''s ancestry carries it, so which '
                                        'changes it holds is unknown; write the property with each commit.',
                                        c.consumer, c.table_name, c.lsn_property);
            RETURN NEXT;
            CONTINUE;
        END IF;
        held := (finalize_internal.tracked(c.table_name)).table_id;
        SELECT count(*) AS n, max(x.end_lsn) AS last INTO behind
          FROM @extschema@.fact x
         WHERE x.table_id = held AND x.kind = 'range' AND x.first_commit_time < period_end
           AND x.end_lsn > c.committed_lsn::@extschema@.lsn AND x.inserts + x.updates + x.deletes > 0;
        IF behind.n > 0 THEN
            code := 'lake_behind';
            detail := pg_catalog.format('The audited snapshot holds the change log of "%s" up to %s (snapshot %s''s '
                                        '"%s", lake consumer "%s"), but %s CDC range(s) of it with changes committed '
                                        'before %s reach up to %s: the snapshot may lack some of the period''s rows.',
                                        c.table_name, c.committed_lsn, c.lsn_carrier, c.lsn_property, c.consumer,
                                        behind.n, period_end, behind.last);
            RETURN NEXT;
        END IF;
    END LOOP;
END
$$;
-- ===========================================================================
-- Dump and restore: the workers never act on a half-restored catalog.
-- ===========================================================================
--
-- pg_restore loads finalize's tables one COPY at a time, each committed on
-- its own (in parallel with -j), after CREATE EXTENSION has made them
-- empty. A worker of the target cluster that acted in between would record
-- on a catalog whose rows are not all there: a range fact on a watermark
-- whose facts are still to come (their COPY then fails on its id, and every
-- fact is lost), a verdict without the consumers or losses that hold it, an
-- incident delivered twice. So the catalog says whether it is whole, with
-- nothing for the operator to remember:
--
-- * finalize.catalog_seal holds one row once the catalog is in use. It is
--   written by the functions that track a table (_seal_catalog), not by
--   CREATE EXTENSION: the CREATE EXTENSION of a restore is the same
--   statement as a fresh install's. Its foreign keys reference the other
--   tables whose rows pg_dump keeps (never set: NULL satisfies them), so
--   pg_dump orders its row after theirs and pg_restore loads it after them;
-- * but not the tables that purge_facts empties in bulk (event_fact,
--   lateness_hour, alert_delivery, and late_period with its table): a key
--   to one would check the seal for each row deleted (18 us a row, 30 times
--   the delete). Those are covered by the id sequences instead: pg_restore,
--   in one process as docs/upgrading.md says, sets every sequence after all
--   the rows, and each of them has an id sequence of its own
--   (alert_delivery) or a NOT NULL key to a table that has (event_fact to
--   fact, lateness_hour and late_period to tracked_table): while its rows
--   load, that sequence stands below its table's ids;
-- * finalize_internal.catalog_restoring() says why the catalog must be left alone:
--   tracked tables without the seal (a restore under way, or stopped half
--   way), or an identity sequence behind its table (pg_restore sets the
--   sequences after the rows: the tables above, and a catalog of incidents
--   only, wait for them);
-- * the scheduler starts no worker while it says so, a source worker reads
--   and records nothing, the alerts worker claims no delivery
--   (docs/upgrading.md). pg_upgrade's own servers run no finalize process at
--   all (IsBinaryUpgrade, src/finalize.c).
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

-- Marks the catalog as in use (a table is tracked): from now on a catalog
-- with tracked tables but no seal is a restore under way.
CREATE OR REPLACE FUNCTION finalize_internal.seal_catalog()
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    INSERT INTO @extschema@.catalog_seal DEFAULT VALUES ON CONFLICT DO NOTHING;
END;

-- Why finalize's background processes must not act on the catalog now, or
-- NULL when it is whole (see above). Read at the start of each of their
-- rounds and cycles.
CREATE OR REPLACE FUNCTION finalize_internal.catalog_restoring()
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    unsealed boolean;
    behind text;
BEGIN
    -- One statement (a cycle's read transaction runs it every time): the
    -- seal and every sequence against its table, in one snapshot; the seal's
    -- answer comes first, as it says the more.
    -- A sequence's last id handed out is its last_value, or the one before
    -- while is_called is false (a new sequence, ALTER SEQUENCE ... RESTART,
    -- setval(..., false), as pg_dump writes such a one back): its next id is
    -- last_value then, and ids above it are not taken.
    SELECT NOT EXISTS (SELECT FROM @extschema@.catalog_seal) AND EXISTS (SELECT FROM @extschema@.tracked_table),
           string_agg(format('sequence %s stands at %s, below the greatest id of its table, %s', s.seq,
                             s.last, s.top), '; ') FILTER (WHERE s.top > s.last)
      INTO unsealed, behind
      FROM (VALUES ('tracked_table_table_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.tracked_table_table_id_seq q),
                    (SELECT max(t.table_id) FROM @extschema@.tracked_table t)),
                   ('fact_fact_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.fact_fact_id_seq q),
                    (SELECT max(f.fact_id) FROM @extschema@.fact f)),
                   ('loss_loss_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.loss_loss_id_seq q),
                    (SELECT max(l.loss_id) FROM @extschema@.loss l)),
                   ('loss_ack_ack_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.loss_ack_ack_id_seq q),
                    (SELECT max(a.ack_id) FROM @extschema@.loss_ack a)),
                   ('lake_consumer_lake_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.lake_consumer_lake_id_seq q),
                    (SELECT max(c.lake_id) FROM @extschema@.lake_consumer c)),
                   ('release_release_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.release_release_id_seq q),
                    (SELECT max(r.release_id) FROM @extschema@.release r)),
                   ('alert_alert_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.alert_alert_id_seq q),
                    (SELECT max(a.alert_id) FROM @extschema@.alert a)),
                   ('alert_delivery_delivery_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.alert_delivery_delivery_id_seq q),
                    (SELECT max(d.delivery_id) FROM @extschema@.alert_delivery d))) AS s (seq, last, top);
    IF unsealed THEN
        RETURN 'finalize.catalog_seal is empty while tables are tracked: a restore of the catalog is under way '
               '(pg_restore loads that table after the ones it references), or stopped before it was complete';
    END IF;
    IF behind IS NOT NULL THEN
        RETURN 'the identity sequences of the catalog are behind its rows (pg_restore sets them after the rows): '
               || behind;
    END IF;
    RETURN NULL;
END
$$;
-- The foreign-data wrappers whose servers and user mappings hold what
-- finalize reaches: SQL Server, Iceberg catalogs, object stores, webhooks.
-- Made once their validators exist (the rerunnable parts before this).

CREATE FOREIGN DATA WRAPPER finalize_mssql
    VALIDATOR finalize_internal.mssql_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_mssql IS
    'SQL Server databases with change data capture, read by the finalize worker';
CREATE FOREIGN DATA WRAPPER finalize_iceberg
    VALIDATOR finalize_internal.iceberg_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_iceberg IS
    'Iceberg REST catalogs whose tables'' snapshots say how far a pipeline got (finalize.add_consumer(..., iceberg_server => ...))';
CREATE FOREIGN DATA WRAPPER finalize_s3
    VALIDATOR finalize_internal.s3_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_s3 IS
    'S3-compatible object stores listed by finalize.release_gate';
CREATE FOREIGN DATA WRAPPER finalize_webhook
    VALIDATOR finalize_internal.webhook_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_webhook IS
    'Webhook targets the finalize alerts worker delivers incidents to (json, slack, pagerduty_v2, opsgenie)';

-- Admins create servers and user mappings of finalize's wrappers.
GRANT USAGE ON FOREIGN DATA WRAPPER finalize_mssql, finalize_iceberg, finalize_s3, finalize_webhook TO finalize_admin;
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
-- Last: statistics for the extension's new, empty tables. A table never
-- analyzed is planned as if it spanned 10 pages, so a view that probes
-- several of them per tracked table (finalize.status over 10,000 tables)
-- is costed past jit_above_cost and spends most of a second compiling.
-- ANALYZE records them as empty; autovacuum keeps the figures current as
-- they fill (the workers report their writes to the statistics system).
DO $analyze$
DECLARE
    rel record;
BEGIN
    -- The extension's own tables only (not whatever else the schema holds).
    FOR rel IN
        SELECT n.nspname, c.relname
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_class c ON c.oid = d.objid
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.deptype = 'e'
           AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'finalize')
           AND c.relkind = 'r'
         ORDER BY c.relname
    LOOP
        EXECUTE pg_catalog.format('ANALYZE %I.%I', rel.nspname, rel.relname);
    END LOOP;
END
$analyze$;
