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
-- Ranges whose last commit is stamped after their end (SQL Server's clock
-- went back inside them) are rare: changes_by_period reaches back by their
-- lag when it searches ranges by end_commit_time.
CREATE INDEX fact_clock_lag_idx
    ON @extschema@.fact (table_id)
    WHERE kind = 'range' AND last_commit_time > end_commit_time;
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
                                           'clock_skew', 'internal_error', 'tls_failed', 'kerberos_failed')),
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
    cycle_time        interval,
    ticket_expires    timestamptz
);
COMMENT ON COLUMN @extschema@.source_status.condition IS
    'ok, or why the last cycle could not read the source (unreachable, sql_error, no_max_lsn, timezone_mismatch, ...)';
COMMENT ON COLUMN @extschema@.source_status.cycle_time IS
    'How long the last successful cycle took, from reading the tracked tables to committing their facts: keep it below finalize.poll_interval';
COMMENT ON COLUMN @extschema@.source_status.held_by IS
    'A condition that stops the source until finalize.release_source() (commit_time_ahead): it may not show on every cycle, but once seen no commit time of the source can be trusted';
COMMENT ON COLUMN @extschema@.source_status.ticket_expires IS
    'authentication kerberos: when the service ticket for SQL Server ends (finalize gets a new one from the keytab before); NULL otherwise, or when it has none';
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
