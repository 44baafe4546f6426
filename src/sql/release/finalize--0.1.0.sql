-- finalize install script, assembled by the Makefile from src/sql/*.sql in
-- name order. Everything lives in schema finalize (not relocatable).

\echo Use "CREATE EXTENSION finalize" to load this file. \quit

-- Three group roles, created once per cluster and kept when the extension is
-- dropped (roles are cluster-wide; other databases may use them):
--   finalize_reader     sensors: verdict functions and the status view only
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
END
$roles$;
GRANT finalize_reader TO finalize_publisher;
GRANT finalize_publisher TO finalize_admin;

-- Nothing in the schema is usable by PUBLIC; the grants at the end of the
-- script open exactly what each role needs.
REVOKE ALL ON SCHEMA @extschema@ FROM PUBLIC;
GRANT USAGE ON SCHEMA @extschema@ TO finalize_reader;

-- An LSN as SQL Server prints it: 0x and 20 upper-case hex digits. Text in the
-- "C" collation, so string order is LSN order and JSON carries it unchanged.
CREATE DOMAIN @extschema@.lsn AS text COLLATE "C"
    CONSTRAINT lsn_format CHECK (VALUE ~ '^0x[0-9A-F]{20}$');
COMMENT ON DOMAIN @extschema@.lsn IS
    'SQL Server log sequence number as 0x followed by 20 upper-case hex digits';
-- Sources are foreign servers of this wrapper; credentials live only in user
-- mappings. The wrapper has no handler: it holds connection options, it does
-- not serve foreign tables.

CREATE FUNCTION @extschema@._mssql_validator(options text[], catalog oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_mssql_validator'
LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER finalize_mssql
    VALIDATOR @extschema@._mssql_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_mssql IS
    'SQL Server databases with change data capture, read by the finalize worker';

GRANT USAGE ON FOREIGN DATA WRAPPER finalize_mssql TO finalize_admin;

-- Splits a SQL Server two-part name (dbo.orders, [my schema].[odd]]name]) into
-- its unquoted parts; the error names the argument it was given as.
CREATE FUNCTION @extschema@._split_mssql_name(name text, argname text)
RETURNS text[]
AS 'MODULE_PATHNAME', 'finalize_split_mssql_name'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- Quotes one SQL Server identifier with brackets, doubling any ].
CREATE FUNCTION @extschema@.quote_mssql_ident(ident text)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_quote_mssql_ident'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.quote_mssql_ident(text) IS
    'Quote a SQL Server identifier with brackets, doubling any ]';
-- The catalog: tracked tables, their verdicts, the facts behind them and the
-- runtime status of each source. All writes go through functions of this
-- extension or its worker; roles only read through views and functions.

-- A logical table (what the lake calls it) fed by one SQL Server table.
-- Untracking keeps the row (and its facts) until retention removes them; a
-- name can be tracked again, as a new table_id with a fresh verdict.
CREATE TABLE @extschema@.tracked_table (
    table_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_name        text COLLATE "C" NOT NULL
                      CHECK (length(table_name) BETWEEN 1 AND 255),
    server_name       text NOT NULL,
    source_schema     text NOT NULL,
    source_name       text NOT NULL,
    capture_instance  text,
    granularity       interval NOT NULL
                      CHECK (granularity > interval '0' AND extract(month FROM granularity) = 0
                             AND extract(year FROM granularity) = 0),
    state             text NOT NULL DEFAULT 'active'
                      CHECK (state IN ('active', 'paused', 'data_lost', 'schema_blocked', 'resuming')),
    state_detail      text,
    state_since       timestamptz NOT NULL DEFAULT now(),
    start_from        text NOT NULL DEFAULT 'max_lsn'
                      CHECK (start_from IN ('max_lsn', 'capture_start')),
    ddl_policy        text NOT NULL DEFAULT 'warn'
                      CHECK (ddl_policy IN ('warn', 'block')),
    on_data_loss      text NOT NULL DEFAULT 'stop'
                      CHECK (on_data_loss IN ('stop', 'resume')),
    created_at        timestamptz NOT NULL DEFAULT now(),
    created_by        name NOT NULL,
    untracked_at      timestamptz
);
COMMENT ON TABLE @extschema@.tracked_table IS
    'Logical tables whose completeness finalize tracks, and their SQL Server source';

-- Sensors and the write path look tables up by name among the tracked ones.
CREATE UNIQUE INDEX tracked_table_active_name_idx
    ON @extschema@.tracked_table (table_name) WHERE untracked_at IS NULL;
-- The worker lists the tables of one source.
CREATE INDEX tracked_table_server_idx
    ON @extschema@.tracked_table (server_name) WHERE untracked_at IS NULL;

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
    blocked_ddl_lsn     @extschema@.lsn
);
COMMENT ON TABLE @extschema@.watermark IS
    'Per table: every period ending at or before finalized_until is complete; offset_lsn is the end of the last recorded range';
COMMENT ON COLUMN @extschema@.watermark.schema_ack_lsn IS
    'DDL recorded at or before this LSN was reviewed (finalize.resume_table) and no longer blocks the table';
COMMENT ON COLUMN @extschema@.watermark.blocked_ddl_lsn IS
    'While the table is schema_blocked: the LSN of the DDL that blocked it, which finalize.resume_table() acknowledges';
COMMENT ON COLUMN @extschema@.watermark.offset_lsn IS
    'Inclusive end of the last recorded range; the next range must start (exclusively) here';

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
                                             'data_loss', 'schema_blocked', 'resume_requested', 'resumed')),
    detail             jsonb,
    ranges             integer NOT NULL DEFAULT 1 CHECK (ranges >= 1),
    recorded_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (start_lsn < end_lsn),
    CHECK (first_commit_time <= last_commit_time),
    CHECK ((first_commit_time IS NULL) = (inserts + updates + deletes = 0)),
    CHECK (kind = 'event' OR (end_lsn IS NOT NULL AND end_commit_time IS NOT NULL)),
    CHECK (kind = 'range' OR event IS NOT NULL)
);
COMMENT ON TABLE @extschema@.fact IS
    'Facts recorded per CDC range (counts, LSN and commit-time spans) and events (data loss, schema change, ...)';

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
-- Retention deletes by age.
CREATE INDEX fact_recorded_at_idx
    ON @extschema@.fact (recorded_at);

-- Why the worker could not read or record a table on its last attempt: one
-- row while there is a reason, none once it could. Kept apart from the
-- watermark so that a session holding the watermark's row lock (an open
-- transaction that called resume_table, say) cannot keep the worker from
-- saying so, and so that a condition never invalidates cached verdicts.
CREATE TABLE @extschema@.table_condition (
    table_id          bigint PRIMARY KEY
                      REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    condition         text NOT NULL,
    detail            text,
    since             timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE @extschema@.table_condition IS
    'Per table: why the worker could not read or record it on its last attempt (no row when it could)';

-- Runtime status of each source, written by its worker once per cycle.
CREATE TABLE @extschema@.source_status (
    server_name       text PRIMARY KEY,
    worker_pid        integer,
    condition         text NOT NULL DEFAULT 'starting',
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
    held_by           text,
    held_since        timestamptz
);
COMMENT ON COLUMN @extschema@.source_status.condition IS
    'ok, or why the last cycle could not read the source (unreachable, sql_error, no_max_lsn, timezone_mismatch, ...)';
COMMENT ON COLUMN @extschema@.source_status.held_by IS
    'A condition that stops the source until finalize.release_source() (commit_time_ahead): it may not show on every cycle, but once seen no commit time of the source can be trusted';
COMMENT ON COLUMN @extschema@.source_status.cycles IS
    'Cycles the worker has recorded for this source, successful or not';
COMMENT ON TABLE @extschema@.source_status IS
    'Per source: what its worker saw on its last cycle';

-- pg_dump keeps the contents of these tables with the extension.
SELECT pg_catalog.pg_extension_config_dump('@extschema@.tracked_table', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.watermark', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fact', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.tracked_table_table_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fact_fact_id_seq', '');

-- Every committed change of a verdict or a tracked table bumps a shared
-- epoch, so backends drop the verdicts they cached (see verdict_cache.c).
CREATE FUNCTION @extschema@._verdict_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'finalize_verdict_changed'
LANGUAGE C;
CREATE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.tracked_table
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@._verdict_changed();
CREATE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.watermark
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@._verdict_changed();
-- Period arithmetic, in C so the sensors and the write path share one
-- implementation. Periods are aligned like date_bin with origin
-- 2000-01-01 00:00 UTC; a granularity has no months (their length varies).

CREATE FUNCTION @extschema@.period_start(ts timestamptz, granularity interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_period_start'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.period_start(timestamptz, interval) IS
    'Start of the period of the given granularity that contains ts';

CREATE FUNCTION @extschema@.period_end(ts timestamptz, granularity interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_period_end'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.period_end(timestamptz, interval) IS
    'End (exclusive) of the period of the given granularity that contains ts';

-- Checks that a granularity can define periods (no months, positive, a
-- length that fits in 64 bits of microseconds): the C code that computes
-- periods decides; the error names the argument.
CREATE FUNCTION @extschema@._check_granularity(granularity interval, argname text)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_check_granularity'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- The verdict for the period containing ts under a watermark, as is_final
-- gives it (false while there is no watermark). Every SQL function that
-- reports finality uses this: adding a granularity to a timestamptz in SQL
-- would be calendar arithmetic in the session's TimeZone.
CREATE FUNCTION @extschema@._period_final(ts timestamptz, granularity interval, finalized_until timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_period_final'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- The periods that intersect [from_time, to_time), at most 100000.
CREATE FUNCTION @extschema@._periods(from_time timestamptz, to_time timestamptz, granularity interval,
                                     OUT period_start timestamptz, OUT period_end timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'finalize_periods'
LANGUAGE C IMMUTABLE PARALLEL SAFE ROWS 24;

-- ISO 8601 in UTC for JSON payloads, independent of the session's TimeZone.
CREATE FUNCTION @extschema@._utc_iso(ts timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN date_trunc('second', ts AT TIME ZONE 'UTC') = ts AT TIME ZONE 'UTC'
            THEN to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
            ELSE to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') END;

-- Normalizes LSN text to the stored form (upper case); the error names the
-- argument and shows the expected shape.
CREATE FUNCTION @extschema@._lsn_arg(value text, argname text)
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

-- SQL Server local commit time to an instant, as the worker converts it: an
-- ambiguous local time (DST fall-back) is the earlier instant, a skipped one
-- (spring-forward) the earliest any nearby offset gives.
CREATE FUNCTION @extschema@.mssql_local_to_instant(local_time timestamp, zone text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_local_to_instant'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.mssql_local_to_instant(timestamp, text) IS
    'Instant of a SQL Server local time in the given zone, the earliest when ambiguous';
-- Registering and unregistering tracked tables (finalize_admin).

-- Raises the error every function uses for a missing argument.
CREATE FUNCTION @extschema@._require(value anyelement, argname text)
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
CREATE FUNCTION @extschema@._check_choice(value text, argname text, allowed text[], meaning text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @extschema@._require(value, argname);
    IF NOT value = ANY (allowed) THEN
        RAISE EXCEPTION 'invalid value for argument %: "%"', argname, value
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = meaning,
                  HINT = format('Use one of: %s.', array_to_string(allowed, ', '));
    END IF;
END
$$;

CREATE FUNCTION @extschema@._check_ddl_policy(ddl_policy text)
RETURNS void
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@._check_choice(ddl_policy, 'ddl_policy', ARRAY['warn', 'block'],
    'With warn, DDL on the source table is an event fact and a warning and the verdict goes on; with block the verdict stops at the DDL until finalize.resume_table().');

CREATE FUNCTION @extschema@._check_on_data_loss(on_data_loss text)
RETURNS void
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@._check_choice(on_data_loss, 'on_data_loss', ARRAY['stop', 'resume'],
    'With stop, a data loss stops the verdict until finalize.resume_table(); with resume the worker records the loss and resumes by itself, unless another loss happened within finalize.data_loss_window.');

-- Finds a server of the finalize_mssql wrapper by name; the errors say what
-- to create or fix.
CREATE FUNCTION @extschema@._mssql_server(server_name text, argname text)
RETURNS pg_catalog.pg_foreign_server
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    srv pg_foreign_server;
    wrapper name;
    opt text;
BEGIN
    PERFORM @extschema@._require(server_name, argname);
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

-- The body of finalize.track_table, run as the extension's owner by its C entry
-- point (owner.c) with the caller taken before the switch.
CREATE FUNCTION @extschema@._track_table(
    caller name,
    table_name   text,
    server_name  text,
    source_table text,
    granularity  interval DEFAULT interval '1 hour',
    start_from   text DEFAULT 'max_lsn',
    ddl_policy   text DEFAULT 'warn',
    on_data_loss text DEFAULT 'stop')
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
BEGIN
    PERFORM @extschema@._require(_track_table.table_name, 'table_name');
    IF _track_table.table_name !~ '\S' OR length(_track_table.table_name) > 255 THEN
        RAISE EXCEPTION 'invalid value for argument table_name: "%"', _track_table.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A tracked table name is the name consumers use (for example sales.orders): 1 to 255 characters, not only spaces.';
    END IF;
    srv := @extschema@._mssql_server(_track_table.server_name, 'server_name');
    -- The worker reads tracked tables with the server's login: tracking a
    -- table through a server is using it.
    IF NOT has_server_privilege(who, srv.oid, 'USAGE') THEN
        RAISE EXCEPTION 'permission denied for server %', _track_table.server_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Role %s has no USAGE on the server, and the worker reads tracked tables with the server''s login.', who),
                  HINT = format('The server''s owner can run GRANT USAGE ON FOREIGN SERVER %I TO %I.', _track_table.server_name, who);
    END IF;
    -- The worker logs in with the user mapping of the server's owner when
    -- there is one (else PUBLIC's, which USAGE lets a role use): a role
    -- must not read through a login it could not use itself.
    IF EXISTS (SELECT FROM pg_user_mapping m WHERE m.umserver = srv.oid AND m.umuser = srv.srvowner)
       AND NOT pg_has_role(who, srv.srvowner, 'USAGE') THEN
        RAISE EXCEPTION 'permission denied for server %', _track_table.server_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('The worker reads the tables of server %s with the user mapping of its owner %s, which role %s may not use.',
                                  _track_table.server_name, srv.srvowner::regrole, who),
                  HINT = format('Track the table as a member of role %s, or let the worker use a PUBLIC user mapping of the server instead.',
                                srv.srvowner::regrole);
    END IF;
    PERFORM @extschema@._require(_track_table.source_table, 'source_table');
    parts := @extschema@._split_mssql_name(_track_table.source_table, 'source_table');
    PERFORM @extschema@._check_granularity(_track_table.granularity, 'granularity');
    PERFORM @extschema@._check_choice(_track_table.start_from, 'start_from', ARRAY['max_lsn', 'capture_start'],
        'Tracking starts at SQL Server''s current max LSN (max_lsn, the default) or at the start of the capture instance (capture_start).');
    PERFORM @extschema@._check_ddl_policy(_track_table.ddl_policy);
    PERFORM @extschema@._check_on_data_loss(_track_table.on_data_loss);

    BEGIN
        INSERT INTO @extschema@.tracked_table
            (table_name, server_name, source_schema, source_name, granularity, start_from,
             ddl_policy, on_data_loss, created_by)
        VALUES (_track_table.table_name, _track_table.server_name, parts[1], parts[2], _track_table.granularity,
                _track_table.start_from, _track_table.ddl_policy, _track_table.on_data_loss, who)
        RETURNING table_id INTO new_id;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'table "%" is already tracked', _track_table.table_name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Untrack it first with finalize.untrack_table(), or choose another name.';
    END;
    INSERT INTO @extschema@.watermark (table_id) VALUES (new_id);
    RETURN new_id;
END
$$;

CREATE FUNCTION @extschema@.track_table(
    table_name   text,
    server_name  text,
    source_table text,
    granularity  interval DEFAULT interval '1 hour',
    start_from   text DEFAULT 'max_lsn',
    ddl_policy   text DEFAULT 'warn',
    on_data_loss text DEFAULT 'stop')
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.track_table(text, text, text, interval, text, text, text) IS
    'Start tracking a logical table fed by a SQL Server table with CDC enabled';

CREATE FUNCTION @extschema@.untrack_table(table_name text, keep_facts boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    id bigint;
BEGIN
    PERFORM @extschema@._require(untrack_table.table_name, 'table_name');
    PERFORM @extschema@._require(keep_facts, 'keep_facts');
    SELECT t.table_id INTO id
      FROM @extschema@.tracked_table t
     WHERE t.table_name = untrack_table.table_name AND t.untracked_at IS NULL
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM @extschema@._not_tracked(untrack_table.table_name);
    END IF;
    IF keep_facts THEN
        UPDATE @extschema@.tracked_table SET untracked_at = now() WHERE table_id = id;
    ELSE
        DELETE FROM @extschema@.tracked_table WHERE table_id = id;
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@.untrack_table(text, boolean) IS
    'Stop tracking a table; its facts stay until retention removes them unless keep_facts is false';

-- The one error for a table name that is not tracked.
CREATE FUNCTION @extschema@._not_tracked(table_name text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'table "%" is not tracked by finalize', table_name
        USING ERRCODE = 'undefined_object',
              HINT = 'Check the name in finalize.status, or start tracking it with finalize.track_table().';
END
$$;

-- The tracked table of a name, or the not-tracked error.
CREATE FUNCTION @extschema@._tracked_id(table_name text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id bigint;
BEGIN
    PERFORM @extschema@._require(table_name, 'table_name');
    SELECT t.table_id INTO id FROM @extschema@.tracked_table t
     WHERE t.table_name = _tracked_id.table_name AND t.untracked_at IS NULL;
    IF NOT FOUND THEN
        PERFORM @extschema@._not_tracked(table_name);
    END IF;
    RETURN id;
END
$$;

-- Changes how a tracked table is handled; NULL keeps a setting.
CREATE FUNCTION @extschema@.alter_tracked_table(
    table_name   text,
    granularity  interval DEFAULT NULL,
    ddl_policy   text DEFAULT NULL,
    on_data_loss text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    id bigint;
BEGIN
    PERFORM @extschema@._require(alter_tracked_table.table_name, 'table_name');
    IF granularity IS NOT NULL THEN
        PERFORM @extschema@._check_granularity(granularity, 'granularity');
    END IF;
    IF ddl_policy IS NOT NULL THEN
        PERFORM @extschema@._check_ddl_policy(ddl_policy);
    END IF;
    IF on_data_loss IS NOT NULL THEN
        PERFORM @extschema@._check_on_data_loss(on_data_loss);
    END IF;
    SELECT t.table_id INTO id FROM @extschema@.tracked_table t
     WHERE t.table_name = alter_tracked_table.table_name AND t.untracked_at IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM @extschema@._not_tracked(alter_tracked_table.table_name);
    END IF;
    -- The verdict stays valid under any granularity: it is an instant before
    -- which every commit is captured; only later advances use the new one.
    UPDATE @extschema@.tracked_table t
       SET granularity = coalesce(alter_tracked_table.granularity, t.granularity),
           ddl_policy = coalesce(alter_tracked_table.ddl_policy, t.ddl_policy),
           on_data_loss = coalesce(alter_tracked_table.on_data_loss, t.on_data_loss)
     WHERE t.table_id = id;
END
$$;
COMMENT ON FUNCTION @extschema@.alter_tracked_table(text, interval, text, text) IS
    'Change the granularity, DDL policy or data-loss policy of a tracked table';

-- Lets a stopped table go on. After a schema change that blocked it, the DDL
-- counts as reviewed and the verdict continues from where it stopped. After
-- a data loss, the table is marked resuming; the worker then records the lost
-- LSN range as a "resumed" event (with who asked) and restarts the table at
-- its capture instance's current min LSN, so the verdict resumes only from
-- there. The lost range stays visible in finalize.facts.
-- The body of finalize.resume_table, run as the extension's owner by its C entry
-- point (owner.c) with the caller taken before the switch.
CREATE FUNCTION @extschema@._resume_table(
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
    PERFORM @extschema@._require(_resume_table.table_name, 'table_name');
    SELECT t.* INTO tt FROM @extschema@.tracked_table t
     WHERE t.table_name = _resume_table.table_name AND t.untracked_at IS NULL;
    IF NOT FOUND THEN
        PERFORM @extschema@._not_tracked(_resume_table.table_name);
    END IF;
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

CREATE FUNCTION @extschema@.resume_table(table_name text)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.resume_table(text) IS
    'Let a table stopped by a data loss or a blocking schema change go on, recording who and what was lost';

-- Lets a source held by a condition that a later cycle cannot disprove
-- (commit_time_ahead) go on, once the cause is fixed on SQL Server. Returns
-- whether it was held. The worker's next cycle checks again.
CREATE FUNCTION @extschema@.release_source(server_name text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    released boolean;
BEGIN
    PERFORM @extschema@._require(release_source.server_name, 'server_name');
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
-- The one write path of the verdict. The worker records every range it reads
-- through record_range, in the same transaction as the facts, so a crash can
-- only leave the verdict behind, never ahead.
--
-- NOTIFY channel "finalize": on every advance, a JSON object
--   {"table": ..., "old": ..., "new": ..., "lsn": ..., "commit_time": ...}
-- with times in UTC ISO 8601 ("old" is null on the first advance).

-- Locks the verdict row of a table for a write and returns the table, which
-- must still be tracked: every write of the worker names its table by id, so
-- a name untracked and tracked again meanwhile (a new table_id, maybe on
-- another server) never receives what was read for the old one.
-- With must_exist false, a table no longer tracked is NULL, not an error.
CREATE FUNCTION @extschema@._lock_tracked(table_id bigint, must_exist boolean DEFAULT true)
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
    SELECT t.* INTO tt FROM @extschema@.tracked_table t
     WHERE t.table_id = _lock_tracked.table_id AND t.untracked_at IS NULL FOR KEY SHARE;
    IF FOUND THEN
        PERFORM FROM @extschema@.watermark w WHERE w.table_id = _lock_tracked.table_id FOR UPDATE;
        SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = _lock_tracked.table_id;
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

-- The commit-time guard of the write path: a commit time further ahead of
-- this server's clock than finalize.max_clock_skew is refused, since GREATEST
-- would keep a verdict it moved for ever.
CREATE FUNCTION @extschema@._check_commit_time(table_name text, argname text, commit_time timestamptz)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    skew interval := @extschema@._max_clock_skew();
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

-- The write path itself, by table id (the worker's way; record_range is the
-- same by name).
CREATE FUNCTION @extschema@._record_range(
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
    detail            jsonb)
RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    s     @extschema@.lsn := @extschema@._lsn_arg(start_lsn, 'start_lsn');
    e     @extschema@.lsn := @extschema@._lsn_arg(end_lsn, 'end_lsn');
    tt    @extschema@.tracked_table;
    wm    @extschema@.watermark;
    prev  @extschema@.fact;
    empty boolean;
    new_until timestamptz;
BEGIN
    PERFORM @extschema@._require(_record_range.table_id, 'table_id');
    PERFORM @extschema@._require(e, 'end_lsn');
    PERFORM @extschema@._require(end_commit_time, 'end_commit_time');
    PERFORM @extschema@._require(inserts, 'inserts');
    PERFORM @extschema@._require(updates, 'updates');
    PERFORM @extschema@._require(deletes, 'deletes');
    -- Serialize writers of this table; it must still be tracked.
    tt := @extschema@._lock_tracked(_record_range.table_id);
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    IF inserts < 0 OR updates < 0 OR deletes < 0 THEN
        RAISE EXCEPTION 'invalid row counts for table "%": inserts %, updates %, deletes %',
                        tt.table_name, inserts, updates, deletes
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Row counts cannot be negative.';
    END IF;
    empty := inserts + updates + deletes = 0;
    IF empty <> (first_commit_time IS NULL) OR (first_commit_time IS NULL) <> (last_commit_time IS NULL)
       OR first_commit_time > last_commit_time THEN
        RAISE EXCEPTION 'invalid commit-time span for table "%": % to %',
                        tt.table_name, first_commit_time, last_commit_time
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A range with rows needs first_commit_time <= last_commit_time; an empty range has neither.';
    END IF;
    PERFORM @extschema@._check_commit_time(tt.table_name, 'end_commit_time', end_commit_time);
    PERFORM @extschema@._check_commit_time(tt.table_name, 'last_commit_time', last_commit_time);
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

    -- A range that ends at or before the offset was recorded before: an
    -- identical repeat changes nothing, anything else contradicts the facts.
    IF wm.offset_lsn IS NOT NULL AND e <= wm.offset_lsn THEN
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
            RETURN wm.finalized_until;
        END IF;
        RAISE EXCEPTION 'range (%, %] of table "%" contradicts facts already recorded',
                        coalesce(s::text, 'NULL'), e, tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('The recorded ranges of this table reach LSN %s, and none of them is this range with these counts.', wm.offset_lsn),
                  HINT = 'Ranges are recorded once, in LSN order; repeating a recorded range unchanged is allowed.';
    END IF;
    IF wm.offset_lsn IS NOT NULL THEN
        IF s IS NULL THEN
            RAISE EXCEPTION 'table "%" already has an offset', tt.table_name
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('Its facts reach LSN %s; only the first range may omit start_lsn.', wm.offset_lsn),
                      HINT = format('Record the range (%s, %s] instead.', wm.offset_lsn, e);
        ELSIF s < wm.offset_lsn THEN
            RAISE EXCEPTION 'range (%, %] of table "%" overlaps the range recorded up to LSN %',
                            s, e, tt.table_name, wm.offset_lsn
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'Ranges of a table must chain: each starts (exclusively) where the previous one ended.',
                      HINT = format('Record the range (%s, %s] instead.', wm.offset_lsn, e);
        ELSIF s > wm.offset_lsn THEN
            RAISE EXCEPTION 'range (%, %] of table "%" leaves a gap after LSN %', s, e, tt.table_name, wm.offset_lsn
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'Ranges of a table must chain: each starts (exclusively) where the previous one ended.',
                      HINT = format('Record the range (%s, %s] first.', wm.offset_lsn, s);
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

    -- Consecutive empty ranges coalesce into one fact, so an idle table keeps
    -- a bounded number of rows.
    prev := NULL;
    IF empty AND event IS NULL AND s IS NOT NULL THEN
        SELECT f.* INTO prev FROM @extschema@.fact f
         WHERE f.table_id = tt.table_id AND f.kind = 'range' AND f.end_lsn = s
           AND f.event IS NULL AND f.inserts + f.updates + f.deletes = 0
           AND f.capture_instance IS NOT DISTINCT FROM _record_range.capture_instance;
    END IF;
    IF prev.fact_id IS NOT NULL THEN
        UPDATE @extschema@.fact f
           SET end_lsn = e, end_commit_time = _record_range.end_commit_time,
               ranges = f.ranges + 1, recorded_at = now()
         WHERE f.fact_id = prev.fact_id;
    ELSE
        INSERT INTO @extschema@.fact
            (table_id, kind, start_lsn, end_lsn, end_commit_time, inserts, updates, deletes,
             first_commit_time, last_commit_time, capture_instance, event, detail)
        VALUES
            (tt.table_id, 'range', s, e, end_commit_time, inserts, updates, deletes,
             first_commit_time, last_commit_time, capture_instance,
             CASE WHEN s IS NULL THEN 'tracking_started' ELSE event END, detail);
    END IF;

    new_until := GREATEST(wm.finalized_until,
                          @extschema@.period_start(end_commit_time, tt.granularity));
    UPDATE @extschema@.watermark w
       SET finalized_until = new_until,
           offset_lsn = e,
           offset_commit_time = end_commit_time,
           recorded_at = now(),
           advanced_at = CASE WHEN new_until IS DISTINCT FROM wm.finalized_until
                              THEN now() ELSE w.advanced_at END
     WHERE w.table_id = tt.table_id;

    IF new_until IS DISTINCT FROM wm.finalized_until THEN
        PERFORM pg_notify('finalize', json_build_object(
            'table', tt.table_name,
            'old', @extschema@._utc_iso(wm.finalized_until),
            'new', @extschema@._utc_iso(new_until),
            'lsn', e,
            'commit_time', @extschema@._utc_iso(end_commit_time))::text);
    END IF;
    RETURN new_until;
END
$$;

CREATE FUNCTION @extschema@.record_range(
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
    detail            jsonb DEFAULT NULL)
RETURNS timestamptz
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN @extschema@._record_range(@extschema@._tracked_id(table_name), start_lsn, end_lsn, end_commit_time,
                                 inserts, updates, deletes, first_commit_time, last_commit_time,
                                 capture_instance, event, detail);
COMMENT ON FUNCTION @extschema@.record_range(text, text, text, timestamptz, bigint, bigint, bigint,
                                             timestamptz, timestamptz, text, text, jsonb) IS
    'Record the facts of one CDC range (start exclusive, end inclusive) and advance the verdict';

-- Removes facts older than the retention (finalize.facts_retention unless
-- given), and untracked tables with no facts left. The fact a table's offset
-- points at is kept, so the chain of ranges can always be checked.
CREATE FUNCTION @extschema@.purge_facts(older_than interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    keep interval := coalesce(older_than, @extschema@._facts_retention());
    removed bigint;
BEGIN
    IF keep < interval '0' THEN
        RAISE EXCEPTION 'invalid value for argument older_than: "%" is negative', keep
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DELETE FROM @extschema@.fact f
     WHERE f.recorded_at < now() - keep
       AND NOT EXISTS (SELECT FROM @extschema@.watermark w
                        WHERE w.table_id = f.table_id AND w.offset_lsn = f.end_lsn AND f.kind = 'range');
    GET DIAGNOSTICS removed = ROW_COUNT;
    DELETE FROM @extschema@.tracked_table t
     WHERE t.untracked_at < now() - keep
       AND NOT EXISTS (SELECT FROM @extschema@.fact f WHERE f.table_id = t.table_id
                        AND f.recorded_at >= now() - keep);
    RETURN removed;
END
$$;
COMMENT ON FUNCTION @extschema@.purge_facts(interval) IS
    'Delete facts older than the retention (finalize.facts_retention by default); returns how many';

CREATE FUNCTION @extschema@._facts_retention()
RETURNS interval
AS 'MODULE_PATHNAME', 'finalize_facts_retention'
LANGUAGE C STABLE;

-- finalize.max_clock_skew as an interval of hours (no days, so adding it to
-- a timestamptz is exact in every session zone).
CREATE FUNCTION @extschema@._max_clock_skew()
RETURNS interval
AS 'MODULE_PATHNAME', 'finalize_max_clock_skew'
LANGUAGE C STABLE;
-- What the worker writes besides ranges: events that stop a verdict, why a
-- table could not be read, and what it saw of its source. Only superusers
-- (the worker) may call these; none is granted to a role.
--
-- NOTIFY channel "finalize_alert": one JSON payload when something needs a
-- person: {"alert": "data_loss" | "schema_blocked" | "capture_stalled" |
-- "capture_resumed" | "commit_time_ahead" | "clock_skew" |
-- "timezone_mismatch", ...}.

-- Sends an alert on channel finalize_alert. A NOTIFY payload must be shorter
-- than 8000 bytes, and an alert must never fail (and take the event it
-- reports with it) for its size: long values are cut, names and LSNs are
-- kept, and "truncated" says so. The full text stays in the facts.
CREATE FUNCTION @extschema@._alert(payload jsonb)
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
    PERFORM pg_notify('finalize_alert', body);
END
$$;

-- The active tables of a source, with what the worker needs to plan them
-- (one read per cycle).
CREATE FUNCTION @extschema@._source_tables(server_name text)
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
     WHERE t.server_name = _source_tables.server_name AND t.untracked_at IS NULL
       AND t.state IN ('active', 'resuming')
     ORDER BY t.table_id;
END;

-- The foreign servers of finalize_mssql that have tracked tables: the
-- sources the scheduler keeps a worker for.
CREATE FUNCTION @extschema@._wanted_sources()
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
CREATE FUNCTION @extschema@._still_tracked(table_id bigint)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
RETURN (@extschema@._lock_tracked(table_id, false)).table_id IS NOT NULL;

-- Records an event fact (data loss, ...) and, when new_state is given, moves
-- the table to that state. Never touches the verdict or the offset.
CREATE FUNCTION @extschema@._record_event(
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
    tt @extschema@.tracked_table := @extschema@._lock_tracked(_record_event.table_id);
BEGIN
    INSERT INTO @extschema@.fact (table_id, kind, event, start_lsn, end_lsn, capture_instance, detail)
    VALUES (_record_event.table_id, 'event', event,
            @extschema@._lsn_arg(start_lsn, 'start_lsn'), @extschema@._lsn_arg(end_lsn, 'end_lsn'),
            capture_instance, detail);
    IF new_state IS NOT NULL THEN
        UPDATE @extschema@.tracked_table t
           SET state = new_state, state_detail = _record_event.state_detail, state_since = now()
         WHERE t.table_id = _record_event.table_id;
    END IF;
    -- resume_table acknowledges this LSN, whatever happens to the fact.
    IF event = 'schema_blocked' THEN
        UPDATE @extschema@.watermark w
           SET blocked_ddl_lsn = @extschema@._lsn_arg(end_lsn, 'end_lsn')
         WHERE w.table_id = _record_event.table_id;
    END IF;
    IF event IN ('data_loss', 'schema_blocked') THEN
        PERFORM @extschema@._alert(jsonb_build_object(
            'alert', event,
            'table', tt.table_name,
            'capture_instance', capture_instance, 'start_lsn', start_lsn, 'end_lsn', end_lsn,
            'detail', state_detail));
    END IF;
END
$$;

-- Restarts a table after a data loss, at new_offset (just below its capture
-- instance's min LSN): records the lost LSN range as a "resumed" event, moves
-- the offset and makes the table active again. The verdict is untouched: it
-- moves again with the next range recorded.
CREATE FUNCTION @extschema@._resume_after_loss(
    table_id         bigint,
    new_offset       text,
    new_offset_time  timestamptz,
    capture_instance text,
    automatic        boolean,
    detail           jsonb)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    wm @extschema@.watermark;
    requested_by name;
BEGIN
    PERFORM @extschema@._lock_tracked(_resume_after_loss.table_id);
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = _resume_after_loss.table_id;
    SELECT f.detail ->> 'by' INTO requested_by FROM @extschema@.fact f
     WHERE f.table_id = _resume_after_loss.table_id AND f.event = 'resume_requested'
     ORDER BY f.fact_id DESC LIMIT 1;
    INSERT INTO @extschema@.fact (table_id, kind, event, start_lsn, end_lsn, capture_instance, detail)
    VALUES (_resume_after_loss.table_id, 'event', 'resumed', wm.offset_lsn,
            @extschema@._lsn_arg(new_offset, 'new_offset'), capture_instance,
            detail || jsonb_build_object(
                'after', 'data_loss',
                'by', CASE WHEN automatic THEN 'finalize worker (on_data_loss = resume)' ELSE requested_by END,
                'lost_from_lsn', wm.offset_lsn, 'lost_to_lsn', new_offset,
                'lost_from_time', wm.offset_commit_time, 'lost_to_time', new_offset_time));
    UPDATE @extschema@.watermark w
       SET offset_lsn = @extschema@._lsn_arg(new_offset, 'new_offset'),
           offset_commit_time = new_offset_time,
           recorded_at = now()
     WHERE w.table_id = _resume_after_loss.table_id;
    UPDATE @extschema@.tracked_table t
       SET state = 'active', state_detail = NULL, state_since = now(),
           capture_instance = coalesce(_resume_after_loss.capture_instance, t.capture_instance)
     WHERE t.table_id = _resume_after_loss.table_id;
END
$$;

-- Sets (or clears, with NULL) why the worker could not read or record a
-- table; writes only when something changed, and never for a table that is
-- gone.
CREATE FUNCTION @extschema@._set_condition(table_id bigint, condition text, detail text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    IF condition IS NULL THEN
        DELETE FROM @extschema@.table_condition c WHERE c.table_id = _set_condition.table_id;
        RETURN;
    END IF;
    INSERT INTO @extschema@.table_condition AS c (table_id, condition, detail)
    SELECT t.table_id, _set_condition.condition, _set_condition.detail
      FROM @extschema@.tracked_table t
     WHERE t.table_id = _set_condition.table_id AND t.untracked_at IS NULL
    ON CONFLICT ON CONSTRAINT table_condition_pkey DO UPDATE
       SET condition = excluded.condition,
           detail = excluded.detail,
           since = CASE WHEN c.condition = excluded.condition THEN c.since ELSE now() END
     WHERE (c.condition, c.detail) IS DISTINCT FROM (excluded.condition, excluded.detail);
END
$$;

-- Remembers the capture instance the worker follows for a table.
CREATE FUNCTION @extschema@._set_capture_instance(table_id bigint, capture_instance text)
RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    UPDATE @extschema@.tracked_table t
       SET capture_instance = _set_capture_instance.capture_instance
     WHERE t.table_id = _set_capture_instance.table_id AND t.untracked_at IS NULL
       AND t.capture_instance IS DISTINCT FROM _set_capture_instance.capture_instance;
END;

-- A cycle that read the source: what it saw. condition is ok, or
-- capture_stalled (with a message) when the commit time of max LSN lags
-- SQL Server's clock by more than the source's threshold; entering and
-- leaving that condition sends an alert.
CREATE FUNCTION @extschema@._source_ok(
    server_name  text,
    worker_pid   integer,
    max_lsn      text,
    max_lsn_time timestamptz,
    server_time  timestamptz,
    condition    text DEFAULT 'ok',
    message      text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    previous text;
BEGIN
    SELECT s.condition INTO previous FROM @extschema@.source_status s
     WHERE s.server_name = _source_ok.server_name FOR UPDATE;
    INSERT INTO @extschema@.source_status AS s
        (server_name, worker_pid, condition, condition_since, last_poll, last_success, failures, cycles,
         next_attempt, max_lsn, max_lsn_time, max_lsn_changed, server_time, clock_skew, last_error, last_error_at)
    VALUES (_source_ok.server_name, _source_ok.worker_pid, condition, now(), now(), now(), 0, 1,
            NULL, _source_ok.max_lsn, _source_ok.max_lsn_time, now(), _source_ok.server_time,
            _source_ok.server_time - now(), message, CASE WHEN message IS NOT NULL THEN now() END)
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
           clock_skew = excluded.clock_skew;
    IF condition = 'capture_stalled' AND previous IS DISTINCT FROM 'capture_stalled' THEN
        PERFORM @extschema@._alert(jsonb_build_object('alert', 'capture_stalled', 'server', server_name,
            'max_lsn', max_lsn, 'max_lsn_time', max_lsn_time, 'server_time', server_time, 'detail', message));
    ELSIF condition = 'ok' AND previous = 'capture_stalled' THEN
        PERFORM @extschema@._alert(jsonb_build_object('alert', 'capture_resumed', 'server', server_name,
            'max_lsn', max_lsn, 'max_lsn_time', max_lsn_time));
    END IF;
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
CREATE FUNCTION @extschema@._source_failed(
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
     WHERE s.server_name = _source_failed.server_name FOR UPDATE;
    INSERT INTO @extschema@.source_status AS s
        (server_name, worker_pid, condition, condition_since, last_poll, last_error, last_error_at,
         failures, cycles, next_attempt)
    VALUES (_source_failed.server_name, _source_failed.worker_pid, _source_failed.condition, now(), now(),
            _source_failed.error, now(), 1, CASE WHEN _source_failed.condition = 'no_worker' THEN 0 ELSE 1 END,
            _source_failed.next_attempt)
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
         WHERE s.server_name = _source_failed.server_name;
    END IF;
    IF condition IN ('commit_time_ahead', 'clock_skew', 'timezone_mismatch')
       AND previous IS DISTINCT FROM condition THEN
        PERFORM @extschema@._alert(jsonb_build_object('alert', condition, 'server', server_name,
            'detail', error));
    END IF;
END
$$;

-- Why a source is held, or NULL: read by its worker before every cycle.
CREATE FUNCTION @extschema@._source_hold(server_name text)
RETURNS TABLE (held_by text, held_since timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT s.held_by, s.held_since
      FROM @extschema@.source_status s
     WHERE s.server_name = _source_hold.server_name AND s.held_by IS NOT NULL;
END;
-- What sensors and people read. The two verdict functions are C and read the
-- catalog directly (no SPI, no search_path): sensors poll them all day.
-- Neither is STRICT: a NULL argument is an error, never a NULL answer.

CREATE FUNCTION @extschema@.finalized_until(table_name text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_finalized_until'
LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.finalized_until(text) IS
    'Every period of the table ending at or before this instant is complete; NULL while nothing is final';

CREATE FUNCTION @extschema@.is_final(table_name text, period_start timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_is_final'
LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.is_final(text, timestamptz) IS
    'True iff the whole period containing period_start ends at or before finalized_until';

CREATE TYPE @extschema@.verdict AS (
    table_name       text,
    period_start     timestamptz,
    period_end       timestamptz,
    is_final         boolean,
    finalized_until  timestamptz,
    captured_until   timestamptz,
    lag              interval,
    state            text,
    reason           text
);
COMMENT ON TYPE @extschema@.verdict IS
    'A verdict with its explanation, as returned by finalize.explain_verdict';

-- Explains a verdict in one sentence, for people and sensor failure
-- callbacks. Without a period, it explains the first period not yet final.
CREATE FUNCTION @extschema@.explain_verdict(table_name text, period_start timestamptz DEFAULT NULL)
RETURNS @extschema@.verdict
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt  @extschema@.tracked_table;
    wm  @extschema@.watermark;
    src @extschema@.source_status;
    cnd @extschema@.table_condition;
    v   @extschema@.verdict;
    why text;
BEGIN
    PERFORM @extschema@._require(table_name, 'table_name');
    SELECT t.* INTO tt FROM @extschema@.tracked_table t
     WHERE t.table_name = explain_verdict.table_name AND t.untracked_at IS NULL;
    IF NOT FOUND THEN
        PERFORM @extschema@._not_tracked(table_name);
    END IF;
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    SELECT s.* INTO src FROM @extschema@.source_status s WHERE s.server_name = tt.server_name;
    SELECT c.* INTO cnd FROM @extschema@.table_condition c WHERE c.table_id = tt.table_id;

    -- Period bounds and finality come from the C period arithmetic, the
    -- one is_final uses: never from timestamptz + interval in this zone.
    v.table_name := tt.table_name;
    v.period_start := @extschema@.period_start(
        coalesce(period_start, wm.finalized_until, now()), tt.granularity);
    v.period_end := @extschema@.period_end(v.period_start, tt.granularity);
    v.is_final := @extschema@._period_final(v.period_start, tt.granularity, wm.finalized_until);
    v.finalized_until := wm.finalized_until;
    v.captured_until := wm.offset_commit_time;
    v.lag := now() - wm.finalized_until;
    v.state := tt.state;

    IF v.is_final THEN
        v.reason := format('Period [%s, %s) is final: SQL Server''s capture has passed %s (LSN %s), so every change committed before %s is recorded.',
                           v.period_start, v.period_end, wm.offset_commit_time, wm.offset_lsn, wm.finalized_until);
        RETURN v;
    END IF;

    IF wm.offset_lsn IS NULL THEN
        why := format('the worker has not recorded any range for this table since it was tracked at %s', tt.created_at);
    ELSE
        why := format('SQL Server''s capture has reached %s (LSN %s), %s before the period ends',
                      wm.offset_commit_time, wm.offset_lsn,
                      CASE WHEN isfinite(v.period_end) THEN (v.period_end - wm.offset_commit_time)::text
                           ELSE 'for ever' END);
        IF wm.offset_commit_time >= v.period_end THEN
            why := format('the watermark only moves in whole periods and stands at %s', wm.finalized_until);
        END IF;
    END IF;
    v.reason := format('Period [%s, %s) is not final yet: %s.', v.period_start, v.period_end, why);
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
    RETURN v;
END
$$;
COMMENT ON FUNCTION @extschema@.explain_verdict(text, timestamptz) IS
    'Why a period of a table is or is not final, with the watermark and its lag';

-- One row per tracked table: its verdict and what its source's worker saw.
CREATE VIEW @extschema@.status AS
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
       w.finalized_until,
       now() - w.finalized_until AS lag,
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
       CASE WHEN s.worker_pid IS NOT NULL
             AND EXISTS (SELECT FROM pg_catalog.pg_stat_get_activity(s.worker_pid))
            THEN s.worker_pid END AS worker_pid
  FROM @extschema@.tracked_table t
  JOIN @extschema@.watermark w USING (table_id)
  LEFT JOIN @extschema@.table_condition c ON c.table_id = t.table_id
  LEFT JOIN @extschema@.source_status s ON s.server_name = t.server_name
  LEFT JOIN LATERAL (SELECT f.detail, f.recorded_at FROM @extschema@.fact f
                      WHERE f.table_id = t.table_id AND f.event IS NOT NULL AND f.detail ? 'ddl'
                      ORDER BY f.fact_id DESC LIMIT 1) sc ON true
 WHERE t.untracked_at IS NULL;
COMMENT ON VIEW @extschema@.status IS
    'One row per tracked table: state, verdict, lag and what its source''s worker last saw';

-- Every fact, with the name of its table.
CREATE VIEW @extschema@.facts AS
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
-- rows may belong to either). Counts are exact where the period is covered
-- and no range straddles it.
CREATE FUNCTION @extschema@.changes_by_period(table_name text, from_time timestamptz, to_time timestamptz)
RETURNS TABLE (period_start timestamptz, period_end timestamptz, is_final boolean, covered boolean,
               inserts bigint, updates bigint, deletes bigint,
               straddling_ranges bigint, exact boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    tt @extschema@.tracked_table;
    until timestamptz;
    covered_after timestamptz;
BEGIN
    PERFORM @extschema@._require(changes_by_period.table_name, 'table_name');
    PERFORM @extschema@._require(from_time, 'from_time');
    PERFORM @extschema@._require(to_time, 'to_time');
    SELECT t.* INTO tt FROM @extschema@.tracked_table t
     WHERE t.table_name = changes_by_period.table_name AND t.untracked_at IS NULL;
    IF NOT FOUND THEN
        PERFORM @extschema@._not_tracked(changes_by_period.table_name);
    END IF;
    SELECT w.finalized_until INTO until FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
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
                      AND coalesce((e.detail ->> 'lost_to_time')::timestamptz, 'infinity') >= g.period_start) AS covered
          FROM @extschema@._periods(from_time, to_time, tt.granularity) AS g)
    SELECT p.ps, p.pe,
           @extschema@._period_final(p.ps, tt.granularity, until),
           p.covered,
           coalesce(sum(f.inserts) FILTER (WHERE f.inside), 0)::bigint,
           coalesce(sum(f.updates) FILTER (WHERE f.inside), 0)::bigint,
           coalesce(sum(f.deletes) FILTER (WHERE f.inside), 0)::bigint,
           count(f.fact_id) FILTER (WHERE NOT f.inside),
           p.covered AND count(f.fact_id) FILTER (WHERE NOT f.inside) = 0
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
-- The release gate: object stores, the catalog view of partitions, release
-- attempts and the published marker of each partition.

-- Object stores are foreign servers of finalize_s3; keys live in user
-- mappings, and the gate uses the calling user's mapping.
CREATE FUNCTION @extschema@._s3_validator(options text[], catalog oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_s3_validator'
LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER finalize_s3
    VALIDATOR @extschema@._s3_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_s3 IS
    'S3-compatible object stores listed by finalize.release_gate';
GRANT USAGE ON FOREIGN DATA WRAPPER finalize_s3 TO finalize_admin;

-- A partition location registered explicitly (the catalog of engines that
-- list partitions).
CREATE TABLE @extschema@.partition_registration (
    table_id       bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    partition      text NOT NULL CHECK (partition <> ''),
    location       text NOT NULL,
    registered_at  timestamptz NOT NULL DEFAULT now(),
    registered_by  name NOT NULL,
    PRIMARY KEY (table_id, partition)
);
COMMENT ON TABLE @extschema@.partition_registration IS
    'Explicitly registered partition locations (prefixes inside the store)';

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

-- Every release attempt, with its full comparison report.
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
    requested_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX release_partition_idx ON @extschema@.release (table_id, partition, release_id);
-- Reports of large partitions hold millions of entries: lz4 compresses them
-- several times faster than pglz, where the server was built with it.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_settings
                WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE @extschema@.release ALTER COLUMN report SET COMPRESSION lz4;
    END IF;
END
$$;
COMMENT ON TABLE @extschema@.release IS
    'Release attempts: manifest, listing, catalog view, problems and outcome';

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

-- Checks a location or path inside a store: relative, no "." or ".." parts,
-- no empty parts; the error names the argument.
CREATE FUNCTION @extschema@._check_location(location text, argname text, trailing_slash boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @extschema@._require(location, argname);
    IF location = '' OR location LIKE '/%' OR location ~ '(^|/)\.\.?(/|$)' OR location ~ '//'
       OR (NOT trailing_slash AND location LIKE '%/') THEN
        RAISE EXCEPTION 'invalid value for argument %: "%"', argname, location
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A location is a relative path inside the store, without a leading /, without empty, "." or ".." parts.';
    END IF;
END
$$;

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

CREATE FUNCTION @extschema@._lock_table_catalog(table_id bigint, exclusive boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM FROM @extschema@.tracked_table t
     WHERE t.table_id = _lock_table_catalog.table_id AND t.untracked_at IS NULL FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tracked table with id % was untracked meanwhile', table_id
            USING ERRCODE = 'serialization_failure',
                  DETAIL = 'It was untracked (and perhaps tracked again under a new id) during the call; nothing was released or registered.',
                  HINT = 'Try again.';
    END IF;
    INSERT INTO @extschema@.catalog_lock VALUES (table_id, '') ON CONFLICT DO NOTHING;
    IF exclusive THEN
        PERFORM FROM @extschema@.catalog_lock c WHERE c.table_id = _lock_table_catalog.table_id AND c.partition = '' FOR UPDATE;
    ELSE
        PERFORM FROM @extschema@.catalog_lock c WHERE c.table_id = _lock_table_catalog.table_id AND c.partition = '' FOR SHARE;
    END IF;
END
$$;

CREATE FUNCTION @extschema@._lock_partition(table_id bigint, partition text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM @extschema@._lock_table_catalog(table_id, false);
    INSERT INTO @extschema@.catalog_lock VALUES (table_id, partition) ON CONFLICT DO NOTHING;
    PERFORM FROM @extschema@.catalog_lock c
     WHERE c.table_id = _lock_partition.table_id AND c.partition = _lock_partition.partition FOR UPDATE;
END
$$;

-- The body of finalize.register_partition, run as the extension's owner by its C entry
-- point (owner.c) with the caller taken before the switch.
CREATE FUNCTION @extschema@._register_partition(
    caller name,
    table_name text, partition text, location text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    id bigint := @extschema@._tracked_id(table_name);
BEGIN
    PERFORM @extschema@._require(partition, 'partition');
    PERFORM @extschema@._check_location(location, 'location', true);
    PERFORM @extschema@._lock_partition(id, partition);
    INSERT INTO @extschema@.partition_registration AS r (table_id, partition, location, registered_by)
    VALUES (id, partition, location, caller)
    ON CONFLICT ON CONSTRAINT partition_registration_pkey DO UPDATE
       SET location = excluded.location, registered_at = now(), registered_by = excluded.registered_by;
END
$$;

CREATE FUNCTION @extschema@.register_partition(table_name text, partition text, location text)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.register_partition(text, text, text) IS
    'Register (or move) the location of a partition in the catalog view';

-- Renders a projection template for a period start (UTC, zero-padded).
CREATE FUNCTION @extschema@.render_location(location_template text, period_start timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN replace(replace(replace(replace(replace(location_template,
        '{year}', to_char(period_start AT TIME ZONE 'UTC', 'YYYY')),
        '{month}', to_char(period_start AT TIME ZONE 'UTC', 'MM')),
        '{day}', to_char(period_start AT TIME ZONE 'UTC', 'DD')),
        '{hour}', to_char(period_start AT TIME ZONE 'UTC', 'HH24')),
        '{minute}', to_char(period_start AT TIME ZONE 'UTC', 'MI'));
COMMENT ON FUNCTION @extschema@.render_location(text, timestamptz) IS
    'The location a projection template gives a period (placeholders {year} {month} {day} {hour} {minute}, UTC)';

-- The body of finalize.set_projection, run as the extension's owner by its C entry
-- point (owner.c) with the caller taken before the switch.
CREATE FUNCTION @extschema@._set_projection(
    caller name,
    table_name text, location_template text,
                                           range_start timestamptz, range_end timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    id bigint := @extschema@._tracked_id(table_name);
    rest text;
BEGIN
    PERFORM @extschema@._require(location_template, 'location_template');
    PERFORM @extschema@._require(range_start, 'range_start');
    PERFORM @extschema@._require(range_end, 'range_end');
    rest := regexp_replace(location_template, '\{(year|month|day|hour|minute)\}', '', 'g');
    IF rest ~ '[{}]' OR location_template !~ '\{(year|month|day|hour|minute)\}' THEN
        RAISE EXCEPTION 'invalid value for argument location_template: "%"', location_template
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A template uses the placeholders {year}, {month}, {day}, {hour} and {minute}, and no other braces.',
                  HINT = 'For example ''year={year}/month={month}/day={day}/hour={hour}/''.';
    END IF;
    PERFORM @extschema@._check_location(@extschema@.render_location(location_template, range_start),
                                        'location_template', true);
    IF range_end <= range_start THEN
        RAISE EXCEPTION 'invalid projection range from % to %', range_start, range_end
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'range_end must be after range_start.';
    END IF;
    PERFORM @extschema@._lock_table_catalog(id, true);
    INSERT INTO @extschema@.projection AS p (table_id, location_template, range_start, range_end, set_by)
    VALUES (id, location_template, range_start, range_end, caller)
    ON CONFLICT ON CONSTRAINT projection_pkey DO UPDATE
       SET location_template = excluded.location_template, range_start = excluded.range_start,
           range_end = excluded.range_end, set_at = now(), set_by = excluded.set_by;
END
$$;

CREATE FUNCTION @extschema@.set_projection(table_name text, location_template text,
                                           range_start timestamptz, range_end timestamptz)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.set_projection(text, text, timestamptz, timestamptz) IS
    'Declare partition projection for a table: a location template and the range of visible periods';

-- The catalog view of one partition, as the gate sees it: where the catalog
-- points (registration first, else projection), or why it cannot.
CREATE FUNCTION @extschema@._catalog_view(table_id bigint, partition text, period_start timestamptz)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    reg @extschema@.partition_registration;
    proj @extschema@.projection;
BEGIN
    SELECT r.* INTO reg FROM @extschema@.partition_registration r
     WHERE r.table_id = _catalog_view.table_id AND r.partition = _catalog_view.partition;
    IF FOUND THEN
        RETURN jsonb_build_object('source', 'registration', 'location', reg.location,
                                  'registered_at', reg.registered_at, 'registered_by', reg.registered_by);
    END IF;
    SELECT p.* INTO proj FROM @extschema@.projection p WHERE p.table_id = _catalog_view.table_id;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('source', 'none');
    END IF;
    IF period_start IS NULL THEN
        RETURN jsonb_build_object('source', 'projection', 'template', proj.location_template,
                                  'range_start', proj.range_start, 'range_end', proj.range_end,
                                  'location', NULL);
    END IF;
    RETURN jsonb_build_object('source', 'projection', 'template', proj.location_template,
                              'range_start', proj.range_start, 'range_end', proj.range_end,
                              'in_range', period_start >= proj.range_start AND period_start < proj.range_end,
                              'location', @extschema@.render_location(proj.location_template, period_start));
END
$$;

-- The catalog view of a partition as typed columns, for the gate's C code
-- (which then needs no operators of its own).
CREATE FUNCTION @extschema@._gate_catalog(table_id bigint, partition text, period_start timestamptz)
RETURNS TABLE (catalog jsonb, source text, location text, in_range boolean, range_start text,
               range_end text, registered_at text, registered_by text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT c, c ->> 'source', c ->> 'location', (c ->> 'in_range')::boolean, c ->> 'range_start',
           c ->> 'range_end', c ->> 'registered_at', c ->> 'registered_by'
      FROM @extschema@._catalog_view(table_id, partition, period_start) AS c;
END;

-- What the CDC facts say about the period containing period_start: final,
-- covered, exact, how many changes (finality from the C period arithmetic,
-- through changes_by_period).
CREATE FUNCTION @extschema@._period_facts(table_name text, period_start timestamptz)
RETURNS TABLE (facts jsonb, is_final boolean, covered boolean, exact boolean, changes bigint,
               straddling_ranges bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT jsonb_build_object('period_start', c.period_start, 'period_end', c.period_end,
                              'is_final', c.is_final, 'covered', c.covered, 'exact', c.exact,
                              'inserts', c.inserts, 'updates', c.updates, 'deletes', c.deletes,
                              'straddling_ranges', c.straddling_ranges),
           c.is_final, c.covered, c.exact, c.inserts + c.updates + c.deletes, c.straddling_ranges
      FROM @extschema@.changes_by_period(table_name, period_start, period_start + interval '1 microsecond') AS c
     LIMIT 1;
END;

CREATE FUNCTION @extschema@.release_gate(manifest jsonb,
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
CREATE FUNCTION @extschema@.compare_inventories(manifest_files jsonb, listing jsonb, prefix text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'finalize_compare_inventories'
LANGUAGE C IMMUTABLE;
COMMENT ON FUNCTION @extschema@.compare_inventories(jsonb, jsonb, text) IS
    'The problems the gate finds between a manifest''s files and a listing under a prefix';

CREATE FUNCTION @extschema@.released_generation(table_name text, partition text)
RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN (SELECT p.generation FROM @extschema@.published p
         WHERE p.table_id = @extschema@._tracked_id(table_name) AND p.partition = released_generation.partition);
COMMENT ON FUNCTION @extschema@.released_generation(text, text) IS
    'The published generation of a partition (NULL if none was released)';

-- Every release attempt: who, when, what, outcome.
CREATE VIEW @extschema@.releases AS
SELECT r.release_id, t.table_name, r.partition, r.generation, r.released,
       jsonb_array_length(r.problems) AS problem_count, r.problems,
       r.store, r.prefix, r.requested_by, r.requested_at,
       p.release_id IS NOT NULL AS current
  FROM @extschema@.release r
  JOIN @extschema@.tracked_table t USING (table_id)
  LEFT JOIN @extschema@.published p ON p.release_id = r.release_id;
COMMENT ON VIEW @extschema@.releases IS
    'Release attempts with who, when and the outcome; current marks the published one';

CREATE FUNCTION @extschema@._generation_retention()
RETURNS interval
AS 'MODULE_PATHNAME', 'finalize_generation_retention'
LANGUAGE C STABLE;

-- Where readers may be sent: the published prefixes and the registered
-- locations (with one trailing slash), indexed bytewise so that
-- retired_generations finds overlaps by probes, not by comparing every pair.
CREATE INDEX published_prefix_idx ON @extschema@.published ((prefix COLLATE "C"));
CREATE INDEX partition_registration_location_idx
    ON @extschema@.partition_registration (((rtrim(location, '/') || '/') COLLATE "C"));

-- The prefixes a prefix lies inside: "a/", "a/b/" and "a/b/c/" for "a/b/c/".
CREATE FUNCTION @extschema@._ancestor_prefixes(prefix text)
RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN ARRAY(SELECT left(prefix, p) FROM generate_series(1, length(prefix)) AS p WHERE substr(prefix, p, 1) = '/');

-- Whether a generation's prefix (ending in "/") contains or lies inside a
-- location readers may be sent to: a published prefix or a registered
-- location of any partition, or what its table's projection gives its
-- period. Descendants are a range: in bytewise order every key starting
-- with "a/b/" lies in ["a/b/", "a/b0"), "0" following "/".
CREATE FUNCTION @extschema@._overlaps_live(prefix text, table_id bigint, period_start timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN right(_overlaps_live.prefix, 1) <> '/'
    OR EXISTS (SELECT FROM @extschema@.published q
                WHERE (q.prefix COLLATE "C") >= (_overlaps_live.prefix COLLATE "C")
                  AND (q.prefix COLLATE "C") < ((left(_overlaps_live.prefix, -1) || '0') COLLATE "C"))
    OR EXISTS (SELECT FROM @extschema@.published q
                WHERE (q.prefix COLLATE "C") = ANY (@extschema@._ancestor_prefixes(_overlaps_live.prefix)))
    OR EXISTS (SELECT FROM @extschema@.partition_registration g
                WHERE ((rtrim(g.location, '/') || '/') COLLATE "C") >= (_overlaps_live.prefix COLLATE "C")
                  AND ((rtrim(g.location, '/') || '/') COLLATE "C") < ((left(_overlaps_live.prefix, -1) || '0') COLLATE "C"))
    OR EXISTS (SELECT FROM @extschema@.partition_registration g
                WHERE ((rtrim(g.location, '/') || '/') COLLATE "C") = ANY (@extschema@._ancestor_prefixes(_overlaps_live.prefix)))
    OR EXISTS (SELECT FROM @extschema@.projection j
                WHERE j.table_id = _overlaps_live.table_id
                  AND _overlaps_live.period_start >= j.range_start AND _overlaps_live.period_start < j.range_end
                  AND (starts_with(@extschema@.render_location(j.location_template, _overlaps_live.period_start),
                                   _overlaps_live.prefix)
                       OR starts_with(_overlaps_live.prefix,
                                      @extschema@.render_location(j.location_template, _overlaps_live.period_start))));

-- Generations that were published, then superseded longer ago than the
-- retention: their objects may be deleted. The current one never appears.
CREATE FUNCTION @extschema@.retired_generations(of_table text DEFAULT NULL, retention interval DEFAULT NULL)
RETURNS TABLE (table_name text, partition text, generation text, store text, prefix text,
               superseded_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH pubs AS (
        SELECT r.table_id, r.partition, r.generation, r.store, r.prefix, r.release_id, r.requested_at,
               r.period_start, lead(r.requested_at) OVER w AS superseded_at
          FROM @extschema@.release r
         WHERE r.released
        WINDOW w AS (PARTITION BY r.table_id, r.partition ORDER BY r.release_id))
    SELECT t.table_name, x.partition, x.generation, x.store, x.prefix, max(x.superseded_at)
      FROM pubs x
      JOIN @extschema@.tracked_table t ON t.table_id = x.table_id
      JOIN @extschema@.published p ON p.table_id = x.table_id AND p.partition = x.partition
     WHERE x.superseded_at IS NOT NULL
       AND x.generation <> p.generation
       -- Never a prefix readers may still be sent to (of any partition, in
       -- any store: deleting it would delete live data).
       AND NOT @extschema@._overlaps_live(x.prefix, x.table_id, x.period_start)
       AND (retired_generations.of_table IS NULL OR t.table_name = retired_generations.of_table)
     GROUP BY t.table_name, x.partition, x.generation, x.store, x.prefix
    HAVING max(x.superseded_at) < now() - coalesce(retired_generations.retention, @extschema@._generation_retention())
     ORDER BY 1, 2, 6;
END;
COMMENT ON FUNCTION @extschema@.retired_generations(text, interval) IS
    'Superseded generations whose retention window has passed (safe to delete); never the published one';

-- Privileges. PUBLIC gets nothing; each role gets exactly what it is for.
-- Functions that write run as the extension owner with a pinned search_path;
-- the C verdict functions read the catalog directly, so EXECUTE on them is
-- the whole permission.

REVOKE ALL ON ALL TABLES IN SCHEMA @extschema@ FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA @extschema@ FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA @extschema@ FROM PUBLIC;

-- Sensors: the verdict, its explanation, the status view.
GRANT EXECUTE ON FUNCTION
    @extschema@.finalized_until(text),
    @extschema@.is_final(text, timestamptz),
    @extschema@.explain_verdict(text, timestamptz),
    @extschema@.period_start(timestamptz, interval),
    @extschema@.period_end(timestamptz, interval),
    @extschema@.mssql_local_to_instant(timestamp, text)
    TO finalize_reader;
GRANT SELECT ON @extschema@.status TO finalize_reader;

-- Publishers also read the facts behind a partition.
GRANT SELECT ON @extschema@.facts TO finalize_publisher;
GRANT EXECUTE ON FUNCTION
    @extschema@.changes_by_period(text, timestamptz, timestamptz)
    TO finalize_publisher;

-- Admins manage tracked tables, may record ranges by hand (the worker's write
-- path) and read the catalog tables.
GRANT EXECUTE ON FUNCTION
    @extschema@.track_table(text, text, text, interval, text, text, text),
    @extschema@.untrack_table(text, boolean),
    @extschema@.alter_tracked_table(text, interval, text, text),
    @extschema@.resume_table(text),
    @extschema@.release_source(text),
    @extschema@.record_range(text, text, text, timestamptz, bigint, bigint, bigint,
                             timestamptz, timestamptz, text, text, jsonb),
    @extschema@.purge_facts(interval),
    @extschema@.quote_mssql_ident(text)
    TO finalize_admin;
GRANT SELECT ON @extschema@.tracked_table, @extschema@.watermark,
                @extschema@.fact, @extschema@.source_status, @extschema@.table_condition
    TO finalize_admin;

-- The release gate: publishers release and read releases; readers see the
-- published generation; admins manage the catalog view.
GRANT EXECUTE ON FUNCTION
    @extschema@.released_generation(text, text),
    @extschema@.render_location(text, timestamptz)
    TO finalize_reader;
GRANT EXECUTE ON FUNCTION
    @extschema@.release_gate(jsonb),
    @extschema@.compare_inventories(jsonb, jsonb, text),
    @extschema@.register_partition(text, text, text),
    @extschema@.retired_generations(text, interval)
    TO finalize_publisher;
GRANT SELECT ON @extschema@.releases TO finalize_publisher;
GRANT EXECUTE ON FUNCTION
    @extschema@.set_projection(text, text, timestamptz, timestamptz)
    TO finalize_admin;
GRANT SELECT ON @extschema@.partition_registration, @extschema@.projection,
                @extschema@.release, @extschema@.published
    TO finalize_admin;
