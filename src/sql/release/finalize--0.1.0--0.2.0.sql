-- finalize 0.1.0 to 0.2.0, run by ALTER EXTENSION finalize UPDATE. Every
-- change here is also made in the parts under src/sql/, which build a fresh
-- 0.2.0 install: test/integration/test_upgrade.py checks that both give the
-- same catalog, and that facts, verdicts and releases are kept. The
-- constraints added check the rows there are; the only rows written are
-- the ones section 6 derives from what 0.1.0 recorded (each table's source
-- verdict, and its losses).

\echo Use "ALTER EXTENSION finalize UPDATE TO '0.2.0'" to load this file. \quit

-- 0. Before anything changes: the library this server loaded must be 0.2.0's
-- (it is preloaded, so `make install` takes effect at the next restart).
-- Failing here changes nothing.
DO $probe$
BEGIN
    CREATE FUNCTION @extschema@._upgrade_probe(interval) RETURNS boolean
        AS 'MODULE_PATHNAME', 'finalize_granularity_valid' LANGUAGE C;
    DROP FUNCTION @extschema@._upgrade_probe(interval);
EXCEPTION WHEN undefined_function THEN
    RAISE EXCEPTION 'the finalize library loaded in this server is older than version 0.2.0'
        USING DETAIL = SQLERRM,
              HINT = 'Restart PostgreSQL after installing the new version (the library is preloaded), '
                     'then run ALTER EXTENSION finalize UPDATE again.';
END
$probe$;

-- 1. One rule for a granularity, the C one of the period arithmetic: the
-- CHECK of tracked_table.granularity calls it instead of repeating it in SQL
-- (which accepted lengths the C code refuses as out of range).

-- The same rule as a boolean, for the CHECK constraint of
-- finalize.tracked_table.granularity: the table and the functions that take
-- a granularity cannot disagree.
CREATE FUNCTION @extschema@._granularity_valid(granularity interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_granularity_valid'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
-- A row the C rule refuses (only a direct UPDATE could have stored one)
-- is named before the constraint would refuse it without saying which.
DO $rows$
DECLARE
    bad text;
BEGIN
    SELECT pg_catalog.string_agg(pg_catalog.format('%s (%s)', t.table_name, t.granularity), ', ')
      INTO bad
      FROM @extschema@.tracked_table t
     WHERE NOT @extschema@._granularity_valid(t.granularity);
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'tracked tables have a granularity finalize 0.2.0 refuses: %', bad
            USING ERRCODE = 'check_violation',
                  HINT = 'Set a valid granularity with finalize.alter_tracked_table(name, granularity => ...), '
                         'then run ALTER EXTENSION finalize UPDATE again.';
    END IF;
END
$rows$;
ALTER TABLE @extschema@.tracked_table
    DROP CONSTRAINT tracked_table_granularity_check,
    ADD CONSTRAINT tracked_table_granularity_check CHECK (@extschema@._granularity_valid(granularity));

-- 2. The condition codes the worker writes (src/common/condition.c), checked
-- by the tables that hold them.
ALTER TABLE @extschema@.table_condition
    ADD CONSTRAINT table_condition_condition_check
        CHECK (condition IN ('no_access', 'read_failed', 'no_capture_instance', 'source_replaced',
                             'lsn_regressed', 'record_failed', 'lock_timeout', 'event_column_invalid'));
ALTER TABLE @extschema@.source_status
    ADD CONSTRAINT source_status_condition_check
        CHECK (condition IN ('starting', 'ok', 'capture_stalled', 'no_worker', 'server_dropped',
                             'configuration', 'commit_time_ahead', 'unreachable', 'timeout',
                             'cancelled', 'sql_error', 'no_max_lsn', 'timezone_mismatch',
                             'clock_skew', 'internal_error', 'tls_failed')),
    ADD CONSTRAINT source_status_held_by_check
        CHECK (held_by IN ('commit_time_ahead'));

-- 3a. Names of new tables are checked by one function (no control
-- characters now), and the not-tracked error echoes at most 255 characters.

-- Checks the name of a new tracked or derived table: the name consumers
-- use, 1 to 255 characters, not only spaces, no control characters (a
-- newline in a name would forge lines in logs and explanations).
CREATE FUNCTION @extschema@._check_table_name(table_name text, example text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @extschema@._require(table_name, 'table_name');
    IF table_name !~ '\S' OR length(table_name) > 255 OR table_name ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'invalid value for argument table_name: "%"',
                        pg_catalog.regexp_replace(pg_catalog.left(table_name, 255), '[[:cntrl:]]', '?', 'g')
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('A tracked table name is the name consumers use (for example %s): 1 to 255 characters, not only spaces, no control characters.', example);
    END IF;
END
$$;

-- The one error for a table name that is not tracked.
CREATE OR REPLACE FUNCTION @extschema@._not_tracked(table_name text)
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

-- The body of finalize.track_table, run as the extension's owner by its C entry
-- point (owner.c) with the caller taken before the switch.
CREATE OR REPLACE FUNCTION @extschema@._track_table(
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
    PERFORM @extschema@._check_table_name(_track_table.table_name, 'sales.orders');
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

-- 3. One lookup of a tracked table by name (_tracked), used by _tracked_id,
-- resume_table, explain_verdict and changes_by_period instead of a copy each.

-- The tracked table of a name (its row as it is now, no lock), or the
-- not-tracked error: the one lookup of a name among the tracked tables.
CREATE FUNCTION @extschema@._tracked(table_name text)
RETURNS @extschema@.tracked_table
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tt @extschema@.tracked_table;
BEGIN
    PERFORM @extschema@._require(table_name, 'table_name');
    SELECT t.* INTO tt FROM @extschema@.tracked_table t
     WHERE t.table_name = _tracked.table_name AND t.untracked_at IS NULL;
    IF NOT FOUND THEN
        PERFORM @extschema@._not_tracked(table_name);
    END IF;
    RETURN tt;
END
$$;

-- The id of a tracked table, or the not-tracked error.
CREATE OR REPLACE FUNCTION @extschema@._tracked_id(table_name text)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (@extschema@._tracked(table_name)).table_id;

-- Lets a stopped table go on. After a schema change that blocked it, the DDL
-- counts as reviewed and the verdict continues from where it stopped. After
-- a data loss, the table is marked resuming; the worker then records the lost
-- LSN range as a "resumed" event (with who asked) and restarts the table at
-- its capture instance's current min LSN, so the verdict resumes only from
-- there. The lost range stays visible in finalize.facts.
-- The body of finalize.resume_table, run as the extension's owner by its C entry
-- point (owner.c) with the caller taken before the switch.
CREATE OR REPLACE FUNCTION @extschema@._resume_table(
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
    tt := @extschema@._tracked(_resume_table.table_name);
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
        PERFORM @extschema@._resolve_alerts('schema_blocked', tt.table_id, tt.server_name);
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

-- Explains a verdict in one sentence, for people and sensor failure
-- callbacks. Without a period, it explains the first period not yet final.
CREATE OR REPLACE FUNCTION @extschema@.explain_verdict(table_name text, period_start timestamptz DEFAULT NULL)
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
    losses text;
    cap timestamptz;
    verdict_until timestamptz;
BEGIN
    tt := @extschema@._tracked(table_name);
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    SELECT s.* INTO src FROM @extschema@.source_status s WHERE s.server_name = tt.server_name;
    SELECT c.* INTO cnd FROM @extschema@.table_condition c WHERE c.table_id = tt.table_id;
    -- What finalized_until() answers: the watermark, stopped at the first
    -- period a loss may still hold (_loss_cap, NULL for '-infinity').
    verdict_until := wm.finalized_until;
    IF wm.loss_blocked THEN
        cap := @extschema@._loss_cap(tt.table_id);
        verdict_until := CASE WHEN cap > '-infinity' AND wm.finalized_until IS NOT NULL
                              THEN LEAST(wm.finalized_until, cap) END;
    END IF;

    -- Period bounds and finality come from the C period arithmetic, the
    -- one is_final uses: never from timestamptz + interval in this zone.
    v.table_name := tt.table_name;
    v.period_start := @extschema@.period_start(
        coalesce(period_start, verdict_until, now()), tt.granularity);
    v.period_end := @extschema@.period_end(v.period_start, tt.granularity);
    v.is_final := @extschema@._period_final(v.period_start, tt.granularity, wm.finalized_until);
    v.finalized_until := verdict_until;
    v.captured_until := wm.offset_commit_time;
    v.lag := now() - verdict_until;
    v.state := tt.state;
    IF wm.loss_blocked THEN
        losses := @extschema@._explain_losses(tt, v.period_start, v.period_end);
    END IF;

    IF v.is_final AND losses IS NOT NULL THEN
        v.is_final := false;
        v.reason := format('Period [%s, %s) is not final: %s', v.period_start, v.period_end, losses);
        RETURN v;
    ELSIF v.is_final THEN
        v.reason := @extschema@._explain_final(tt, wm, v.period_start, v.period_end);
        IF tt.event_time_column IS NOT NULL THEN
            v.reason := v.reason || ' ' || @extschema@._explain_event_time(tt, wm, v.period_end);
        END IF;
        RETURN v;
    END IF;

    why := concat_ws('; ', @extschema@._explain_source(tt, wm, v.period_start, v.period_end),
                     @extschema@._explain_consumers(tt, v.period_end));
    v.reason := format('Period [%s, %s) is not final yet: %s.', v.period_start, v.period_end,
                       coalesce(nullif(why, ''), format('the verdict stands at %s', wm.finalized_until)));
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
        v.reason := v.reason || ' ' || @extschema@._explain_event_time(tt, wm, v.period_end);
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION @extschema@.explain_verdict(text, timestamptz) IS
    'Why a period of a table is or is not final, with the watermark and its lag';

-- Changes per period between two instants. A period is covered when every
-- commit in it lies after the start of the recorded facts (tracking began, or
-- retention removed older facts, before it) and outside every range lost to
-- retention cleanup. A range whose rows all committed
-- inside one period counts there; a range whose rows straddle a period
-- boundary is counted in straddling_ranges of every period it touches (its
-- rows may belong to either). Counts are exact where the period is covered
-- and no range straddles it. is_final is what is_final() answers, losses
-- included. A derived table has no facts of its own: its periods are never
-- covered nor exact, and their counts are NULL (unknown), so the release
-- gate checks that they are final and cannot confirm an empty one.
CREATE OR REPLACE FUNCTION @extschema@.changes_by_period(table_name text, from_time timestamptz, to_time timestamptz)
RETURNS TABLE (period_start timestamptz, period_end timestamptz, is_final boolean, covered boolean,
               inserts bigint, updates bigint, deletes bigint,
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
    PERFORM @extschema@._require(changes_by_period.table_name, 'table_name');
    PERFORM @extschema@._require(from_time, 'from_time');
    PERFORM @extschema@._require(to_time, 'to_time');
    tt := @extschema@._tracked(changes_by_period.table_name);
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    IF tt.kind = 'derived' THEN
        RETURN QUERY
        SELECT g.period_start, g.period_end, @extschema@._final(tt, wm, g.period_start), false,
               NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, false
          FROM @extschema@._periods(from_time, to_time, tt.granularity) AS g;
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
          FROM @extschema@._periods(from_time, to_time, tt.granularity) AS g)
    SELECT p.ps, p.pe,
           @extschema@._final(tt, wm, p.ps),
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

-- 4. The write path in steps: _record_range checks the arguments
-- (_check_range_args, which locks the table's verdict as before), the chain
-- (_check_range_chain), stores the fact (_store_range_fact) and advances the
-- verdict. Same errors, same locks, same results.

-- The arguments of a range for table_id, checked; returns the table with
-- its verdict locked for the write (_lock_tracked), which serializes the
-- writers of the table and proves it still tracked. NULL arguments are
-- refused first, then, with the lock held, what needs the table (its name
-- in the errors, its state): row counts, commit times, the event and the
-- order of the LSNs.
CREATE FUNCTION @extschema@._check_range_args(
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
    PERFORM @extschema@._require(_check_range_args.table_id, 'table_id');
    PERFORM @extschema@._require(e, 'end_lsn');
    PERFORM @extschema@._require(end_commit_time, 'end_commit_time');
    PERFORM @extschema@._require(inserts, 'inserts');
    PERFORM @extschema@._require(updates, 'updates');
    PERFORM @extschema@._require(deletes, 'deletes');
    tt := @extschema@._lock_tracked(_check_range_args.table_id);
    IF tt.kind = 'derived' THEN
        RAISE EXCEPTION 'table "%" is a derived table, so no range can be recorded', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A derived table has no SQL Server source: its verdict follows its inputs and the jobs that report with finalize.report_processed().';
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
    RETURN tt;
END
$$;

-- Whether a range (s, e] chains onto the recorded facts of a table, whose
-- ranges reach offset_lsn: false when it is the next one to record, true
-- when it was recorded before with the same facts (recording it again
-- changes nothing); anything else (a contradiction, an overlap, a gap, a
-- first range with a start or with rows) is an error that names the range
-- to record instead.
CREATE FUNCTION @extschema@._check_range_chain(
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

-- Stores the fact of a checked range that chains onto the facts of its
-- table and returns its id. Consecutive empty ranges coalesce into one
-- fact, so an idle table keeps a bounded number of rows; any other range is
-- a fact of its own (the first one, without start, marks where tracking
-- started).
CREATE FUNCTION @extschema@._store_range_fact(
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
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    prev bigint;
    stored bigint;
BEGIN
    IF inserts + updates + deletes = 0 AND event IS NULL AND s IS NOT NULL THEN
        SELECT f.fact_id INTO prev FROM @extschema@.fact f
         WHERE f.table_id = _store_range_fact.table_id AND f.kind = 'range' AND f.end_lsn = s
           AND f.event IS NULL AND f.inserts + f.updates + f.deletes = 0
           AND f.capture_instance IS NOT DISTINCT FROM _store_range_fact.capture_instance;
    END IF;
    IF prev IS NOT NULL THEN
        UPDATE @extschema@.fact f
           SET end_lsn = e, end_commit_time = _store_range_fact.end_commit_time,
               ranges = f.ranges + 1, recorded_at = now()
         WHERE f.fact_id = prev;
        RETURN prev;
    ELSE
        INSERT INTO @extschema@.fact
            (table_id, kind, start_lsn, end_lsn, end_commit_time, inserts, updates, deletes,
             first_commit_time, last_commit_time, capture_instance, event, detail)
        VALUES
            (_store_range_fact.table_id, 'range', s, e, end_commit_time, inserts, updates, deletes,
             first_commit_time, last_commit_time, capture_instance,
             CASE WHEN s IS NULL THEN 'tracking_started' ELSE event END, detail)
        RETURNING fact_id INTO stored;
    END IF;
    RETURN stored;
END
$$;

-- The write path itself, by table id (the worker's way; record_range is the
-- same by name): the arguments are checked (and the table's verdict locked),
-- the range must chain onto the recorded ones, its fact is stored, the
-- source verdict moves and _advance moves the verdict (and the derived
-- tables that use it) as far as the consumers allow, all in the caller's
-- transaction.
CREATE OR REPLACE FUNCTION @extschema@._record_range(
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
BEGIN
    tt := @extschema@._check_range_args(_record_range.table_id, s, e, end_commit_time, inserts, updates, deletes,
                                        first_commit_time, last_commit_time, event);
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    IF @extschema@._check_range_chain(tt, wm.offset_lsn, s, e, inserts, updates, deletes,
                                      first_commit_time, last_commit_time, event) THEN
        RETURN wm.finalized_until;
    END IF;
    PERFORM @extschema@._store_range_fact(tt.table_id, s, e, end_commit_time, inserts, updates, deletes,
                                          first_commit_time, last_commit_time, capture_instance, event, detail);

    UPDATE @extschema@.watermark w
       SET source_until = GREATEST(w.source_until, @extschema@.period_start(end_commit_time, tt.granularity)),
           offset_lsn = e,
           offset_commit_time = end_commit_time,
           recorded_at = now()
     WHERE w.table_id = tt.table_id;
    RETURN @extschema@._advance(tt.table_id);
END
$$;

-- 5. The new functions are internal: not PUBLIC's, as in a fresh install
-- (whose script revokes every function from PUBLIC at its end), and granted
-- to no role.
REVOKE ALL ON FUNCTION
    @extschema@._granularity_valid(interval),
    @extschema@._tracked(text),
    @extschema@._check_range_args(bigint, @extschema@.lsn, @extschema@.lsn, timestamptz, bigint, bigint, bigint,
                                  timestamptz, timestamptz, text),
    @extschema@._check_range_chain(@extschema@.tracked_table, @extschema@.lsn, @extschema@.lsn, @extschema@.lsn,
                                   bigint, bigint, bigint, timestamptz, timestamptz, text),
    @extschema@._store_range_fact(bigint, @extschema@.lsn, @extschema@.lsn, timestamptz, bigint, bigint, bigint,
                                  timestamptz, timestamptz, text, text, jsonb)
    FROM PUBLIC;

-- 6. Pipelines and derived tables (issue 12, docs/design/pipelines.md): the
-- verdict is the least of the source verdict and the verdicts of a table's
-- required consumers, derived tables follow their inputs, and lost data is
-- not final until acknowledged. One function moves a verdict (_advance).

-- The role of pipelines that report their progress.
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'finalize_pipeline') THEN
        CREATE ROLE finalize_pipeline NOLOGIN;
    END IF;
END
$roles$;
GRANT finalize_reader TO finalize_pipeline;
GRANT finalize_pipeline TO finalize_admin;
GRANT USAGE ON SCHEMA @extschema@ TO finalize_pipeline;

-- Tracked tables of kind derived have no source; the source verdict is a
-- column of its own; losses are acknowledged with an event fact.
ALTER TABLE @extschema@.tracked_table
    ALTER COLUMN server_name DROP NOT NULL,
    ALTER COLUMN source_schema DROP NOT NULL,
    ALTER COLUMN source_name DROP NOT NULL,
    ADD COLUMN kind text NOT NULL DEFAULT 'source'
        CONSTRAINT tracked_table_kind_check CHECK (kind IN ('source', 'derived')),
    ADD CONSTRAINT tracked_table_source_check
        CHECK ((kind = 'source') = (server_name IS NOT NULL AND source_schema IS NOT NULL AND source_name IS NOT NULL));
COMMENT ON COLUMN @extschema@.tracked_table.kind IS
    'source: fed by a SQL Server table through the worker; derived: computed from other tracked tables (finalize.track_derived)';
ALTER TABLE @extschema@.watermark
    ADD COLUMN source_until timestamptz,
    ADD COLUMN loss_blocked boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN @extschema@.watermark.source_until IS
    'The source verdict: for a tracked table what SQL Server has captured (period start of the last range''s commit time), for a derived one the period start of its inputs'' least finalized_until; finalized_until is at most this and every required consumer''s verdict';
COMMENT ON COLUMN @extschema@.watermark.loss_blocked IS
    'True while the table or one of its inputs (transitively) has a loss not covered by acknowledgements: then finalize._loss_blocks() decides whether a period is final';
ALTER TABLE @extschema@.fact
    DROP CONSTRAINT fact_event_check,
    ADD CONSTRAINT fact_event_check
        CHECK (event IN ('tracking_started', 'schema_change', 'instance_switch',
                         'data_loss', 'schema_blocked', 'resume_requested', 'resumed',
                         'loss_acknowledged', 'late_data'));

-- Event-time partitions (docs/design/event_time.md): the settings of a
-- tracked table, the commit-time verdict beside the table's verdict, the
-- event-time facts of each range, late data.
ALTER TABLE @extschema@.tracked_table
    ADD COLUMN event_time_column text
        CONSTRAINT tracked_table_event_time_column_check
        CHECK (length(event_time_column) BETWEEN 1 AND 128),
    ADD COLUMN event_time_zone text,
    ADD COLUMN lateness_policy text NOT NULL DEFAULT 'exact'
        CONSTRAINT tracked_table_lateness_policy_check
        CHECK (lateness_policy IN ('exact', 'quantile')),
    ADD COLUMN allowed_lateness interval NOT NULL DEFAULT interval '0'
        CONSTRAINT tracked_table_allowed_lateness_check
        CHECK (allowed_lateness >= interval '0'),
    ADD COLUMN lateness_quantile double precision
        CONSTRAINT tracked_table_lateness_quantile_check
        CHECK (lateness_quantile > 0 AND lateness_quantile < 1),
    ADD COLUMN lateness_window interval NOT NULL DEFAULT interval '7 days'
        CONSTRAINT tracked_table_lateness_window_check
        CHECK (lateness_window > interval '0'),
    ADD CONSTRAINT tracked_table_event_time_check
        CHECK (event_time_column IS NULL OR kind = 'source'),
    ADD CONSTRAINT tracked_table_quantile_check
        CHECK ((lateness_policy = 'quantile') = (lateness_quantile IS NOT NULL)),
    ADD COLUMN max_lag interval
        CONSTRAINT tracked_table_max_lag_check CHECK (max_lag > interval '0');
COMMENT ON COLUMN @extschema@.tracked_table.max_lag IS
    'Freshness SLA: an incident opens when now() - finalized_until exceeds it (NULL: none)';
ALTER TABLE @extschema@.source_status ADD COLUMN cycle_time interval;
COMMENT ON COLUMN @extschema@.source_status.cycle_time IS
    'How long the last successful cycle took, from reading the tracked tables to committing their facts: keep it below finalize.poll_interval';
COMMENT ON COLUMN @extschema@.tracked_table.event_time_column IS
    'A captured date/time column of the source table that partitions the lake table (event time); NULL: partitioned by commit time';
COMMENT ON COLUMN @extschema@.tracked_table.event_time_zone IS
    'IANA zone the event column''s values are written in (NULL: the server''s timezone option; unused for datetimeoffset)';
COMMENT ON COLUMN @extschema@.tracked_table.lateness_policy IS
    'exact: an event period is final once the commit-time verdict passed its end plus allowed_lateness; quantile: plus the lateness_quantile of the lateness observed in lateness_window (at least allowed_lateness)';
ALTER TABLE @extschema@.watermark
    ADD COLUMN commit_until timestamptz,
    ADD COLUMN event_allowance interval;
-- Every verdict so far was given in commit time.
UPDATE @extschema@.watermark SET commit_until = finalized_until;
COMMENT ON COLUMN @extschema@.watermark.commit_until IS
    'The commit-time verdict (source verdict and required consumers, monotonic); equal to finalized_until unless the table is partitioned by event time, whose finalized_until is the event-time verdict drawn from it';
COMMENT ON COLUMN @extschema@.watermark.event_allowance IS
    'Event-time tables: the lateness allowance the verdict was last computed with (allowed_lateness, or the observed quantile)';
ALTER TABLE @extschema@.fact
    ADD COLUMN sketch bytea,
    ADD COLUMN first_event_time timestamptz,
    ADD COLUMN last_event_time timestamptz,
    ADD COLUMN late_rows bigint NOT NULL DEFAULT 0 CONSTRAINT fact_late_rows_check CHECK (late_rows >= 0);
COMMENT ON COLUMN @extschema@.fact.sketch IS
    'Event-time tables: the lateness sketch of the range (commit time minus event time, DDSketch at 1% relative accuracy; finalize.lateness_quantile reads it)';
COMMENT ON COLUMN @extschema@.fact.late_rows IS
    'Event-time tables: rows of the range whose event period was already final when it was recorded';

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

-- Event-time tables: event periods that received rows after they were
-- final. One row per table and period, counting every late row it got.
CREATE TABLE @extschema@.late_period (
    table_id            bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    event_period        timestamptz NOT NULL,
    rows                bigint NOT NULL CHECK (rows > 0),
    first_seen          timestamptz NOT NULL,
    last_seen           timestamptz NOT NULL,
    verdict_at_arrival  timestamptz NOT NULL,
    alerted_at          timestamptz,
    PRIMARY KEY (table_id, event_period)
);
COMMENT ON TABLE @extschema@.late_period IS
    'Event-time tables: periods that received rows after they were declared final (see the view finalize.late_data)';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.event_fact', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.lateness_hour', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.late_period', '');


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
                      CHECK (condition IN ('consumer_stalled')),
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
COMMENT ON COLUMN @extschema@.consumer.commit_time IS
    'Commit time of mapped_lsn, the greatest mapping row at or below min(reported LSN, max LSN) when the worker resolved resolved_for_lsn: every commit before it is applied';

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

SELECT pg_catalog.pg_extension_config_dump('@extschema@.derived_input', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.consumer', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.loss', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.loss_ack', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.loss_loss_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.loss_ack_ack_id_seq', '');

-- A verdict's cached answers also depend on consumers, inputs and losses.
CREATE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.consumer
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@._verdict_changed();
CREATE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.derived_input
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@._verdict_changed();
CREATE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.loss
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@._verdict_changed();
CREATE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.loss_ack
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@._verdict_changed();

-- A reported LSN in the stored form: 0x and 20 hex digits, or Debezium's
-- source.commit_lsn (0000002d:00000f2a:0002), which is the same 10 bytes;
-- anything else is an error (22023), never a guess (common/lsn_sql.c).
CREATE FUNCTION @extschema@._lsn_normalize(lsn text)
RETURNS @extschema@.lsn
AS 'MODULE_PATHNAME', 'finalize_lsn_normalize'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- The names of the tracked derived tables that use a table as an input.
CREATE FUNCTION @extschema@._dependents(table_id bigint)
RETURNS text[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT coalesce(array_agg(t.table_name ORDER BY t.table_name), '{}')
      FROM @extschema@.derived_input d
      JOIN @extschema@.tracked_table t ON t.table_id = d.table_id
     WHERE d.input_id = _dependents.table_id AND t.untracked_at IS NULL;
END;

-- untrack_table gains cascade (the two-argument calls still work).
DROP FUNCTION @extschema@.untrack_table(text, boolean);

-- Stops tracking a table. A derived table that uses it would stop for
-- ever, so that is refused unless cascade, which first untracks those
-- derived tables (and the ones using them) the same way, each once: in a
-- diamond, a derived table that uses two of them is gone with the first.
CREATE FUNCTION @extschema@.untrack_table(table_name text, keep_facts boolean DEFAULT true,
                                          cascade boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    id bigint;
    users text[];
    dependent text;
BEGIN
    PERFORM @extschema@._require(untrack_table.table_name, 'table_name');
    PERFORM @extschema@._require(keep_facts, 'keep_facts');
    PERFORM @extschema@._require(untrack_table.cascade, 'cascade');
    SELECT t.table_id INTO id
      FROM @extschema@.tracked_table t
     WHERE t.table_name = untrack_table.table_name AND t.untracked_at IS NULL
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM @extschema@._not_tracked(untrack_table.table_name);
    END IF;
    users := @extschema@._dependents(id);
    IF cardinality(users) > 0 AND NOT untrack_table.cascade THEN
        RAISE EXCEPTION 'table "%" is an input of derived %', untrack_table.table_name,
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
        RAISE NOTICE 'derived table "%" is untracked too: it used table "%"', dependent, untrack_table.table_name;
    END LOOP;
    -- Nothing is watched for an untracked table: its incidents end here.
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.table_id = id AND a.state <> 'resolved';
    IF keep_facts THEN
        UPDATE @extschema@.tracked_table SET untracked_at = now() WHERE table_id = id;
    ELSE
        DELETE FROM @extschema@.tracked_table WHERE table_id = id;
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@.untrack_table(text, boolean, boolean) IS
    'Stop tracking a table; its facts stay until retention removes them unless keep_facts is false; cascade untracks the derived tables that use it';

-- Changes how a tracked table is handled; NULL keeps a setting.
CREATE OR REPLACE FUNCTION @extschema@.alter_tracked_table(
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
    kind text;
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
    SELECT t.table_id, t.kind INTO id, kind FROM @extschema@.tracked_table t
     WHERE t.table_name = alter_tracked_table.table_name AND t.untracked_at IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM @extschema@._not_tracked(alter_tracked_table.table_name);
    END IF;
    IF kind = 'derived' AND (ddl_policy IS NOT NULL OR on_data_loss IS NOT NULL) THEN
        RAISE EXCEPTION 'table "%" is a derived table: only its granularity can be changed', alter_tracked_table.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'ddl_policy and on_data_loss say how the worker reads a SQL Server table; a derived table has none.';
    END IF;
    -- The verdict stays valid under any granularity: it is an instant before
    -- which every commit is captured; only later advances use the new one.
    UPDATE @extschema@.tracked_table t
       SET granularity = coalesce(alter_tracked_table.granularity, t.granularity),
           ddl_policy = coalesce(alter_tracked_table.ddl_policy, t.ddl_policy),
           on_data_loss = coalesce(alter_tracked_table.on_data_loss, t.on_data_loss)
     WHERE t.table_id = id;
    -- Which periods a loss holds depends on the granularity; a derived
    -- table's verdict may move at once under a finer one.
    IF granularity IS NOT NULL THEN
        PERFORM @extschema@._refresh_loss_blocked(id);
        IF kind = 'derived' THEN
            PERFORM @extschema@._advance(id);
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@.alter_tracked_table(text, interval, text, text) IS
    'Change the granularity, DDL policy or data-loss policy of a tracked table (only the granularity of a derived one)';

-- The verdict of one consumer: the period start of the commit time it has
-- applied up to (a tracked table's consumer, as the worker resolved its
-- LSN) or of the input watermark its job processed (a derived table's);
-- NULL while it has none.
CREATE FUNCTION @extschema@._consumer_until(kind text, granularity interval,
                                            commit_time timestamptz, processed_until timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.period_start(CASE WHEN kind = 'source' THEN commit_time ELSE processed_until END, granularity);

-- The verdict a table may have now: the least of its source verdict and
-- its required consumers' verdicts, or NULL (no advance) when any of them
-- is NULL: a consumer that has not reported holds everything.
CREATE FUNCTION @extschema@._effective_until(tt @extschema@.tracked_table, source_until timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    unreported boolean;
    least_consumer timestamptz;
BEGIN
    SELECT bool_or(x.until IS NULL), min(x.until) INTO unreported, least_consumer
      FROM (SELECT @extschema@._consumer_until(tt.kind, tt.granularity, c.commit_time, c.processed_until) AS until
              FROM @extschema@.consumer c
             WHERE c.table_id = tt.table_id AND c.required) AS x;
    IF source_until IS NULL OR unreported THEN
        RETURN NULL;
    END IF;
    RETURN LEAST(source_until, least_consumer);
END
$$;

-- What a derived table's inputs are final until (the least of their
-- verdicts, NULL while one has none): a job cannot have processed complete
-- input beyond it.
CREATE FUNCTION @extschema@._inputs_final_until(table_id bigint)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT CASE WHEN count(*) > 0 AND count(*) = count(w.finalized_until) THEN min(w.finalized_until) END
      FROM @extschema@.derived_input d
      JOIN @extschema@.watermark w ON w.table_id = d.input_id
     WHERE d.table_id = _inputs_final_until.table_id;
END;


-- The source verdict of a derived table: the period start of its inputs'
-- least finalized_until, NULL while any input has none.
CREATE FUNCTION @extschema@._inputs_until(table_id bigint, granularity interval)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.period_start(@extschema@._inputs_final_until(table_id), granularity);

-- The payload of an advance on channel "finalize": the table, the old and
-- new verdicts, the offset of its facts (LSN and commit time, null for a
-- derived table), and "kind": "derived" for a derived table only, so that a
-- tracked table's payload stays what it always was.
CREATE FUNCTION @extschema@._advance_payload(tt @extschema@.tracked_table, wm @extschema@.watermark,
                                             new_until timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN (tt).kind = 'source'
            THEN json_build_object('table', (tt).table_name,
                                   'old', @extschema@._utc_iso((wm).finalized_until),
                                   'new', @extschema@._utc_iso(new_until),
                                   'lsn', (wm).offset_lsn,
                                   'commit_time', @extschema@._utc_iso((wm).offset_commit_time))::text
            ELSE json_build_object('table', (tt).table_name,
                                   'old', @extschema@._utc_iso((wm).finalized_until),
                                   'new', @extschema@._utc_iso(new_until),
                                   'lsn', (wm).offset_lsn,
                                   'commit_time', @extschema@._utc_iso((wm).offset_commit_time),
                                   'kind', (tt).kind)::text END;

-- Like _lock_tracked(table_id, false), but NULL instead of waiting when
-- another transaction holds the table's row or verdict.
CREATE FUNCTION @extschema@._try_lock_tracked(table_id bigint)
RETURNS @extschema@.tracked_table
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
BEGIN
    PERFORM FROM @extschema@.tracked_table t
     WHERE t.table_id = _try_lock_tracked.table_id AND t.untracked_at IS NULL FOR KEY SHARE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM FROM @extschema@.watermark w WHERE w.table_id = _try_lock_tracked.table_id FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = _try_lock_tracked.table_id;
    RETURN tt;
END
$$;

-- The one function that moves a verdict: locks the table's verdict, takes a
-- derived table's source verdict from its inputs, moves the commit-time
-- verdict commit_until to the greatest of its old value and
-- _effective_until, then finalized_until to the greatest of its old value
-- and that (on an event-time table: the event-time verdict _event_until
-- draws from it, held by losses as _loss_cap says in event time), with a NOTIFY on
-- channel "finalize" when it moved, and lets every derived table that uses
-- this one follow in the same transaction. The inputs form a DAG
-- (track_derived refuses cycles), so the recursion ends. A derived table
-- whose verdict another transaction holds is skipped (wait false): an input's
-- advance never waits for a pipeline's open transaction, nor two sources'
-- workers for each other; the worker's _refresh_derived catches it up on the
-- next cycle. Returns finalized_until, NULL for a table no longer tracked
-- (or skipped).
CREATE FUNCTION @extschema@._advance(table_id bigint, wait boolean DEFAULT true)
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := CASE WHEN wait THEN @extschema@._lock_tracked(table_id, false)
                                         ELSE @extschema@._try_lock_tracked(table_id) END;
    wm @extschema@.watermark;
    from_inputs timestamptz;
    new_commit timestamptz;
    new_until timestamptz;
    ev record;
    cap timestamptz;
    dependent bigint;
BEGIN
    IF tt.table_id IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    IF tt.kind = 'derived' THEN
        from_inputs := @extschema@._inputs_until(tt.table_id, tt.granularity);
        IF from_inputs > coalesce(wm.source_until, '-infinity') THEN
            UPDATE @extschema@.watermark w SET source_until = from_inputs WHERE w.table_id = tt.table_id;
            wm.source_until := from_inputs;
        END IF;
    END IF;
    new_commit := GREATEST(wm.commit_until, @extschema@._effective_until(tt, wm.source_until));
    IF tt.event_time_column IS NULL THEN
        new_until := GREATEST(wm.finalized_until, new_commit);
    ELSE
        -- The event-time verdict, held by losses (whose spans are event times
        -- on an event-time table, see _record_loss).
        ev := @extschema@._event_until(tt, new_commit);
        -- A loss holds the event times its rows may have under the
        -- allowance: when the allowance grows (or becomes known), its start
        -- reaches further back, never into periods already final.
        IF ev.allowance IS NOT NULL AND ev.allowance > coalesce(wm.event_allowance, interval '0')
           AND EXISTS (SELECT FROM @extschema@.loss l WHERE l.table_id = tt.table_id AND l.commit_from IS NOT NULL) THEN
            UPDATE @extschema@.loss l
               SET lost_from = GREATEST(coalesce(@extschema@._instant_minus(l.commit_from, ev.allowance), '-infinity'),
                                        coalesce(wm.finalized_until, '-infinity'))
             WHERE l.table_id = tt.table_id AND l.commit_from IS NOT NULL
               AND GREATEST(coalesce(@extschema@._instant_minus(l.commit_from, ev.allowance), '-infinity'),
                            coalesce(wm.finalized_until, '-infinity')) < l.lost_from;
            IF FOUND THEN
                PERFORM @extschema@._refresh_loss_blocked(tt.table_id);
                SELECT w.loss_blocked INTO wm.loss_blocked FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
            END IF;
        END IF;
        IF wm.loss_blocked AND ev.until IS NOT NULL THEN
            cap := @extschema@._loss_cap(tt.table_id);
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
        RETURN new_until;
    END IF;
    UPDATE @extschema@.watermark w SET finalized_until = new_until, advanced_at = now()
     WHERE w.table_id = tt.table_id;
    PERFORM pg_notify('finalize', @extschema@._advance_payload(tt, wm, new_until));
    FOR dependent IN SELECT d.table_id FROM @extschema@.derived_input d
                       JOIN @extschema@.tracked_table t ON t.table_id = d.table_id
                      WHERE d.input_id = tt.table_id AND t.untracked_at IS NULL
                      ORDER BY d.table_id LOOP
        PERFORM @extschema@._advance(dependent, false);
    END LOOP;
    RETURN new_until;
END
$$;

-- How far from s the acknowledgements of a table recorded after a loss
-- (since) reach without a gap, adjacent or overlapping ones joined: at
-- least e once they cover every instant of [s, e). Where they stop, the
-- loss still holds periods (_acked, _loss_cap).
CREATE FUNCTION @extschema@._ack_reach(table_id bigint, s timestamptz, e timestamptz, since timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    reach timestamptz := s;
    further timestamptz;
BEGIN
    WHILE reach < e LOOP
        SELECT max(a.period_to) INTO further FROM @extschema@.loss_ack a
         WHERE a.table_id = table_id AND a.acknowledged_at > since
           AND a.period_from <= reach AND a.period_to > reach;
        IF further IS NULL THEN
            RETURN reach;
        END IF;
        reach := further;
    END LOOP;
    RETURN reach;
END
$$;

-- Whether the acknowledgements of a table recorded after a loss (since)
-- cover every instant of [s, e).
CREATE FUNCTION @extschema@._acked(table_id bigint, s timestamptz, e timestamptz, since timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@._ack_reach(table_id, s, e, since) >= e;

-- The periods of granularity g that the lost commit times [lost_from,
-- lost_to] touch, as [span_from, span_to): what an acknowledgement on a
-- table of that granularity must cover. An infinite end stays infinite.
CREATE FUNCTION @extschema@._loss_span(lost_from timestamptz, lost_to timestamptz, g interval,
                                       OUT span_from timestamptz, OUT span_to timestamptz)
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT CASE WHEN isfinite(_loss_span.lost_from) THEN @extschema@.period_start(_loss_span.lost_from, _loss_span.g)
                ELSE _loss_span.lost_from END,
           CASE WHEN isfinite(_loss_span.lost_to) THEN @extschema@.period_end(_loss_span.lost_to, _loss_span.g)
                ELSE _loss_span.lost_to END;
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
-- span_from, span_to: the loss's periods in the granularity of that table
-- (as _loss_span). PL/pgSQL for its cached plan, since the sensors ask
-- through it on every call while a loss holds periods; without JIT, which
-- the pessimistic estimates of the recursion over a few rows would buy at
-- hundreds of milliseconds a call.
CREATE FUNCTION @extschema@._loss_ackers(table_id bigint)
RETURNS TABLE (loss_id bigint, acker_id bigint, acker_granularity interval,
               span_from timestamptz, span_to timestamptz)
LANGUAGE plpgsql STABLE ROWS 10
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    -- Every path from the table up its inputs: each member with the
    -- members between the table (included) and it.
    WITH RECURSIVE up(id, path) AS (
        SELECT _loss_ackers.table_id, '{}'::bigint[]
        UNION
        SELECT d.input_id, up.path || up.id
          FROM @extschema@.derived_input d JOIN up ON d.table_id = up.id),
    held AS (
        SELECT l.loss_id AS id, l.table_id AS lost_id, l.lost_from, l.lost_to, l.created_at, t.granularity AS g,
               CASE WHEN isfinite(l.lost_from) THEN @extschema@.period_start(l.lost_from, t.granularity)
                    ELSE l.lost_from END AS lost_span_from,
               CASE WHEN isfinite(l.lost_to) THEN @extschema@.period_end(l.lost_to, t.granularity)
                    ELSE l.lost_to END AS lost_span_to
          FROM @extschema@.tracked_table t
          JOIN @extschema@.loss l ON l.table_id = t.table_id
         WHERE t.table_id IN (SELECT up.id FROM up)),
    ackers AS (
        SELECT h.id, h.lost_id AS acker, h.g, h.lost_from, h.lost_to FROM held h
        UNION ALL
        SELECT DISTINCT h.id, k.table_id, k.granularity, h.lost_from, h.lost_to
          FROM held h
          JOIN up p ON p.id = h.lost_id
         CROSS JOIN LATERAL unnest(p.path) AS on_path(id)
          JOIN @extschema@.tracked_table k ON k.table_id = on_path.id
         WHERE EXISTS (SELECT FROM @extschema@.consumer c
                        WHERE c.table_id = k.table_id AND c.required
                          AND c.created_at < coalesce(
                                  (SELECT max(a.acknowledged_at) FROM @extschema@.loss_ack a
                                    WHERE a.table_id = h.lost_id AND a.acknowledged_at > h.created_at
                                      AND a.period_from < h.lost_span_to AND a.period_to > h.lost_span_from),
                                  'infinity')))
    SELECT x.id, x.acker, x.g,
           CASE WHEN isfinite(x.lost_from) THEN @extschema@.period_start(x.lost_from, x.g) ELSE x.lost_from END,
           CASE WHEN isfinite(x.lost_to) THEN @extschema@.period_end(x.lost_to, x.g) ELSE x.lost_to END
      FROM ackers x;
END
$$;

-- The losses (of the table or of an input, transitively) that hold the
-- period [period_start, period_end), each with every table it has yet to be
-- acknowledged on for it (_loss_ackers): the loss intersects the period,
-- and that table's periods it shares with it are not all acknowledged.
CREATE FUNCTION @extschema@._open_loss_ackers(table_id bigint, period_start timestamptz, period_end timestamptz)
RETURNS TABLE (loss_id bigint, acker_id bigint)
LANGUAGE plpgsql STABLE ROWS 10
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT a.loss_id, a.acker_id
      FROM @extschema@._loss_ackers(_open_loss_ackers.table_id) AS a
      JOIN @extschema@.loss l ON l.loss_id = a.loss_id
     WHERE l.lost_from < _open_loss_ackers.period_end AND l.lost_to >= _open_loss_ackers.period_start
       AND NOT @extschema@._acked(a.acker_id,
               @extschema@.period_start(GREATEST(_open_loss_ackers.period_start, l.lost_from), a.acker_granularity),
               @extschema@.period_end(LEAST(_open_loss_ackers.period_end - interval '1 microsecond', l.lost_to),
                                      a.acker_granularity),
               l.created_at);
END
$$;

-- The losses (of the table or of an input, transitively) that hold the
-- period [period_start, period_end) (see _open_loss_ackers).
CREATE FUNCTION @extschema@._open_losses(table_id bigint, period_start timestamptz, period_end timestamptz)
RETURNS SETOF @extschema@.loss
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT l.*
      FROM @extschema@.loss l
     WHERE l.loss_id IN (SELECT o.loss_id
                           FROM @extschema@._open_loss_ackers(_open_losses.table_id, _open_losses.period_start,
                                                              _open_losses.period_end) AS o)
     ORDER BY l.loss_id;
END;

-- Whether a loss holds the period [period_start, period_end) of a table
-- (see _open_losses). The C sensors ask it (as the extension's owner) only
-- while watermark.loss_blocked is set.
CREATE FUNCTION @extschema@._loss_blocks(table_id bigint, period_start timestamptz, period_end timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN EXISTS (SELECT FROM @extschema@._open_losses(table_id, period_start, period_end));

-- Where finalized_until() stops while losses hold periods, since every
-- period ending at or before it must be complete: the start of the table's
-- earliest period (its own granularity) that a loss may still hold, for
-- want of an acknowledgement on any table it needs one on (_loss_ackers);
-- 'infinity' when none does, '-infinity' when such a loss has no start.
-- It may name an earlier period than the first one a loss holds (the
-- acknowledgements count only from a period start of the table they are
-- on), never a later one. The C sensors ask it (as the extension's owner)
-- only while watermark.loss_blocked is set.
CREATE FUNCTION @extschema@._loss_cap(table_id bigint)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    cap timestamptz;
BEGIN
    SELECT min(CASE WHEN isfinite(h.held_from) THEN @extschema@.period_start(h.held_from, t.granularity)
                    ELSE h.held_from END) INTO cap
      FROM @extschema@.tracked_table t
     CROSS JOIN LATERAL (
           SELECT GREATEST(CASE WHEN isfinite(r.reach) THEN @extschema@.period_start(r.reach, a.acker_granularity)
                                ELSE r.reach END,
                           l.lost_from) AS held_from
             FROM @extschema@._loss_ackers(t.table_id) AS a
             JOIN @extschema@.loss l ON l.loss_id = a.loss_id
            CROSS JOIN LATERAL (SELECT @extschema@._ack_reach(a.acker_id, a.span_from, a.span_to,
                                                              l.created_at) AS reach) AS r
            WHERE r.reach < a.span_to) AS h
     WHERE t.table_id = _loss_cap.table_id;
    RETURN coalesce(cap, 'infinity');
END
$$;

-- Whether the table or an input (transitively) has a loss that a table it
-- must be acknowledged on (_loss_ackers) has not acknowledged for all its
-- periods.
CREATE FUNCTION @extschema@._has_open_loss(table_id bigint)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN EXISTS (
    SELECT FROM @extschema@._loss_ackers(table_id) AS a
      JOIN @extschema@.loss l ON l.loss_id = a.loss_id
     WHERE NOT @extschema@._acked(a.acker_id, a.span_from, a.span_to, l.created_at));

-- Recomputes watermark.loss_blocked of a table and of every derived table
-- that uses it (transitively): after a loss, an acknowledgement (on the
-- table that lost the data or on a derived table), a new derived table, a
-- new granularity or a change of required consumers.
CREATE FUNCTION @extschema@._refresh_loss_blocked(table_id bigint)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH RECURSIVE down(id) AS (
        SELECT _refresh_loss_blocked.table_id
        UNION
        SELECT d.table_id FROM @extschema@.derived_input d JOIN down ON d.input_id = down.id),
    flags AS (
        SELECT down.id, @extschema@._has_open_loss(down.id) AS blocked FROM down)
    UPDATE @extschema@.watermark w SET loss_blocked = f.blocked
      FROM flags f
     WHERE w.table_id = f.id AND w.loss_blocked IS DISTINCT FROM f.blocked;
END;

-- Keeps watermark.loss_blocked current when a table's required consumers
-- change (add_consumer, alter_consumer, drop_consumer, however they do it):
-- whether a derived table must acknowledge its inputs' losses itself
-- depends on them (_loss_ackers).
CREATE FUNCTION @extschema@._consumer_loss_refresh()
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
        PERFORM @extschema@._refresh_loss_blocked(id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER loss_blocked_refresh
    AFTER INSERT OR DELETE OR UPDATE OF required ON @extschema@.consumer
    FOR EACH ROW EXECUTE FUNCTION @extschema@._consumer_loss_refresh();

-- Whether the period starting at period_start is final for the table, as
-- the sensors answer it: the watermark has passed it (_period_final, the
-- C rule of is_final) and no loss holds it.
CREATE FUNCTION @extschema@._final(tt @extschema@.tracked_table, wm @extschema@.watermark,
                                   period_start timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@._period_final(period_start, (tt).granularity, (wm).finalized_until)
   AND NOT ((wm).loss_blocked
            AND @extschema@._loss_blocks((tt).table_id, period_start,
                                         @extschema@.period_end(period_start, (tt).granularity)));

-- Checks the name of a new consumer: the pipeline's name, 1 to 255
-- characters, not only spaces.
CREATE FUNCTION @extschema@._check_consumer_name(consumer text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @extschema@._require(consumer, 'consumer');
    IF consumer !~ '\S' OR length(consumer) > 255 THEN
        RAISE EXCEPTION 'invalid value for argument consumer: "%"', consumer
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A consumer is named after the pipeline that writes the table (for example spark-orders): 1 to 255 characters, not only spaces.';
    END IF;
END
$$;

-- The reporter role a consumer is declared with, checked: it must exist
-- (a bare OID such as '-' or '4000000000' names no role).
CREATE FUNCTION @extschema@._check_reporter(reporter regrole)
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
CREATE FUNCTION @extschema@._reporter_notice(reporter regrole, tt @extschema@.tracked_table, consumer text)
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

-- The body of finalize.add_consumer: declares a pipeline that writes the
-- table. A required one holds the verdict from now on (what was final
-- stays final). Only members of reporter (and of finalize_admin) may
-- report for it; without one, only admins may: a pipeline must never be
-- able to release another pipeline's table.
CREATE FUNCTION @extschema@._add_consumer(
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
    tt @extschema@.tracked_table := @extschema@._tracked(table_name);
    reporter_name name;
BEGIN
    PERFORM @extschema@._check_consumer_name(consumer);
    PERFORM @extschema@._require(required, 'required');
    IF reporter IS NOT NULL THEN
        reporter_name := @extschema@._check_reporter(reporter);
    END IF;
    PERFORM @extschema@._lock_tracked(tt.table_id);
    BEGIN
        INSERT INTO @extschema@.consumer (table_id, consumer, required, reporter, reporter_name, created_by)
        VALUES (tt.table_id, consumer, required, reporter, reporter_name, caller);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'consumer "%" of table "%" already exists', consumer, tt.table_name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Change it with finalize.alter_consumer() (dropping and adding it again would let the verdict move past what it applied).';
    END;
    PERFORM @extschema@._reporter_notice(reporter, tt, consumer);
END
$$;

CREATE FUNCTION @extschema@.add_consumer(
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

-- The body of finalize.alter_consumer: changes a consumer in place, so the
-- verdict never moves past what it applied meanwhile (dropping and adding
-- it again would let it). NULL keeps a setting. reset forgets what it
-- reported (a wrong LSN, a report from another database): the verdict
-- stays where it is (verdicts never move back) and waits for its next
-- report. Making it optional lets the verdict move at once.
CREATE FUNCTION @extschema@._alter_consumer(
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
    tt @extschema@.tracked_table := @extschema@._tracked(table_name);
    reporter_name name;
BEGIN
    PERFORM @extschema@._require(consumer, 'consumer');
    PERFORM @extschema@._require(reset, 'reset');
    IF reporter IS NOT NULL THEN
        reporter_name := @extschema@._check_reporter(reporter);
    END IF;
    PERFORM @extschema@._lock_tracked(tt.table_id);
    UPDATE @extschema@.consumer c
       SET required = coalesce(_alter_consumer.required, c.required),
           reporter = coalesce(_alter_consumer.reporter, c.reporter),
           reporter_name = coalesce(reporter_name, c.reporter_name)
     WHERE c.table_id = tt.table_id AND c.consumer = consumer;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" of table "%" does not exist', consumer, tt.table_name
            USING ERRCODE = 'undefined_object',
                  HINT = format('Declare it with finalize.add_consumer(%L, %L).', tt.table_name, consumer);
    END IF;
    IF reset THEN
        UPDATE @extschema@.consumer c
           SET reported_lsn = NULL, reported_at = NULL, processed_until = NULL, resolved_for_lsn = NULL,
               mapped_lsn = NULL, commit_time = NULL, resolved_at = NULL, resolve_error = NULL
         WHERE c.table_id = tt.table_id AND c.consumer = consumer;
        RAISE NOTICE 'consumer "%" of table "%" starts again from nothing', consumer, tt.table_name
            USING DETAIL = 'What is final stays final; the verdict waits for the consumer''s next report.';
    END IF;
    IF reporter IS NOT NULL THEN
        PERFORM @extschema@._reporter_notice(reporter, tt, consumer);
    END IF;
    IF required IS NOT NULL AND NOT required THEN
        PERFORM @extschema@._advance(tt.table_id);
    END IF;
END
$$;

CREATE FUNCTION @extschema@.alter_consumer(
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
CREATE FUNCTION @extschema@._drop_consumer(caller name, table_name text, consumer text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := @extschema@._tracked(table_name);
    before timestamptz;
    after timestamptz;
BEGIN
    PERFORM @extschema@._require(consumer, 'consumer');
    PERFORM @extschema@._lock_tracked(tt.table_id);
    SELECT w.finalized_until INTO before FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    DELETE FROM @extschema@.consumer c WHERE c.table_id = tt.table_id AND c.consumer = consumer;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- A consumer that is gone stalls nothing any more.
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.kind = 'consumer_stalled' AND a.table_id = tt.table_id AND a.subject = consumer
       AND a.state <> 'resolved';
    after := @extschema@._advance(tt.table_id);
    IF after IS DISTINCT FROM before THEN
        RAISE NOTICE 'table "%" is now final until % (it was until %): consumer "%" no longer holds it',
                     tt.table_name, after, coalesce(before::text, 'nothing'), consumer
            USING DETAIL = 'The periods in between are final whether or not the consumer applied them.';
    END IF;
    RETURN true;
END
$$;

CREATE FUNCTION @extschema@.drop_consumer(table_name text, consumer text)
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
CREATE FUNCTION @extschema@._reporting_consumer(caller name, tt @extschema@.tracked_table, consumer text,
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
    PERFORM @extschema@._require(consumer, 'consumer');
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
CREATE FUNCTION @extschema@._reported_lsn(lsn text, tt @extschema@.tracked_table, consumer text)
RETURNS @extschema@.lsn
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    message text;
    detail text;
BEGIN
    PERFORM @extschema@._require(lsn, 'lsn');
    RETURN @extschema@._lsn_normalize(lsn);
EXCEPTION WHEN invalid_parameter_value THEN
    GET STACKED DIAGNOSTICS message = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL;
    RAISE EXCEPTION 'invalid value for argument lsn of consumer "%" of table "%": %', consumer, tt.table_name, message
        USING ERRCODE = 'invalid_parameter_value', DETAIL = detail;
END
$$;

-- The body of finalize.report_progress: a consumer of a tracked table has
-- durably applied every change with commit LSN at or below lsn. A lower or
-- equal LSN (a replay) changes nothing, takes no lock and says so; the
-- worker resolves a new one to a commit time on its next cycle, which may
-- advance the verdict. Returns whether the report moved.
CREATE FUNCTION @extschema@._report_progress(caller name, table_name text, consumer text, lsn text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := @extschema@._tracked(table_name);
    reported @extschema@.lsn;
    c @extschema@.consumer;
BEGIN
    IF tt.kind <> 'source' THEN
        RAISE EXCEPTION 'table "%" is a derived table, so its consumers report with finalize.report_processed()', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A derived table has no SQL Server LSNs: its consumers report the input watermark their job has fully processed.',
                  HINT = format('Call finalize.report_processed(%L, %L, <processed_until>).', tt.table_name,
                                pg_catalog.left(consumer, 255));
    END IF;
    reported := @extschema@._reported_lsn(lsn, tt, consumer);
    -- A replay is answered without a lock; a move is checked again under one.
    FOR i IN 1..2 LOOP
        c := @extschema@._reporting_consumer(caller, tt, consumer, i = 2);
        IF reported <= c.reported_lsn THEN
            RAISE NOTICE 'consumer "%" of table "%" already reported LSN %; LSN % is ignored', consumer, tt.table_name,
                         c.reported_lsn, reported
                USING DETAIL = 'Reports only move forward (a replay sends older positions again), so nothing changed.';
            RETURN false;
        END IF;
    END LOOP;
    UPDATE @extschema@.consumer x SET reported_lsn = reported, reported_at = now()
     WHERE x.table_id = tt.table_id AND x.consumer = consumer;
    RETURN true;
END
$$;

CREATE FUNCTION @extschema@.report_progress(table_name text, consumer text, lsn text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.report_progress(text, text, text) IS
    'A pipeline has durably applied every change with commit LSN at or below lsn (0x and 20 hex digits, or Debezium''s commit_lsn); returns whether it moved';

-- Says that a report_processed changed nothing (a rerun reports an older
-- watermark again).
CREATE FUNCTION @extschema@._processed_replay(tt @extschema@.tracked_table, c @extschema@.consumer,
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
CREATE FUNCTION @extschema@._report_processed(caller name, table_name text, consumer text,
                                              processed_until timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := @extschema@._tracked(table_name);
    c @extschema@.consumer;
    inputs_until timestamptz;
    upto timestamptz := processed_until;
BEGIN
    IF tt.kind <> 'derived' THEN
        RAISE EXCEPTION 'table "%" is fed by SQL Server, so its consumers report with finalize.report_progress()', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A consumer of a tracked table reports the commit LSN it has applied; report_processed takes the input watermark of a derived table''s job, and a time is never read as an LSN.',
                  HINT = format('Call finalize.report_progress(%L, %L, <lsn>).', tt.table_name,
                                pg_catalog.left(consumer, 255));
    END IF;
    PERFORM @extschema@._require(processed_until, 'processed_until');
    IF NOT isfinite(processed_until) THEN
        RAISE EXCEPTION 'invalid value for argument processed_until: "%"', processed_until
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A consumer reports the input watermark its job has fully processed: a finite time.';
    END IF;
    c := @extschema@._reporting_consumer(caller, tt, consumer, false);
    IF processed_until <= c.processed_until THEN
        PERFORM @extschema@._processed_replay(tt, c, processed_until);
        RETURN false;
    END IF;
    inputs_until := @extschema@._inputs_final_until(tt.table_id);
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
    PERFORM @extschema@._lock_tracked(tt.table_id);
    c := @extschema@._reporting_consumer(caller, tt, consumer, true);
    IF upto <= c.processed_until THEN
        PERFORM @extschema@._processed_replay(tt, c, processed_until);
        RETURN false;
    END IF;
    UPDATE @extschema@.consumer x SET processed_until = upto, reported_at = now()
     WHERE x.table_id = tt.table_id AND x.consumer = consumer;
    PERFORM @extschema@._advance(tt.table_id);
    RETURN true;
END
$$;

CREATE FUNCTION @extschema@.report_processed(table_name text, consumer text, processed_until timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.report_processed(text, text, timestamptz) IS
    'A derived table''s job has fully processed its inputs up to processed_until; returns whether it moved';

-- The ids of a derived table's inputs, in the order given, each an active
-- tracked or derived table locked against untracking (FOR SHARE, which
-- untrack_table's lock waits for); the errors name the input.
CREATE FUNCTION @extschema@._derived_inputs(table_name text, inputs text[])
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
    PERFORM @extschema@._require(inputs, 'inputs');
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
            PERFORM @extschema@._not_tracked(input);
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
CREATE FUNCTION @extschema@._check_no_cycle(table_name text, input_ids bigint[])
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
CREATE FUNCTION @extschema@._already_tracked(table_name text)
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
-- or derived tables. Its granularity defaults to the coarsest input's; its
-- verdict (the period start of its inputs' least verdict, capped by its
-- required consumers) is computed at once and follows every input advance
-- in the same transaction. Returns its id.
CREATE FUNCTION @extschema@._track_derived(
    caller name,
    table_name text,
    inputs text[],
    granularity interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    ids bigint[];
    g interval;
    new_id bigint;
BEGIN
    PERFORM @extschema@._check_table_name(table_name, 'sales.daily_revenue');
    IF EXISTS (SELECT FROM @extschema@.tracked_table t WHERE t.table_name = _track_derived.table_name
                                                        AND t.untracked_at IS NULL) THEN
        PERFORM @extschema@._already_tracked(table_name);
    END IF;
    ids := @extschema@._derived_inputs(table_name, inputs);
    PERFORM @extschema@._check_no_cycle(table_name, ids);
    g := coalesce(granularity, (SELECT max(t.granularity) FROM @extschema@.tracked_table t WHERE t.table_id = ANY (ids)));
    PERFORM @extschema@._check_granularity(g, 'granularity');
    BEGIN
        INSERT INTO @extschema@.tracked_table (table_name, kind, granularity, created_by)
        VALUES (table_name, 'derived', g, caller)
        RETURNING tracked_table.table_id INTO new_id;
    EXCEPTION WHEN unique_violation THEN
        PERFORM @extschema@._already_tracked(table_name);
    END;
    INSERT INTO @extschema@.watermark (table_id) VALUES (new_id);
    INSERT INTO @extschema@.derived_input (table_id, input_id) SELECT new_id, i FROM unnest(ids) AS i;
    PERFORM @extschema@._refresh_loss_blocked(new_id);
    PERFORM @extschema@._advance(new_id);
    RETURN new_id;
END
$$;

CREATE FUNCTION @extschema@.track_derived(table_name text, inputs text[], granularity interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.track_derived(text, text[], interval) IS
    'Track a lake table derived from tracked or derived tables: final for a period once its inputs and its required consumers are';

-- Checks a bound of an acknowledged range: a period boundary of the table
-- (or infinite), so that it names whole periods.
CREATE FUNCTION @extschema@._check_period_bound(tt @extschema@.tracked_table, bound timestamptz, argname text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @extschema@._require(bound, argname);
    IF isfinite(bound) AND @extschema@.period_start(bound, tt.granularity) <> bound THEN
        RAISE EXCEPTION 'invalid value for argument %: % is not a period boundary of table "%"', argname, bound, tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('Its periods are %s long; an acknowledgement covers whole periods.', tt.granularity),
                  HINT = format('Use %s or %s.', @extschema@.period_start(bound, tt.granularity),
                                @extschema@.period_end(bound, tt.granularity));
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
CREATE FUNCTION @extschema@._acknowledge_loss(
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
    tt @extschema@.tracked_table := @extschema@._tracked(table_name);
    covered integer;
BEGIN
    IF tt.kind = 'derived' AND NOT EXISTS (SELECT FROM @extschema@._loss_ackers(tt.table_id) AS a
                                            WHERE a.acker_id = tt.table_id) THEN
        RAISE EXCEPTION 'table "%" is a derived table with no loss to acknowledge', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A derived table holds the periods its inputs lost. It needs an acknowledgement of its own only when it has a required consumer, whose job must rebuild them; otherwise it is released when the loss is acknowledged on the input that lost the data.',
                  HINT = 'finalize.explain_verdict() on the derived table names the table to acknowledge the loss on.';
    END IF;
    PERFORM @extschema@._check_period_bound(tt, period_from, 'period_from');
    PERFORM @extschema@._check_period_bound(tt, period_to, 'period_to');
    IF period_to <= period_from THEN
        RAISE EXCEPTION 'invalid range of periods from % to %', period_from, period_to
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'period_to must be after period_from.';
    END IF;
    PERFORM @extschema@._require(note, 'note');
    IF note !~ '\S' THEN
        RAISE EXCEPTION 'invalid value for argument note: it must say how the loss was repaired'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The note is kept with the acknowledgement, for example ''orders re-snapshotted from SQL Server on 2026-12-01, ticket DATA-123''.';
    END IF;
    PERFORM @extschema@._lock_tracked(tt.table_id);
    -- Its own losses, or for a derived table the ones it must acknowledge.
    SELECT count(*) INTO covered FROM @extschema@.loss l
     WHERE l.loss_id IN (SELECT a.loss_id FROM @extschema@._loss_ackers(tt.table_id) AS a
                          WHERE a.acker_id = tt.table_id)
       AND l.lost_from < period_to AND l.lost_to >= period_from;
    -- clock_timestamp(): a loss recorded after this (under the same lock)
    -- is never covered by it, even one whose transaction began earlier.
    INSERT INTO @extschema@.loss_ack (table_id, period_from, period_to, note, acknowledged_by, acknowledged_at)
    VALUES (tt.table_id, period_from, period_to, note, caller, clock_timestamp());
    INSERT INTO @extschema@.fact (table_id, kind, event, detail)
    VALUES (tt.table_id, 'event', 'loss_acknowledged',
            jsonb_build_object('by', caller, 'note', note, 'losses', covered,
                               'period_from', CASE WHEN isfinite(period_from) THEN @extschema@._utc_iso(period_from) ELSE period_from::text END,
                               'period_to', CASE WHEN isfinite(period_to) THEN @extschema@._utc_iso(period_to) ELSE period_to::text END));
    PERFORM @extschema@._refresh_loss_blocked(tt.table_id);
    -- An event-time verdict was held back by the loss itself (_advance): it
    -- moves now, and the derived tables that use it with it.
    IF tt.event_time_column IS NOT NULL THEN
        PERFORM @extschema@._advance(tt.table_id);
    END IF;
    -- The data_loss incident of the table that lost the data is resolved
    -- once that table has acknowledged all its losses; a derived table
    -- that inherited one acknowledges it on its own (its verdict waits).
    IF tt.kind = 'source' AND NOT @extschema@._has_open_loss(tt.table_id) THEN
        PERFORM @extschema@._resolve_alerts('data_loss', tt.table_id, tt.server_name);
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

CREATE FUNCTION @extschema@.acknowledge_loss(table_name text, period_from timestamptz, period_to timestamptz,
                                             note text)
RETURNS integer
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.acknowledge_loss(text, timestamptz, timestamptz, text) IS
    'Say that the periods of [period_from, period_to) were repaired after the losses recorded so far (re-snapshotted, or rebuilt by a derived table''s job); returns how many losses it covers';

-- The active tables of a source, with what the worker needs to plan them
-- (one read per cycle); never a derived table, which has no source.
CREATE OR REPLACE FUNCTION @extschema@._source_tables(server_name text)
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
       AND t.kind = 'source' AND t.state IN ('active', 'resuming')
     ORDER BY t.table_id;
END;

-- Restarts a table after a data loss, at new_offset (just below its capture
-- instance's min LSN, whose commit time is new_offset_time): records the
-- lost LSN range as a "resumed" event and as a loss (the commit times from
-- the offset before the restart to lost_until, the latest instant the lost
-- commits may have: the worker reads the local time of a fall-back hour
-- both ways), moves the offset and makes the table active again. The verdict
-- is untouched: it moves again with the next range recorded, but the
-- periods of the loss stay not final, here and in the derived tables that
-- use this one, until finalize.acknowledge_loss() covers them.
-- 0.2.0 adds lost_until: the signature changes.
DROP FUNCTION @extschema@._resume_after_loss(bigint, text, timestamptz, text, boolean, jsonb);
CREATE FUNCTION @extschema@._resume_after_loss(
    table_id         bigint,
    new_offset       text,
    new_offset_time  timestamptz,
    lost_until       timestamptz,
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
                'lost_from_time', wm.offset_commit_time, 'lost_to_time', lost_until));
    UPDATE @extschema@.watermark w
       SET offset_lsn = @extschema@._lsn_arg(new_offset, 'new_offset'),
           offset_commit_time = new_offset_time,
           recorded_at = now()
     WHERE w.table_id = _resume_after_loss.table_id;
    UPDATE @extschema@.tracked_table t
       SET state = 'active', state_detail = NULL, state_since = now(),
           capture_instance = coalesce(_resume_after_loss.capture_instance, t.capture_instance)
     WHERE t.table_id = _resume_after_loss.table_id;
    PERFORM @extschema@._record_loss(_resume_after_loss.table_id, wm, new_offset, lost_until);
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
CREATE FUNCTION @extschema@._record_loss(table_id bigint, prior @extschema@.watermark,
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
    SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = _record_loss.table_id;
    IF tt.event_time_column IS NOT NULL THEN
        lo := LEAST(lost_from, lost_to);
        lost_to := GREATEST(lost_from, lost_to);
        lost_from := coalesce(@extschema@._instant_minus(lo, GREATEST(tt.allowed_lateness, prior.event_allowance)),
                              '-infinity');
        IF isfinite(lost_to) THEN
            lost_to := lost_to + @extschema@._max_clock_skew();
        END IF;
    END IF;
    INSERT INTO @extschema@.loss (table_id, fact_id, lost_from, lost_to, from_lsn, to_lsn, created_at, commit_from)
    VALUES (table_id,
            (SELECT max(f.fact_id) FROM @extschema@.fact f
              WHERE f.table_id = _record_loss.table_id AND f.event = 'data_loss'),
            LEAST(lost_from, lost_to), GREATEST(lost_from, lost_to),
            prior.offset_lsn, @extschema@._lsn_arg(new_offset, 'new_offset'), clock_timestamp(), lo);
    PERFORM @extschema@._refresh_loss_blocked(table_id);
END
$$;

-- The consumers of a source's active tracked tables that have reported an
-- LSN, read by its worker with the tables: it resolves each reported LSN
-- to a commit time on SQL Server (nothing to do when resolved_for_lsn is
-- the reported LSN).
CREATE FUNCTION @extschema@._source_consumers(server_name text)
RETURNS TABLE (table_id bigint, consumer text, reported_lsn @extschema@.lsn, resolved_for_lsn @extschema@.lsn)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT c.table_id, c.consumer, c.reported_lsn, c.resolved_for_lsn
      FROM @extschema@.consumer c
      JOIN @extschema@.tracked_table t ON t.table_id = c.table_id
     WHERE t.server_name = _source_consumers.server_name AND t.untracked_at IS NULL
       AND t.kind = 'source' AND t.state IN ('active', 'resuming') AND c.reported_lsn IS NOT NULL
     ORDER BY c.table_id, c.consumer;
END;

-- Stores what the worker resolved a consumer's LSN to: mapped_lsn, the
-- greatest mapping row at or below for_lsn (itself at most the reported LSN
-- and the cycle's max LSN), and its commit time; every commit before that
-- time is applied. Ignored when the consumer no longer reports at least
-- for_lsn (dropped, or added again lower, since the worker read it) or its
-- table is gone; a commit time never moves back. Then the verdict may
-- advance, in the worker's write transaction.
CREATE FUNCTION @extschema@._consumer_resolved(
    table_id    bigint,
    consumer    text,
    for_lsn     text,
    mapped_lsn  text,
    commit_time timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    f @extschema@.lsn := @extschema@._lsn_arg(for_lsn, 'for_lsn');
    m @extschema@.lsn := @extschema@._lsn_arg(mapped_lsn, 'mapped_lsn');
    tt @extschema@.tracked_table;
BEGIN
    PERFORM @extschema@._require(f, 'for_lsn');
    PERFORM @extschema@._require(m, 'mapped_lsn');
    PERFORM @extschema@._require(commit_time, 'commit_time');
    IF m > f THEN
        RAISE EXCEPTION 'mapped LSN % lies above the LSN % it resolves', m, f
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A consumer''s LSN resolves to the greatest mapping row at or below it.';
    END IF;
    tt := @extschema@._lock_tracked(table_id, false);
    IF tt.table_id IS NULL THEN
        RETURN;
    END IF;
    PERFORM @extschema@._check_commit_time(tt.table_name, 'commit_time', commit_time);
    UPDATE @extschema@.consumer c
       SET resolved_for_lsn = GREATEST(c.resolved_for_lsn, f),
           mapped_lsn = CASE WHEN c.commit_time IS NULL OR commit_time > c.commit_time THEN m ELSE c.mapped_lsn END,
           commit_time = GREATEST(c.commit_time, commit_time),
           resolved_at = now(),
           resolve_error = NULL
     WHERE c.table_id = tt.table_id AND c.consumer = consumer AND c.reported_lsn >= f;
    IF FOUND THEN
        PERFORM @extschema@._advance(tt.table_id);
    END IF;
END
$$;

-- Stores why the worker could not resolve a consumer's LSN (SQL Server's
-- own message, or a mapping row missing after cleanup), so that
-- finalize.consumers and explain_verdict show it; the verdict stays where
-- it was. Written only when the reason changes (every write of a consumer
-- row makes backends drop their cached verdicts), and only while the
-- consumer still reports at least for_lsn.
CREATE FUNCTION @extschema@._consumer_unresolved(
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
    f @extschema@.lsn := @extschema@._lsn_arg(for_lsn, 'for_lsn');
    reason text := pg_catalog.left(error, 2000);
BEGIN
    PERFORM @extschema@._require(f, 'for_lsn');
    PERFORM @extschema@._require(reason, 'error');
    PERFORM 1 FROM @extschema@.consumer c
     WHERE c.table_id = _consumer_unresolved.table_id AND c.consumer = consumer AND c.reported_lsn >= f
       AND c.resolve_error IS DISTINCT FROM reason;
    IF FOUND THEN
        UPDATE @extschema@.consumer c SET resolve_error = reason
         WHERE c.table_id = _consumer_unresolved.table_id AND c.consumer = consumer AND c.reported_lsn >= f;
    END IF;
END
$$;

-- Lets the derived tables that use the server's tracked tables catch up,
-- once per successful cycle: an input's advance skips a derived table
-- whose verdict another transaction held (see _advance).
CREATE FUNCTION @extschema@._refresh_derived(server_name text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    derived bigint;
BEGIN
    FOR derived IN
        WITH RECURSIVE served(id) AS (
            SELECT t.table_id FROM @extschema@.tracked_table t
             WHERE t.server_name = _refresh_derived.server_name AND t.kind = 'source' AND t.untracked_at IS NULL
            UNION
            SELECT d.table_id FROM @extschema@.derived_input d JOIN served ON d.input_id = served.id)
        SELECT t.table_id FROM served JOIN @extschema@.tracked_table t ON t.table_id = served.id
         WHERE t.kind = 'derived' AND t.untracked_at IS NULL
         ORDER BY t.table_id
    LOOP
        PERFORM @extschema@._advance(derived, false);
    END LOOP;
END
$$;

-- finalize.consumer_stall_threshold as an interval (no days: comparing it
-- with now() - reported_at is exact in every session zone).
CREATE FUNCTION @extschema@._consumer_stall_threshold()
RETURNS interval
AS 'MODULE_PATHNAME', 'finalize_consumer_stall_threshold'
LANGUAGE C STABLE;

-- Once per successful cycle of a source, in its write transaction: a
-- consumer of its tables (or of the derived tables that use them) that has
-- not reported for finalize.consumer_stall_threshold while the table's
-- source verdict is past the consumer's own is consumer_stalled. Entering
-- the condition sends an alert on finalize_alert; reporting (or the source
-- standing still) clears it. Writes only what changed.
CREATE FUNCTION @extschema@._check_consumers(server_name text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    threshold interval := @extschema@._consumer_stall_threshold();
    r record;
BEGIN
    FOR r IN
        WITH RECURSIVE served(id) AS (
            SELECT t.table_id FROM @extschema@.tracked_table t
             WHERE t.server_name = _check_consumers.server_name AND t.kind = 'source' AND t.untracked_at IS NULL
            UNION
            SELECT d.table_id FROM @extschema@.derived_input d JOIN served ON d.input_id = served.id)
        SELECT c.table_id, c.consumer, c.condition, c.reported_lsn, c.reported_at, t.table_name,
               w.source_until, x.until,
               coalesce(coalesce(c.reported_at, c.created_at) < now() - threshold
                        AND w.source_until > coalesce(x.until, '-infinity'), false) AS stalled
          FROM served
          JOIN @extschema@.tracked_table t ON t.table_id = served.id AND t.untracked_at IS NULL
          JOIN @extschema@.watermark w ON w.table_id = t.table_id
          JOIN @extschema@.consumer c ON c.table_id = t.table_id
         CROSS JOIN LATERAL (SELECT @extschema@._consumer_until(t.kind, t.granularity, c.commit_time,
                                                                 c.processed_until) AS until) x
         ORDER BY c.table_id, c.consumer
    LOOP
        IF r.stalled AND r.condition IS NULL THEN
            UPDATE @extschema@.consumer c SET condition = 'consumer_stalled', condition_since = now()
             WHERE c.table_id = r.table_id AND c.consumer = r.consumer;
            PERFORM @extschema@._alert(jsonb_build_object('alert', 'consumer_stalled', 'table', r.table_name,
                'consumer', r.consumer, 'reported_lsn', r.reported_lsn, 'reported_at', r.reported_at,
                'consumer_until', r.until, 'source_until', r.source_until,
                'detail', format('Consumer "%s" of table "%s" has not reported progress since %s while the source moved on to %s; the verdict waits for it.',
                                 r.consumer, r.table_name, coalesce(r.reported_at::text, 'it was added'), r.source_until)));
            PERFORM @extschema@._raise_alert('consumer_stalled', 'warning', r.table_id,
                (SELECT t.server_name FROM @extschema@.tracked_table t WHERE t.table_id = r.table_id), r.consumer,
                format('Consumer "%s" of table "%s" has not reported progress since %s while the source moved on to %s; the verdict waits for it.',
                       r.consumer, r.table_name, coalesce(r.reported_at::text, 'it was added'), r.source_until));
        ELSIF NOT r.stalled AND r.condition IS NOT NULL THEN
            UPDATE @extschema@.consumer c SET condition = NULL, condition_since = NULL
             WHERE c.table_id = r.table_id AND c.consumer = r.consumer;
            PERFORM @extschema@._resolve_alerts('consumer_stalled', r.table_id,
                (SELECT t.server_name FROM @extschema@.tracked_table t WHERE t.table_id = r.table_id), r.consumer);
        END IF;
    END LOOP;
END
$$;

-- is_final also answers for losses (and finalized_until stops at them).
COMMENT ON FUNCTION @extschema@.is_final(text, timestamptz) IS
    'True iff the whole period containing period_start is complete: the watermark has passed it and no unacknowledged loss holds it';

-- The same for sensors that wait on several tables: the least verdict
-- (NULL if any is NULL), and whether the period is final for every table.
-- The first name that is not tracked is the error. A literal name still
-- calls the text versions (an unknown literal prefers the string type).
CREATE FUNCTION @extschema@.finalized_until(table_names text[])
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_finalized_until_all'
LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.finalized_until(text[]) IS
    'The least finalized_until of the tables: every period ending at or before it is complete in all of them';

CREATE FUNCTION @extschema@.is_final(table_names text[], period_start timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_is_final_all'
LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.is_final(text[], timestamptz) IS
    'True iff the period containing period_start is final in every one of the tables';

-- Why the source verdict holds a period back, or NULL when it does not: for
-- a tracked table how far SQL Server's capture has come, for a derived one
-- which inputs are not final that far.
CREATE FUNCTION @extschema@._explain_source(tt @extschema@.tracked_table, wm @extschema@.watermark,
                                            period_start timestamptz, period_end timestamptz)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF @extschema@._period_final(period_start, tt.granularity, wm.source_until) THEN
        RETURN NULL;
    ELSIF tt.kind = 'derived' THEN
        RETURN @extschema@._explain_inputs(tt.table_id, period_end);
    ELSIF wm.offset_lsn IS NULL THEN
        RETURN format('the worker has not recorded any range for this table since it was tracked at %s', tt.created_at);
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
CREATE FUNCTION @extschema@._explain_inputs(table_id bigint, period_end timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT string_agg(CASE WHEN w.finalized_until IS NULL
                           THEN format('input "%s" has nothing final yet', t.table_name)
                           ELSE format('input "%s" is final until %s', t.table_name, w.finalized_until) END,
                      '; ' ORDER BY w.finalized_until NULLS FIRST, t.table_name)
           || format('; the period ends at %s', _explain_inputs.period_end)
      FROM @extschema@.derived_input d
      JOIN @extschema@.tracked_table t ON t.table_id = d.input_id
      JOIN @extschema@.watermark w ON w.table_id = d.input_id
     WHERE d.table_id = _explain_inputs.table_id
       AND (w.finalized_until IS NULL OR w.finalized_until < _explain_inputs.period_end);
END;

-- The required consumers that hold a period back, each with how far it got,
-- or NULL when none does.
CREATE FUNCTION @extschema@._explain_consumers(tt @extschema@.tracked_table, period_end timestamptz)
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
           || format('; the period ends at %s', _explain_consumers.period_end)
      FROM @extschema@.consumer c
     CROSS JOIN LATERAL (SELECT @extschema@._consumer_until((tt).kind, (tt).granularity, c.commit_time,
                                                             c.processed_until) AS until) x
     WHERE c.table_id = (tt).table_id AND c.required
       AND (x.until IS NULL OR x.until < _explain_consumers.period_end);
END;

-- The losses that hold a period, each with its table, times, LSNs and the
-- calls that release it: on the table that lost the data once the lake was
-- re-snapshotted, and on each derived table with a required consumer once
-- its job has rebuilt the periods (_loss_ackers), inputs first (a derived
-- table is tracked after its inputs); NULL when none does.
CREATE FUNCTION @extschema@._explain_losses(tt @extschema@.tracked_table, period_start timestamptz,
                                            period_end timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT string_agg(x.sentence, ' ' ORDER BY x.loss_id)
      FROM (SELECT l.loss_id,
                   format('changes of table "%s"%s %s from %s to %s (LSN range (%s, %s]) were lost before finalize could read them (see its data_loss event in finalize.facts)',
                          t.table_name,
                          CASE WHEN t.table_id <> (tt).table_id THEN ', an input of this table,' ELSE '' END,
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
              FROM @extschema@._open_loss_ackers((tt).table_id, _explain_losses.period_start,
                                                 _explain_losses.period_end) AS o
              JOIN @extschema@.loss l ON l.loss_id = o.loss_id
              JOIN @extschema@.tracked_table t ON t.table_id = l.table_id
              JOIN @extschema@.tracked_table k ON k.table_id = o.acker_id
             CROSS JOIN LATERAL @extschema@._loss_span(l.lost_from, l.lost_to, t.granularity) AS ls
             CROSS JOIN LATERAL @extschema@._loss_span(l.lost_from, l.lost_to, k.granularity) AS ks
             GROUP BY l.loss_id, t.table_id, t.table_name, ls.span_from, ls.span_to) AS x;
END;

-- Why a final period is final: how far the source verdict reached, the
-- required consumers that have applied (or processed) it, and those
-- declared after it became final (a verdict never moves back).
CREATE FUNCTION @extschema@._explain_final(tt @extschema@.tracked_table, wm @extschema@.watermark,
                                           period_start timestamptz, period_end timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT CASE WHEN (tt).kind = 'source'
                THEN format('Period [%s, %s) is final: SQL Server''s capture has passed %s (LSN %s), so every change committed before %s is recorded.',
                            _explain_final.period_start, _explain_final.period_end, (wm).offset_commit_time,
                            (wm).offset_lsn, coalesce((wm).commit_until, (wm).finalized_until))
                ELSE format('Period [%s, %s) is final: every input of this derived table is final for it, and its verdict stands at %s.',
                            _explain_final.period_start, _explain_final.period_end, (wm).finalized_until) END
           || CASE WHEN count(*) FILTER (WHERE x.until >= _explain_final.period_end) > 0
                   THEN format(' Its required consumers have %s it: %s.',
                               CASE WHEN (tt).kind = 'source' THEN 'applied' ELSE 'processed' END,
                               string_agg(format('"%s"', c.consumer), ', ' ORDER BY c.consumer)
                                   FILTER (WHERE x.until >= _explain_final.period_end))
                   ELSE '' END
           || CASE WHEN count(c.consumer) FILTER (WHERE x.until IS NULL OR x.until < _explain_final.period_end) > 0
                   THEN format(' It was final before %s %s declared; a verdict never moves back.',
                               CASE WHEN count(c.consumer) FILTER (WHERE x.until IS NULL OR x.until < _explain_final.period_end) = 1
                                    THEN 'consumer' ELSE 'consumers' END,
                               string_agg(format('"%s"', c.consumer), ', ' ORDER BY c.consumer)
                                   FILTER (WHERE x.until IS NULL OR x.until < _explain_final.period_end)
                               || CASE WHEN count(c.consumer) FILTER (WHERE x.until IS NULL OR x.until < _explain_final.period_end) = 1
                                       THEN ' was' ELSE ' were' END)
                   ELSE '' END
      FROM (SELECT 1) AS one
      LEFT JOIN @extschema@.consumer c ON c.table_id = (tt).table_id AND c.required
      LEFT JOIN LATERAL (SELECT @extschema@._consumer_until((tt).kind, (tt).granularity, c.commit_time,
                                                             c.processed_until) AS until) x ON true;
END;

-- One row per tracked table: its verdict and what its source's worker saw.
-- Status reads each table's latest schema change from the DDL events alone.
CREATE INDEX fact_ddl_idx
    ON @extschema@.fact (table_id, fact_id DESC)
    WHERE event IS NOT NULL AND detail OPERATOR(pg_catalog.?) 'ddl';

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
       s.live_pid AS worker_pid,
       t.kind,
       w.source_until,
       -- The required consumer furthest behind, while the verdict waits for
       -- it (asked only then: most rows need no look at consumers).
       CASE WHEN w.source_until > coalesce(w.commit_until, w.finalized_until, '-infinity')
            THEN (SELECT x.consumer FROM @extschema@.consumer x
                   CROSS JOIN LATERAL (SELECT @extschema@.period_start(
                              CASE WHEN t.kind = 'source' THEN x.commit_time ELSE x.processed_until END,
                              t.granularity) AS until) u
                   WHERE x.table_id = t.table_id AND x.required
                     AND w.source_until > coalesce(u.until, '-infinity')
                   ORDER BY u.until NULLS FIRST, x.consumer LIMIT 1)
       END AS held_back_by,
       w.loss_blocked,
       t.event_time_column,
       w.commit_until,
       w.event_allowance,
       -- Only event-time tables have late rows (a table with some keeps its
       -- event_time_column): commit-time rows skip the look.
       CASE WHEN t.event_time_column IS NOT NULL
            THEN (SELECT sum(l.rows) FROM @extschema@.late_period l WHERE l.table_id = t.table_id)::bigint
       END AS late_rows,
       s.cycle_time AS source_cycle_time
  FROM @extschema@.tracked_table t
  JOIN @extschema@.watermark w USING (table_id)
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
    'One row per tracked table: state, verdict, lag and what its source''s worker last saw';

-- One row per consumer of a tracked (or derived) table: how far it got
-- (the LSN it reported and its commit time; for a derived table's job, the
-- processed input watermark in consumer_until), how far its verdict lags
-- the source verdict, and whether it is stalled.
CREATE VIEW @extschema@.consumers AS
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
       c.condition,
       c.condition_since,
       c.resolve_error
  FROM @extschema@.consumer c
  JOIN @extschema@.tracked_table t USING (table_id)
  JOIN @extschema@.watermark w USING (table_id)
 CROSS JOIN LATERAL (SELECT @extschema@.period_start(
            CASE WHEN t.kind = 'source' THEN c.commit_time ELSE c.processed_until END,
            t.granularity) AS until) u
 WHERE t.untracked_at IS NULL;
COMMENT ON VIEW @extschema@.consumers IS
    'One row per consumer (pipeline) of a tracked table: what it applied, its lag behind the source and its condition';

-- The data 0.1.0 recorded: each table's source verdict is its verdict so
-- far (no consumer held it), and every restart after a data loss
-- ("resumed" event) is a loss, unacknowledged: its periods are not final
-- until finalize.acknowledge_loss() says they were repaired.
UPDATE @extschema@.watermark SET source_until = finalized_until;
INSERT INTO @extschema@.loss (table_id, fact_id, lost_from, lost_to, from_lsn, to_lsn, created_at)
SELECT e.table_id,
       (SELECT max(f.fact_id) FROM @extschema@.fact f
         WHERE f.table_id = e.table_id AND f.event = 'data_loss' AND f.fact_id < e.fact_id),
       LEAST(coalesce((e.detail ->> 'lost_from_time')::timestamptz, '-infinity'),
             coalesce((e.detail ->> 'lost_to_time')::timestamptz, 'infinity')),
       GREATEST(coalesce((e.detail ->> 'lost_from_time')::timestamptz, '-infinity'),
                coalesce((e.detail ->> 'lost_to_time')::timestamptz, 'infinity')),
       e.start_lsn, e.end_lsn, e.recorded_at
  FROM @extschema@.fact e
 WHERE e.kind = 'event' AND e.event = 'resumed' AND e.detail ->> 'after' = 'data_loss'
 ORDER BY e.fact_id;
SELECT @extschema@._refresh_loss_blocked(t.table_id)
  FROM @extschema@.tracked_table t
 WHERE EXISTS (SELECT FROM @extschema@.loss l WHERE l.table_id = t.table_id);

-- Privileges, as a fresh install's script ends: nothing is PUBLIC's, each
-- role gets what it is for.
REVOKE ALL ON ALL TABLES IN SCHEMA @extschema@ FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA @extschema@ FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA @extschema@ FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @extschema@.finalized_until(text[]),
    @extschema@.is_final(text[], timestamptz)
    TO finalize_reader;
GRANT SELECT ON @extschema@.consumers TO finalize_reader;
GRANT EXECUTE ON FUNCTION
    @extschema@.report_progress(text, text, text),
    @extschema@.report_processed(text, text, timestamptz)
    TO finalize_pipeline;
GRANT EXECUTE ON FUNCTION
    @extschema@.untrack_table(text, boolean, boolean),
    @extschema@.add_consumer(text, text, boolean, regrole),
    @extschema@.alter_consumer(text, text, boolean, regrole, boolean),
    @extschema@.drop_consumer(text, text),
    @extschema@.track_derived(text, text[], interval),
    @extschema@.acknowledge_loss(text, timestamptz, timestamptz, text)
    TO finalize_admin;
GRANT SELECT ON @extschema@.consumer, @extschema@.derived_input, @extschema@.loss, @extschema@.loss_ack
    TO finalize_admin;

-- 6c. The release gate keeps a release's listing compactly (issue 16): the
-- manifest as given, the listing as what differs from it; report keeps the
-- rest. Attempts stored before keep their whole report and NULL here.
ALTER TABLE @extschema@.release ADD COLUMN manifest jsonb, ADD COLUMN listing_delta bytea;
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_settings
                WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE @extschema@.release ALTER COLUMN manifest SET COMPRESSION lz4,
            ALTER COLUMN listing_delta SET COMPRESSION lz4;
    END IF;
END
$$;
COMMENT ON COLUMN @extschema@.release.manifest IS
    'The manifest as the publisher gave it (NULL for attempts stored by 0.1.0, whose report holds it)';
COMMENT ON COLUMN @extschema@.release.listing_delta IS
    'The listing as what differs from the manifest, front-coded (finalize.release_report rebuilds it)';

-- 7. Encryption (issue 13): a new server encrypts and verifies by default.
-- A server declared under 0.1.0 keeps what 0.1.0 did (FreeTDS encrypted
-- when SQL Server offered it and verified nothing: encrypt 'request',
-- trust_server_certificate 'true'), so that the update breaks no source;
-- a WARNING (an extension script shows no NOTICE) names each one so that
-- its owner can switch to verified TLS.
DO $tls$
DECLARE
    srv record;
BEGIN
    FOR srv IN
        SELECT s.srvname, s.srvoptions
          FROM pg_catalog.pg_foreign_server s
          JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
         WHERE w.fdwname = 'finalize_mssql'
           AND NOT EXISTS (SELECT FROM pg_catalog.unnest(s.srvoptions) o WHERE o LIKE 'encrypt=%')
         ORDER BY s.srvname
    LOOP
        BEGIN
            IF EXISTS (SELECT FROM pg_catalog.unnest(srv.srvoptions) o WHERE o LIKE 'trust\_server\_certificate=%') THEN
                EXECUTE pg_catalog.format('ALTER SERVER %I OPTIONS (ADD encrypt %L)', srv.srvname, 'request');
            ELSE
                EXECUTE pg_catalog.format('ALTER SERVER %I OPTIONS (ADD encrypt %L, ADD trust_server_certificate %L)',
                                          srv.srvname, 'request', 'true');
            END IF;
        EXCEPTION WHEN insufficient_privilege OR fdw_invalid_attribute_value THEN
            RAISE WARNING 'server "%" now requires a verified encrypted connection: the update could not change it (%)', srv.srvname, SQLERRM
                USING HINT = pg_catalog.format('Its owner keeps 0.1.0''s behaviour with ALTER SERVER %I OPTIONS (ADD encrypt ''request'', ADD trust_server_certificate ''true''), or adds ca_file.', srv.srvname);
            CONTINUE;
        END;
        RAISE WARNING 'server "%" keeps the unverified encryption of finalize 0.1.0 (encrypt ''request'', trust_server_certificate ''true'')', srv.srvname
            USING HINT = pg_catalog.format('To verify SQL Server''s certificate: ALTER SERVER %I OPTIONS (SET encrypt ''require'', SET trust_server_certificate ''false'', ADD ca_file ''/path/to/ca.pem'');', srv.srvname);
    END LOOP;
END
$tls$;


-- Event-time partitions (docs/design/event_time.md). A table with an
-- event_time_column is partitioned by a business time in its rows: its
-- verdict (watermark.finalized_until) is the event-time verdict, drawn by
-- _advance from the commit-time verdict (watermark.commit_until) shifted
-- back by the table's lateness allowance. Each recorded range brings its
-- rows per event period and a lateness sketch, computed on SQL Server;
-- rows that land in a period already final are late data, counted exactly.

-- The period arithmetic and the sketches are C (event_time_sql.c): no SQL
-- copy depends on the session's TimeZone.
CREATE FUNCTION @extschema@._event_bound(commit_until timestamptz, allowance interval, granularity interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_event_bound'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION @extschema@._instant_minus(ts timestamptz, iv interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_instant_minus'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION @extschema@._sketch_merge(a bytea, b bytea)
RETURNS bytea
AS 'MODULE_PATHNAME', 'finalize_sketch_merge'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- The sketch of every sketch aggregated (NULL for none).
CREATE AGGREGATE @extschema@._sketch_union(bytea) (
    SFUNC = @extschema@._sketch_merge,
    STYPE = bytea
);

CREATE FUNCTION @extschema@._sketch_quantile_ms(sketch bytea, quantile double precision)
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_sketch_quantile_ms'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION @extschema@._sketch_quantile_bound_ms(sketch bytea, quantile double precision)
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_sketch_quantile_bound_ms'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION @extschema@._sketch_rows(sketch bytea)
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_sketch_rows'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION @extschema@._sketch_info(sketch bytea, OUT rows bigint, OUT event_after_commit bigint,
                                         OUT zero_lateness bigint, OUT min_ms bigint, OUT max_ms bigint)
AS 'MODULE_PATHNAME', 'finalize_sketch_info'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- finalize.late_data_alert_interval as an interval without days.
CREATE FUNCTION @extschema@._late_data_alert_interval()
RETURNS interval
AS 'MODULE_PATHNAME', 'finalize_late_data_alert_interval'
LANGUAGE C STABLE;

-- The event-time options of track_table and alter_tracked_table, checked
-- together; the errors name the option and say what it takes.
CREATE FUNCTION @extschema@._check_event_time(
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
    PERFORM @extschema@._check_choice(lateness_policy, 'lateness_policy', ARRAY['exact', 'quantile'],
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
    IF event_time_column IS NOT NULL AND granularity IS NOT NULL
       AND NOT (granularity <= interval '1 day' AND granularity >= interval '1 second'
                AND extract(epoch FROM granularity) = trunc(extract(epoch FROM granularity))
                AND 86400 % extract(epoch FROM granularity)::numeric = 0) THEN
        RAISE EXCEPTION 'granularity % cannot partition by event time', granularity
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'SQL Server groups event times in slots of whole seconds that must tile a day: the granularity of an event-time table is a whole number of seconds that divides one day.',
                  HINT = 'Use for example ''1 hour'', ''15 minutes'' or ''1 day''.';
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
CREATE FUNCTION @extschema@._lateness_allowance(tt @extschema@.tracked_table, commit_until timestamptz)
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
    SELECT @extschema@._sketch_quantile_bound_ms(@extschema@._sketch_union(h.sketch), tt.lateness_quantile),
           sum(h.rows)
      INTO q_ms, n
      FROM @extschema@.lateness_hour h
     WHERE h.table_id = tt.table_id
       AND h.hour >= coalesce(@extschema@._instant_minus(commit_until, tt.lateness_window), '-infinity');
    IF q_ms IS NULL OR coalesce(n, 0) < @extschema@._quantile_min_rows(tt.lateness_quantile) THEN
        RETURN NULL;
    END IF;
    RETURN GREATEST(tt.allowed_lateness, make_interval(secs => q_ms / 1000.0));
END
$$;

-- How many rows of observed lateness a quantile needs: 1 / (1 - q), so that
-- the rows beyond it are at least one.
CREATE FUNCTION @extschema@._quantile_min_rows(quantile double precision)
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN ceil(round((1 / (1 - quantile))::numeric, 9))::bigint;

-- The event-time verdict of a table whose commit-time verdict is
-- commit_until (capped by the losses that hold it): the greatest event
-- period boundary that, plus the allowance, the commit-time verdict has
-- passed; NULL while there is none.
CREATE FUNCTION @extschema@._event_until(tt @extschema@.tracked_table, commit_until timestamptz,
                                         OUT until timestamptz, OUT allowance interval)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    allowance := @extschema@._lateness_allowance(tt, commit_until);
    IF commit_until IS NULL OR NOT isfinite(commit_until) OR allowance IS NULL THEN
        until := NULL;
    ELSE
        until := @extschema@._event_bound(commit_until, allowance, tt.granularity);
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
CREATE FUNCTION @extschema@._store_event_facts(
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
    IF periods IS NOT NULL AND jsonb_typeof(periods) <> 'array' THEN
        RAISE EXCEPTION 'invalid value for argument event_periods of table "%": a JSON array is expected',
                        tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Each element is {"period": "<UTC instant>", "inserts": n, "updates": n, "deletes": n}.';
    END IF;
    INSERT INTO @extschema@.event_fact (fact_id, table_id, event_period, inserts, updates, deletes, late_rows)
    SELECT fact_id, tt.table_id, p.period, sum(p.inserts), sum(p.updates), sum(p.deletes),
           CASE WHEN p.period IS NOT NULL AND verdict_before IS NOT NULL
                     AND @extschema@._period_final(p.period, tt.granularity, verdict_before)
                THEN sum(p.inserts + p.updates + p.deletes) ELSE 0 END
      FROM (SELECT CASE WHEN x.period IS NULL THEN NULL
                        ELSE @extschema@.period_start(x.period, tt.granularity) END AS period,
                   coalesce(x.inserts, 0) AS inserts, coalesce(x.updates, 0) AS updates,
                   coalesce(x.deletes, 0) AS deletes
              FROM jsonb_to_recordset(coalesce(periods, '[]')) AS x(period timestamptz, inserts bigint,
                                                                    updates bigint, deletes bigint)) AS p
     GROUP BY p.period;

    IF sketch IS NOT NULL THEN
        INSERT INTO @extschema@.lateness_hour AS h (table_id, hour, sketch, rows)
        VALUES (tt.table_id, @extschema@.period_start(end_commit_time, interval '1 hour'), sketch,
                @extschema@._sketch_rows(sketch))
        ON CONFLICT (table_id, hour) DO UPDATE
           SET sketch = @extschema@._sketch_merge(h.sketch, EXCLUDED.sketch),
               rows = h.rows + EXCLUDED.rows;
    END IF;

    SELECT coalesce(sum(e.late_rows), 0),
           jsonb_agg(jsonb_build_object('period', @extschema@._utc_iso(e.event_period), 'rows', e.late_rows)
                     ORDER BY e.event_period) FILTER (WHERE e.late_rows > 0)
      INTO late, late_list
      FROM @extschema@.event_fact e WHERE e.fact_id = _store_event_facts.fact_id;
    IF late = 0 THEN
        RETURN 0;
    END IF;
    UPDATE @extschema@.fact f SET late_rows = late WHERE f.fact_id = _store_event_facts.fact_id;

    -- Counted per period; the first late rows of a period say which verdict they violated.
    INSERT INTO @extschema@.late_period AS l (table_id, event_period, rows, first_seen, last_seen, verdict_at_arrival)
    SELECT tt.table_id, e.event_period, e.late_rows, now(), now(), verdict_before
      FROM @extschema@.event_fact e
     WHERE e.fact_id = _store_event_facts.fact_id AND e.late_rows > 0
    ON CONFLICT (table_id, event_period) DO UPDATE
       SET rows = l.rows + EXCLUDED.rows, last_seen = EXCLUDED.last_seen;

    INSERT INTO @extschema@.fact (table_id, kind, end_lsn, end_commit_time, event, detail)
    VALUES (tt.table_id, 'event', end_lsn, end_commit_time, 'late_data',
            jsonb_build_object('rows', late, 'periods', late_list,
                               'verdict', @extschema@._utc_iso(verdict_before),
                               'range_fact_id', fact_id));

    -- One alert per table and period per finalize.late_data_alert_interval.
    WITH due AS (
        UPDATE @extschema@.late_period l SET alerted_at = now()
         WHERE l.table_id = tt.table_id
           AND l.event_period IN (SELECT e.event_period FROM @extschema@.event_fact e
                                   WHERE e.fact_id = _store_event_facts.fact_id AND e.late_rows > 0)
           AND (l.alerted_at IS NULL
                OR l.alerted_at <= now() - @extschema@._late_data_alert_interval())
        RETURNING l.event_period, l.rows)
    SELECT jsonb_agg(jsonb_build_object('period', @extschema@._utc_iso(d.event_period), 'rows', e.late_rows,
                                        'rows_so_far', d.rows)
                     ORDER BY d.event_period)
      INTO to_alert
      FROM due d
      JOIN @extschema@.event_fact e ON e.fact_id = _store_event_facts.fact_id AND e.event_period = d.event_period;
    -- One incident per late period, counted each time rows land in it.
    PERFORM @extschema@._raise_alert('late_data', 'warning', tt.table_id, tt.server_name,
                                     @extschema@._utc_iso(e.event_period),
                                     format('%s late row(s) of table "%s" landed in event period %s, already declared final; a correction of that partition is due.',
                                            l.rows, tt.table_name, @extschema@._utc_iso(e.event_period)),
                                     jsonb_build_object('rows', l.rows, 'verdict', @extschema@._utc_iso(verdict_before)))
       FROM @extschema@.event_fact e
       JOIN @extschema@.late_period l ON l.table_id = tt.table_id AND l.event_period = e.event_period
      WHERE e.fact_id = _store_event_facts.fact_id AND e.late_rows > 0;
    IF to_alert IS NOT NULL THEN
        PERFORM @extschema@._alert(jsonb_build_object(
            'alert', 'late_data', 'table', tt.table_name,
            'rows', late, 'periods', to_alert,
            'verdict', @extschema@._utc_iso(verdict_before),
            'message', format('%s row(s) of table "%s" landed in event period(s) already declared final; a correction of those partitions is due.',
                              late, tt.table_name)));
    END IF;
    RETURN late;
END
$$;

-- Event periods that received rows after they were declared final.
CREATE VIEW @extschema@.late_data AS
SELECT t.table_name, l.event_period,
       @extschema@.period_end(l.event_period, t.granularity) AS period_end,
       l.rows, l.first_seen, l.last_seen, l.verdict_at_arrival, l.alerted_at
  FROM @extschema@.late_period l
  JOIN @extschema@.tracked_table t ON t.table_id = l.table_id
 WHERE t.untracked_at IS NULL;
COMMENT ON VIEW @extschema@.late_data IS
    'Event-time tables: periods that received rows after they were declared final (late data), with how many and when';

-- Rows per event period of an event-time table, from the recorded facts,
-- with how many of them arrived late. Columns as changes_by_period, plus
-- late_rows: covered when the facts reach back before the period (by the
-- clock skew a row's event may run ahead of its commit) and no loss
-- intersects the period or its lateness allowance; exact when covered and
-- final (a period that is not final may still receive rows).
CREATE FUNCTION @extschema@.changes_by_event_period(table_name text, from_time timestamptz, to_time timestamptz)
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
    PERFORM @extschema@._require(changes_by_event_period.table_name, 'table_name');
    PERFORM @extschema@._require(from_time, 'from_time');
    PERFORM @extschema@._require(to_time, 'to_time');
    tt := @extschema@._tracked(changes_by_event_period.table_name);
    IF tt.event_time_column IS NULL THEN
        RAISE EXCEPTION 'table "%" is not partitioned by event time', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Use finalize.changes_by_period() for it, or set an event column with finalize.alter_tracked_table(..., event_time_column => ...).';
    END IF;
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    SELECT min(f.end_commit_time) INTO covered_after
      FROM @extschema@.fact f WHERE f.table_id = tt.table_id AND f.kind = 'range';
    RETURN QUERY
    WITH periods AS (
        SELECT g.period_start AS ps, g.period_end AS pe,
               coalesce(@extschema@._instant_minus(g.period_start, @extschema@._max_clock_skew()), '-infinity')
                   > coalesce(covered_after, 'infinity')
               AND NOT EXISTS (
                   -- losses of an event-time table span event times (_record_loss)
                   SELECT FROM @extschema@.loss l
                    WHERE l.table_id = tt.table_id AND l.lost_to >= g.period_start
                      AND l.lost_from < g.period_end) AS covered
          FROM @extschema@._periods(from_time, to_time, tt.granularity) AS g)
    SELECT p.ps, p.pe,
           @extschema@._final(tt, wm, p.ps),
           p.covered,
           coalesce(sum(e.inserts), 0)::bigint,
           coalesce(sum(e.updates), 0)::bigint,
           coalesce(sum(e.deletes), 0)::bigint,
           coalesce(sum(e.late_rows), 0)::bigint,
           0::bigint,
           p.covered AND @extschema@._final(tt, wm, p.ps)
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
-- verdict last used (drawn from the quantile's upper bound).
CREATE FUNCTION @extschema@.lateness(table_name text, quantile double precision DEFAULT NULL,
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
    PERFORM @extschema@._require(lateness.table_name, 'table_name');
    tt := @extschema@._tracked(lateness.table_name);
    IF tt.event_time_column IS NULL THEN
        RAISE EXCEPTION 'table "%" is not partitioned by event time', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Set an event column with finalize.track_table(..., event_time_column => ...).';
    END IF;
    IF window_length IS NOT NULL THEN
        PERFORM @extschema@._instant_minus('2000-01-01 00:00+00', window_length);
    END IF;
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    SELECT @extschema@._sketch_union(h.sketch) INTO s
      FROM @extschema@.lateness_hour h
     WHERE h.table_id = tt.table_id
       AND h.hour >= coalesce(@extschema@._instant_minus(coalesce(wm.commit_until, now()),
                                                         coalesce(window_length, tt.lateness_window)), '-infinity');
    rows := coalesce(@extschema@._sketch_rows(s), 0);
    lateness := make_interval(secs => @extschema@._sketch_quantile_ms(s, coalesce(quantile, tt.lateness_quantile, 0.999)) / 1000.0);
    allowance := wm.event_allowance;
END
$$;
COMMENT ON FUNCTION @extschema@.lateness(text, double precision, interval) IS
    'Event-time tables: a quantile of the observed lateness (commit time minus event time) over a window, and the allowance the verdict uses';

-- When the commit-time verdict lets an event period ending at period_end
-- be final: its end plus the allowance (kept without days, so the sum is
-- the same in every session TimeZone).
CREATE FUNCTION @extschema@._event_reach(period_end timestamptz, allowance interval)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN period_end + make_interval(secs => extract(epoch FROM allowance));

-- What explain_verdict says of an event-time table: the column and zone,
-- the policy and the allowance it gave, and where the commit-time verdict
-- stands against the end of the period plus that allowance.
CREATE FUNCTION @extschema@._explain_event_time(tt @extschema@.tracked_table, wm @extschema@.watermark,
                                                period_end timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN format('This table is partitioned by event time (column "%s"%s): a period is final once the commit-time verdict has passed its end plus the lateness allowance, %s (%s); the commit-time verdict stands at %s%s.',
              (tt).event_time_column,
              CASE WHEN (tt).event_time_zone IS NOT NULL THEN format(', zone %s', (tt).event_time_zone) ELSE '' END,
              coalesce((wm).event_allowance::text,
                       CASE WHEN (tt).lateness_policy = 'exact' THEN (tt).allowed_lateness::text
                            ELSE format('not known yet (the quantile needs %s rows of observed lateness in the window)',
                                        @extschema@._quantile_min_rows((tt).lateness_quantile)) END),
              CASE WHEN (tt).lateness_policy = 'exact'
                   THEN format('policy exact, allowed_lateness %s', (tt).allowed_lateness)
                   ELSE format('policy quantile: the %s quantile of the lateness observed over %s, at least %s',
                               (tt).lateness_quantile, (tt).lateness_window, (tt).allowed_lateness) END,
              coalesce((wm).commit_until::text, 'nothing yet'),
              CASE WHEN (wm).commit_until IS NOT NULL AND isfinite(_explain_event_time.period_end)
                        AND (wm).event_allowance IS NOT NULL
                   THEN format(', and must reach %s for this period',
                               @extschema@._event_reach(_explain_event_time.period_end, (wm).event_allowance))
                   ELSE '' END);

-- The write path and the tracking functions take the event-time settings
-- and facts: their signatures change.
DROP FUNCTION @extschema@.record_range(text, text, text, timestamptz, bigint, bigint, bigint,
                                      timestamptz, timestamptz, text, text, jsonb);
DROP FUNCTION @extschema@._record_range(bigint, text, text, timestamptz, bigint, bigint, bigint,
                                       timestamptz, timestamptz, text, text, jsonb);
DROP FUNCTION @extschema@.track_table(text, text, text, interval, text, text, text);
DROP FUNCTION @extschema@._track_table(name, text, text, text, interval, text, text, text);
DROP FUNCTION @extschema@.alter_tracked_table(text, interval, text, text);

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
    on_data_loss text DEFAULT 'stop',
    event_time_column text DEFAULT NULL,
    event_time_zone   text DEFAULT NULL,
    lateness_policy   text DEFAULT 'exact',
    allowed_lateness  interval DEFAULT interval '0',
    lateness_quantile double precision DEFAULT NULL,
    lateness_window   interval DEFAULT interval '7 days')
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
    PERFORM @extschema@._check_table_name(_track_table.table_name, 'sales.orders');
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
    PERFORM @extschema@._require(_track_table.lateness_policy, 'lateness_policy');
    PERFORM @extschema@._require(_track_table.allowed_lateness, 'allowed_lateness');
    PERFORM @extschema@._require(_track_table.lateness_window, 'lateness_window');
    IF _track_table.event_time_column IS NULL
       AND (_track_table.event_time_zone IS NOT NULL OR _track_table.lateness_policy <> 'exact'
            OR _track_table.allowed_lateness <> interval '0' OR _track_table.lateness_quantile IS NOT NULL) THEN
        RAISE EXCEPTION 'lateness settings need an event_time_column'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A table without an event column is partitioned by commit time, which is exact: it has no lateness.',
                  HINT = 'Pass event_time_column => ''<captured date/time column>'' too.';
    END IF;
    PERFORM @extschema@._check_event_time(_track_table.event_time_column, _track_table.event_time_zone,
                                          _track_table.lateness_policy, _track_table.allowed_lateness,
                                          _track_table.lateness_quantile, _track_table.lateness_window,
                                          _track_table.granularity);

    BEGIN
        -- Lengths of time are kept without days, so that adding them is
        -- the same in every session TimeZone.
        INSERT INTO @extschema@.tracked_table
            (table_name, server_name, source_schema, source_name, granularity, start_from,
             ddl_policy, on_data_loss, created_by, event_time_column, event_time_zone, lateness_policy,
             allowed_lateness, lateness_quantile, lateness_window)
        VALUES (_track_table.table_name, _track_table.server_name, parts[1], parts[2], _track_table.granularity,
                _track_table.start_from, _track_table.ddl_policy, _track_table.on_data_loss, who,
                _track_table.event_time_column, _track_table.event_time_zone, _track_table.lateness_policy,
                make_interval(secs => extract(epoch FROM _track_table.allowed_lateness)),
                _track_table.lateness_quantile,
                make_interval(secs => extract(epoch FROM _track_table.lateness_window)))
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
    on_data_loss text DEFAULT 'stop',
    event_time_column text DEFAULT NULL,
    event_time_zone   text DEFAULT NULL,
    lateness_policy   text DEFAULT 'exact',
    allowed_lateness  interval DEFAULT interval '0',
    lateness_quantile double precision DEFAULT NULL,
    lateness_window   interval DEFAULT interval '7 days')
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.track_table(text, text, text, interval, text, text, text,
                                            text, text, text, interval, double precision, interval) IS
    'Start tracking a logical table fed by a SQL Server table with CDC enabled; event_time_column partitions it by a time in its rows';

-- Changes how a tracked table is handled; NULL keeps a setting.
CREATE FUNCTION @extschema@.alter_tracked_table(
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
    max_lag           interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    id bigint;
    kind text;
    cur @extschema@.tracked_table;
    has_verdict boolean;
    event_changed boolean;
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
    IF max_lag IS NOT NULL AND (max_lag < interval '0' OR extract(month FROM max_lag) <> 0
                                OR extract(year FROM max_lag) <> 0) THEN
        RAISE EXCEPTION 'invalid value for argument max_lag: %', max_lag
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The freshness SLA is a length of time without months, such as ''2 hours''; 0 removes it.';
    END IF;
    SELECT t.table_id, t.kind INTO id, kind FROM @extschema@.tracked_table t
     WHERE t.table_name = alter_tracked_table.table_name AND t.untracked_at IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM @extschema@._not_tracked(alter_tracked_table.table_name);
    END IF;
    IF kind = 'derived' AND (ddl_policy IS NOT NULL OR on_data_loss IS NOT NULL OR event_time_column IS NOT NULL
                             OR event_time_zone IS NOT NULL OR lateness_policy IS NOT NULL
                             OR allowed_lateness IS NOT NULL OR lateness_quantile IS NOT NULL
                             OR lateness_window IS NOT NULL) THEN
        RAISE EXCEPTION 'table "%" is a derived table: only its granularity and max_lag can be changed', alter_tracked_table.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'ddl_policy, on_data_loss and the event-time settings say how the worker reads a SQL Server table; a derived table has none.';
    END IF;
    SELECT t.* INTO cur FROM @extschema@.tracked_table t WHERE t.table_id = id;
    SELECT w.finalized_until IS NOT NULL INTO has_verdict FROM @extschema@.watermark w WHERE w.table_id = id;
    event_changed := (event_time_column IS NOT NULL AND event_time_column IS DISTINCT FROM cur.event_time_column)
                     OR (event_time_zone IS NOT NULL AND event_time_zone IS DISTINCT FROM cur.event_time_zone);
    -- Event facts are stored per period of the granularity they were
    -- recorded with: a new one would split or merge them.
    IF granularity IS NOT NULL AND granularity IS DISTINCT FROM cur.granularity
       AND coalesce(event_time_column, cur.event_time_column) IS NOT NULL
       AND (EXISTS (SELECT FROM @extschema@.event_fact e WHERE e.table_id = id)
            OR EXISTS (SELECT FROM @extschema@.late_period l WHERE l.table_id = id)) THEN
        RAISE EXCEPTION 'table "%" is partitioned by event time and has event facts, so its granularity cannot change', cur.table_name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'Rows per event period, late data and the release gate count in periods of the granularity the facts were recorded with.',
                  HINT = 'Track the table again under a new name with the new granularity, then untrack this one.';
    END IF;
    -- What the verdict means changes with the partitioning time: a verdict
    -- given in commit time (or another column's time) cannot be kept.
    IF event_changed AND (has_verdict OR EXISTS (SELECT FROM @extschema@.event_fact e WHERE e.table_id = id)
                          OR EXISTS (SELECT FROM @extschema@.lateness_hour h WHERE h.table_id = id)) THEN
        RAISE EXCEPTION 'table "%" already has a verdict or event facts, so its event column cannot change', cur.table_name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('Its periods up to %s were declared final in %s; a verdict never moves back.',
                                  @extschema@._utc_iso((SELECT w.finalized_until FROM @extschema@.watermark w WHERE w.table_id = id)),
                                  CASE WHEN cur.event_time_column IS NULL THEN 'commit time'
                                       ELSE format('the time of column "%s"', cur.event_time_column) END),
                  HINT = 'Track the table again under a new name with finalize.track_table(..., event_time_column => ...), then untrack this one.';
    END IF;
    IF coalesce(event_time_column, cur.event_time_column) IS NULL
       AND (event_time_zone IS NOT NULL OR lateness_policy IS NOT NULL OR allowed_lateness IS NOT NULL
            OR lateness_quantile IS NOT NULL OR lateness_window IS NOT NULL) THEN
        RAISE EXCEPTION 'table "%" has no event_time_column, so it has no lateness settings', cur.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A table partitioned by commit time is exact: it has no lateness.';
    END IF;
    PERFORM @extschema@._check_event_time(
        coalesce(event_time_column, cur.event_time_column), coalesce(event_time_zone, cur.event_time_zone),
        coalesce(lateness_policy, cur.lateness_policy), coalesce(allowed_lateness, cur.allowed_lateness),
        CASE WHEN coalesce(lateness_policy, cur.lateness_policy) = 'exact' AND lateness_quantile IS NULL THEN NULL
             ELSE coalesce(lateness_quantile, cur.lateness_quantile) END,
        coalesce(lateness_window, cur.lateness_window), coalesce(granularity, cur.granularity));
    -- The verdict stays valid under any granularity: it is an instant before
    -- which every commit is captured; only later advances use the new one.
    -- A stricter lateness policy applies from now on: periods already
    -- final stay final (a verdict never moves back).
    UPDATE @extschema@.tracked_table t
       SET granularity = coalesce(alter_tracked_table.granularity, t.granularity),
           ddl_policy = coalesce(alter_tracked_table.ddl_policy, t.ddl_policy),
           on_data_loss = coalesce(alter_tracked_table.on_data_loss, t.on_data_loss),
           event_time_column = coalesce(alter_tracked_table.event_time_column, t.event_time_column),
           event_time_zone = coalesce(alter_tracked_table.event_time_zone, t.event_time_zone),
           lateness_policy = coalesce(alter_tracked_table.lateness_policy, t.lateness_policy),
           allowed_lateness = coalesce(make_interval(secs => extract(epoch FROM alter_tracked_table.allowed_lateness)),
                                       t.allowed_lateness),
           lateness_quantile = CASE WHEN coalesce(alter_tracked_table.lateness_policy, t.lateness_policy) = 'exact'
                                    THEN NULL
                                    ELSE coalesce(alter_tracked_table.lateness_quantile, t.lateness_quantile) END,
           lateness_window = coalesce(make_interval(secs => extract(epoch FROM alter_tracked_table.lateness_window)),
                                      t.lateness_window),
           -- without days, like every length of time here; 0 removes the SLA
           max_lag = CASE WHEN alter_tracked_table.max_lag IS NULL THEN t.max_lag
                          WHEN alter_tracked_table.max_lag = interval '0' THEN NULL
                          ELSE make_interval(secs => extract(epoch FROM alter_tracked_table.max_lag)) END
     WHERE t.table_id = id;
    -- Which periods a loss holds depends on the granularity; a derived
    -- table's verdict may move at once under a finer one.
    IF granularity IS NOT NULL THEN
        PERFORM @extschema@._refresh_loss_blocked(id);
        IF kind = 'derived' THEN
            PERFORM @extschema@._advance(id);
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@.alter_tracked_table(text, interval, text, text, text, text, text, interval,
                                                    double precision, interval, interval) IS
    'Change the granularity, DDL policy, data-loss policy, event-time settings or freshness SLA (max_lag) of a tracked table (only the granularity and max_lag of a derived one)';

-- The write path itself, by table id (the worker's way; record_range is the
-- same by name): the arguments are checked (and the table's verdict locked),
-- the range must chain onto the recorded ones, its fact is stored (with its
-- event-time facts on an event-time table, late rows judged against the
-- verdict before it), the source verdict moves and _advance moves the
-- verdict (and the derived tables that use it) as far as the consumers
-- allow, all in the caller's transaction.
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
    detail            jsonb,
    event_periods     jsonb,
    lateness_sketch   bytea,
    first_event_time  timestamptz,
    last_event_time   timestamptz)
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
    fid   bigint;
BEGIN
    tt := @extschema@._check_range_args(_record_range.table_id, s, e, end_commit_time, inserts, updates, deletes,
                                        first_commit_time, last_commit_time, event);
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    IF @extschema@._check_range_chain(tt, wm.offset_lsn, s, e, inserts, updates, deletes,
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
    fid := @extschema@._store_range_fact(tt.table_id, s, e, end_commit_time, inserts, updates, deletes,
                                         first_commit_time, last_commit_time, capture_instance, event, detail);
    -- A schema change the verdict went on across (ddl_policy warn) is an
    -- incident for the record: informational, born resolved.
    IF event = 'schema_change' THEN
        PERFORM @extschema@._raise_alert('schema_change', 'info', tt.table_id, tt.server_name, '',
                                         format('Table "%s": %s', tt.table_name,
                                                coalesce(detail ->> 'summary', 'a schema change was recorded')),
                                         detail);
        PERFORM @extschema@._resolve_alerts('schema_change', tt.table_id, tt.server_name);
    END IF;
    IF tt.event_time_column IS NOT NULL AND inserts + updates + deletes > 0 THEN
        UPDATE @extschema@.fact f
           SET sketch = lateness_sketch, first_event_time = _record_range.first_event_time,
               last_event_time = _record_range.last_event_time
         WHERE f.fact_id = fid;
        -- Late data is judged against the event-time verdict before this range moves it.
        PERFORM @extschema@._store_event_facts(tt, fid, event_periods, lateness_sketch, end_commit_time, e,
                                               wm.finalized_until);
    END IF;

    UPDATE @extschema@.watermark w
       SET source_until = GREATEST(w.source_until, @extschema@.period_start(end_commit_time, tt.granularity)),
           offset_lsn = e,
           offset_commit_time = end_commit_time,
           recorded_at = now()
     WHERE w.table_id = tt.table_id;
    RETURN @extschema@._advance(tt.table_id);
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
    detail            jsonb DEFAULT NULL,
    event_periods     jsonb DEFAULT NULL,
    lateness_sketch   bytea DEFAULT NULL,
    first_event_time  timestamptz DEFAULT NULL,
    last_event_time   timestamptz DEFAULT NULL)
RETURNS timestamptz
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN @extschema@._record_range(@extschema@._tracked_id(table_name), start_lsn, end_lsn, end_commit_time,
                                 inserts, updates, deletes, first_commit_time, last_commit_time,
                                 capture_instance, event, detail, event_periods, lateness_sketch,
                                 first_event_time, last_event_time);
COMMENT ON FUNCTION @extschema@.record_range(text, text, text, timestamptz, bigint, bigint, bigint,
                                             timestamptz, timestamptz, text, text, jsonb,
                                             jsonb, bytea, timestamptz, timestamptz) IS
    'Record the facts of one CDC range (start exclusive, end inclusive) and advance the verdict';

-- Removes facts older than the retention (finalize.facts_retention unless
-- given), and untracked tables with no facts left. The fact a table's offset
-- points at is kept, so the chain of ranges can always be checked.
CREATE OR REPLACE FUNCTION @extschema@.purge_facts(older_than interval DEFAULT NULL)
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
    -- Lateness sketches are kept as long as the lateness window that reads them.
    DELETE FROM @extschema@.lateness_hour h
     USING @extschema@.tracked_table t, @extschema@.watermark w
     WHERE t.table_id = h.table_id AND w.table_id = h.table_id
       AND h.hour < LEAST(now() - keep,
                          coalesce(@extschema@._instant_minus(w.commit_until, t.lateness_window), '-infinity'));
    DELETE FROM @extschema@.late_period l WHERE l.last_seen < now() - keep;
    -- never an incident whose resolution a webhook target has still to hear
    DELETE FROM @extschema@.alert a
     WHERE a.state = 'resolved' AND greatest(a.last_seen, a.resolved_at) < now() - keep
       AND NOT EXISTS (SELECT FROM @extschema@.alert_delivery d WHERE d.alert_id = a.alert_id AND d.state = 'pending');
    DELETE FROM @extschema@.tracked_table t
     WHERE t.untracked_at < now() - keep
       AND NOT EXISTS (SELECT FROM @extschema@.fact f WHERE f.table_id = t.table_id
                        AND f.recorded_at >= now() - keep);
    RETURN removed;
END
$$;
COMMENT ON FUNCTION @extschema@.purge_facts(interval) IS
    'Delete facts older than the retention (finalize.facts_retention by default); returns how many';

-- The release gate reads the facts of event-time tables per event period, and refuses
-- a partition that late rows landed in after its release, until a correction.
CREATE OR REPLACE FUNCTION @extschema@._period_facts(table_name text, period_start timestamptz)
RETURNS TABLE (facts jsonb, is_final boolean, covered boolean, exact boolean, changes bigint,
               straddling_ranges bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- An event-time table's partitions hold event periods: their facts are
    -- the rows per event period (with the late ones), not per commit time.
    IF (@extschema@._tracked(_period_facts.table_name)).event_time_column IS NOT NULL THEN
        RETURN QUERY
        SELECT jsonb_build_object('period_start', c.period_start, 'period_end', c.period_end,
                                  'is_final', c.is_final, 'covered', c.covered, 'exact', c.exact,
                                  'inserts', c.inserts, 'updates', c.updates, 'deletes', c.deletes,
                                  'late_rows', c.late_rows, 'partitioned_by', 'event_time'),
               c.is_final, c.covered, c.exact, c.inserts + c.updates + c.deletes, c.straddling_ranges
          FROM @extschema@.changes_by_event_period(_period_facts.table_name, _period_facts.period_start,
                                                   _period_facts.period_start + interval '1 microsecond') AS c
         LIMIT 1;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT jsonb_build_object('period_start', c.period_start, 'period_end', c.period_end,
                              'is_final', c.is_final, 'covered', c.covered, 'exact', c.exact,
                              'inserts', c.inserts, 'updates', c.updates, 'deletes', c.deletes,
                              'straddling_ranges', c.straddling_ranges),
           c.is_final, c.covered, c.exact, c.inserts + c.updates + c.deletes, c.straddling_ranges
      FROM @extschema@.changes_by_period(_period_facts.table_name, _period_facts.period_start,
                                         _period_facts.period_start + interval '1 microsecond') AS c
     LIMIT 1;
END
$$;

-- Why an event-time table's partition must not be released as it is, or
-- NULL: late rows landed in its period (after it was declared final), and
-- this generation does not say it was built after the last of them (the
-- manifest's built_at): a correction is due. Without built_at only a
-- period whose late rows all landed before its previous release passes:
-- that release's generation was checked against them.
CREATE FUNCTION @extschema@._late_data_problem(table_name text, partition text, period_start timestamptz,
                                               built_at timestamptz)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := @extschema@._tracked(table_name);
    lp @extschema@.late_period;
    pub @extschema@.published;
BEGIN
    IF tt.event_time_column IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT l.* INTO lp FROM @extschema@.late_period l
     WHERE l.table_id = tt.table_id AND l.event_period = @extschema@.period_start(period_start, tt.granularity);
    IF NOT FOUND OR built_at >= lp.last_seen THEN
        RETURN NULL;
    END IF;
    SELECT p.* INTO pub FROM @extschema@.published p
     WHERE p.table_id = tt.table_id AND p.partition = _late_data_problem.partition;
    IF built_at IS NULL AND FOUND AND pub.published_at >= lp.last_seen THEN
        RETURN NULL;
    END IF;
    RETURN format('%s late row(s) landed in this event period after it was declared final (the last at %s)%s: a correction is due. Write a generation that includes them and give "built_at" (when its data was read, at or after %s) in its manifest.',
                  lp.rows, lp.last_seen,
                  CASE WHEN built_at IS NOT NULL THEN format(', after this generation was built (%s)', built_at)
                       WHEN pub.generation IS NOT NULL
                       THEN format(', after generation "%s" was released (%s)', pub.generation, pub.published_at)
                       ELSE ', and this manifest does not say when its data was read' END,
                  lp.last_seen);
END
$$;


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
                                     'late_data', 'release_rejected', 'freshness')),
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
-- caller's transaction, so the incident commits with what raised it.
CREATE FUNCTION @extschema@._raise_alert(kind text, severity text, table_id bigint, server_name text,
                                         subject text, message text, detail jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    id bigint;
BEGIN
    INSERT INTO @extschema@.alert AS a (kind, severity, table_id, table_name, server_name, subject, message, detail)
    VALUES (_raise_alert.kind, _raise_alert.severity, _raise_alert.table_id,
            (SELECT t.table_name FROM @extschema@.tracked_table t WHERE t.table_id = _raise_alert.table_id),
            _raise_alert.server_name, coalesce(_raise_alert.subject, ''), _raise_alert.message, _raise_alert.detail)
    ON CONFLICT (kind, coalesce(table_name, ''), coalesce(server_name, ''), subject) WHERE state <> 'resolved'
    DO UPDATE SET last_seen = now(), count = a.count + 1, message = EXCLUDED.message, detail = EXCLUDED.detail,
                  severity = EXCLUDED.severity
    RETURNING a.alert_id INTO id;
    RETURN id;
END
$$;

-- Resolves the incident of a condition that cleared (none: nothing).
-- Returns how many it resolved.
CREATE FUNCTION @extschema@._resolve_alerts(kind text, table_id bigint, server_name text, subject text DEFAULT '')
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    n integer;
BEGIN
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.kind = _resolve_alerts.kind AND a.state <> 'resolved'
       AND coalesce(a.table_id, 0) = coalesce(_resolve_alerts.table_id, 0)
       AND coalesce(a.server_name, '') = coalesce(_resolve_alerts.server_name, '')
       AND a.subject = coalesce(_resolve_alerts.subject, '');
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- The body of finalize.acknowledge_alert, run as the extension's owner by
-- its C entry point (owner.c) with the caller taken before the switch.
CREATE FUNCTION @extschema@._acknowledge_alert(caller name, alert_id bigint, note text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    a @extschema@.alert;
BEGIN
    PERFORM @extschema@._require(alert_id, 'alert_id');
    PERFORM @extschema@._require(note, 'note');
    IF note !~ '\S' THEN
        RAISE EXCEPTION 'invalid value for argument note: it must say what is being done'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The note is kept with the incident, for example ''SQL Server login fixed, ticket OPS-42''.';
    END IF;
    SELECT x.* INTO a FROM @extschema@.alert x WHERE x.alert_id = _acknowledge_alert.alert_id FOR UPDATE;
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

CREATE FUNCTION @extschema@.acknowledge_alert(alert_id bigint, note text)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.acknowledge_alert(bigint, text) IS
    'Say that a person handles an open incident; it stays acknowledged until its condition clears';

-- The incidents, newest first, for people and dashboards.
CREATE VIEW @extschema@.alerts AS
SELECT a.alert_id, a.kind, a.severity, coalesce(t.table_name, a.table_name) AS table_name, a.server_name,
       a.subject, a.state, a.opened_at, a.last_seen, a.count, a.message, a.detail, a.resolved_at,
       a.acknowledged_at, a.acknowledged_by, a.acknowledge_note, a.dedup_key
  FROM @extschema@.alert a
  LEFT JOIN @extschema@.tracked_table t ON t.table_id = a.table_id
 ORDER BY a.alert_id DESC;
COMMENT ON VIEW @extschema@.alerts IS
    'Incidents: what froze or endangered a verdict, since when, how often, and whether it was resolved or acknowledged';

-- finalize.alert_after as an interval without days.
CREATE FUNCTION @extschema@._alert_after()
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
CREATE FUNCTION @extschema@._source_alerts(server_name text, condition text, message text, since timestamptz)
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
    -- one statement, through the index of open incidents: it runs every cycle
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.kind = ANY (kinds) AND a.kind IS DISTINCT FROM condition AND a.state <> 'resolved'
       AND coalesce(a.table_id, 0) = 0 AND coalesce(a.server_name, '') = coalesce(_source_alerts.server_name, '')
       AND a.subject = '';
    IF condition = ANY (kinds)
       AND (condition IN ('timezone_mismatch', 'clock_skew', 'commit_time_ahead', 'capture_stalled')
            OR since <= now() - @extschema@._alert_after()) THEN
        PERFORM @extschema@._raise_alert(condition,
                                         CASE WHEN condition = 'capture_stalled' THEN 'warning' ELSE 'critical' END,
                                         NULL, server_name, '',
                                         coalesce(message, format('Source "%s": %s.', server_name, condition)),
                                         jsonb_build_object('since', @extschema@._utc_iso(since)));
    END IF;
END
$$;

-- The incidents of a table's condition (_set_condition): one opens once
-- the condition has lasted finalize.alert_after; a cleared or changed
-- condition resolves the others.
CREATE FUNCTION @extschema@._table_alerts(table_id bigint, condition text, message text, since timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    kinds text[] := ARRAY['no_access', 'read_failed', 'record_failed', 'lock_timeout', 'lsn_regressed',
                          'no_capture_instance', 'source_replaced', 'event_column_invalid'];
    server text := (SELECT t.server_name FROM @extschema@.tracked_table t WHERE t.table_id = _table_alerts.table_id);
BEGIN
    -- one statement, through the index of open incidents: it runs every cycle
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.kind = ANY (kinds) AND a.kind IS DISTINCT FROM condition AND a.state <> 'resolved'
       AND coalesce(a.table_id, 0) = coalesce(_table_alerts.table_id, 0)
       AND coalesce(a.server_name, '') = coalesce(server, '') AND a.subject = '';
    IF condition = ANY (kinds) AND since <= now() - @extschema@._alert_after() THEN
        PERFORM @extschema@._raise_alert(condition, CASE WHEN condition = 'lock_timeout' THEN 'warning' ELSE 'critical' END,
                                         table_id, server, '', coalesce(message, condition),
                                         jsonb_build_object('since', @extschema@._utc_iso(since)));
    END IF;
END
$$;

-- Alert delivery (docs/design/alerts.md): the incidents of release
-- rejections and freshness SLAs, webhook targets, and the queue the
-- "finalize alerts" background worker drains. After the gate's part, since
-- a release that was refused opens an incident.

-- A release that was refused is an informational incident of its
-- partition; the next released generation resolves it, and the late_data
-- incident of its period. Runs in the gate's transaction, as the
-- extension's owner (who records releases); rows a restore brings back are
-- not attempts of now and change nothing.
CREATE FUNCTION @extschema@._release_alert()
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
        PERFORM @extschema@._resolve_alerts('release_rejected', NEW.table_id, NULL, NEW.partition);
        -- The gate released the period only with a build after its late
        -- rows (problem late_data): the correction they called for is out.
        UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
         WHERE a.kind = 'late_data' AND a.table_id = NEW.table_id AND a.state <> 'resolved'
           AND NEW.period_start IS NOT NULL AND a.subject = @extschema@._utc_iso(NEW.period_start);
        RETURN NULL;
    END IF;
    SELECT string_agg(format('%s %s', c.n, c.code), ', ' ORDER BY c.n DESC, c.code) INTO codes
      FROM (SELECT p->>'code' AS code, count(*) AS n
              FROM jsonb_array_elements(CASE jsonb_typeof(NEW.problems) WHEN 'array' THEN NEW.problems
                                             ELSE '[]'::jsonb END) AS p
             GROUP BY 1) c;
    PERFORM @extschema@._raise_alert(
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

CREATE TRIGGER release_alert AFTER INSERT ON @extschema@.release
    FOR EACH ROW EXECUTE FUNCTION @extschema@._release_alert();

-- The freshness SLA of every table that has one (tracked_table.max_lag),
-- run by the scheduler each round: a table whose verdict lags now() by more
-- than its max_lag opens one incident (refreshed at most once a minute
-- while it lasts); one back within, untracked, or without an SLA any more
-- is resolved. A table without a verdict yet lags from when it was
-- tracked. Returns how many tables are over their SLA.
CREATE FUNCTION @extschema@._check_freshness()
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
                              AND now() - coalesce(w.finalized_until, t.created_at) > t.max_lag)
           FOR UPDATE SKIP LOCKED);
    FOR r IN
        SELECT t.table_id, t.table_name, t.server_name, t.max_lag, w.finalized_until,
               make_interval(secs => floor(extract(epoch FROM now() - coalesce(w.finalized_until, t.created_at))))
                   AS lag,
               (SELECT a.alert_id FROM @extschema@.alert a
                 WHERE a.kind = 'freshness' AND a.table_id = t.table_id AND a.state <> 'resolved') AS open_id,
               (SELECT a.last_seen FROM @extschema@.alert a
                 WHERE a.kind = 'freshness' AND a.table_id = t.table_id AND a.state <> 'resolved') AS seen
          FROM @extschema@.tracked_table t
          JOIN @extschema@.watermark w ON w.table_id = t.table_id
         WHERE t.untracked_at IS NULL AND t.max_lag IS NOT NULL
           AND now() - coalesce(w.finalized_until, t.created_at) > t.max_lag
    LOOP
        n := n + 1;
        CONTINUE WHEN r.seen > now() - interval '1 minute';
        msg := CASE WHEN r.finalized_until IS NULL
                 THEN format('Table "%s" has no verdict %s after it was tracked; its freshness SLA (max_lag) is %s.',
                             r.table_name, r.lag, r.max_lag)
                 ELSE format('Table "%s" is final only until %s, %s ago; its freshness SLA (max_lag) is %s.',
                             r.table_name, @extschema@._utc_iso(r.finalized_until),
                             r.lag, r.max_lag) END;
        detail := jsonb_build_object('finalized_until', @extschema@._utc_iso(r.finalized_until),
                                     'lag_seconds', floor(extract(epoch FROM r.lag)),
                                     'max_lag_seconds', extract(epoch FROM r.max_lag));
        IF r.open_id IS NULL THEN
            PERFORM @extschema@._raise_alert('freshness', 'warning', r.table_id, r.server_name, '', msg, detail);
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
-- again or its tables are untracked. Returns how many sources are so.
CREATE FUNCTION @extschema@._check_dropped_sources()
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    n integer := 0;
    msg text;
BEGIN
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
        PERFORM @extschema@._raise_alert('server_dropped', 'critical', NULL, r.server_name, '', msg,
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
CREATE FUNCTION @extschema@._webhook_validator(options text[], catalog oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_webhook_validator'
LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER finalize_webhook
    VALIDATOR @extschema@._webhook_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_webhook IS
    'Webhook targets the finalize alerts worker delivers incidents to (json, slack, pagerduty_v2, opsgenie)';
GRANT USAGE ON FOREIGN DATA WRAPPER finalize_webhook TO finalize_admin;

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

-- The webhook targets: foreign servers of finalize_webhook with their
-- options (never the user mapping's secrets).
CREATE FUNCTION @extschema@._alert_targets()
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
CREATE FUNCTION @extschema@._severity_rank(severity text)
RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN CASE severity WHEN 'info' THEN 1 WHEN 'warning' THEN 2 WHEN 'critical' THEN 3 END;

-- The documented body of the json format: the incident at one transition.
-- dedup_key names the incident (PagerDuty's dedup_key, Opsgenie's alias);
-- idempotency_key names the transition.
CREATE FUNCTION @extschema@._alert_event(a @extschema@.alert, transition text)
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
            'message', (a).message, 'detail', (a).detail, 'count', (a).count,
            'opened_at', @extschema@._utc_iso((a).opened_at), 'last_seen', @extschema@._utc_iso((a).last_seen),
            'resolved_at', @extschema@._utc_iso((a).resolved_at),
            'acknowledged_at', @extschema@._utc_iso((a).acknowledged_at),
            'acknowledged_by', (a).acknowledged_by, 'acknowledge_note', (a).acknowledge_note));
END;

-- Wakes the alerts worker once the transaction that queued deliveries
-- commits (a no-op without one).
CREATE FUNCTION @extschema@._wake_alert_delivery()
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_wake_alert_delivery'
LANGUAGE C VOLATILE;

-- Queues the deliveries of an incident's transition: its opening to every
-- target whose min_severity it reaches; its acknowledgement and its
-- resolution to the targets that were told it opened (a target created
-- later hears of the next incident, never of a resolution alone). An
-- incident born resolved (informational) opens and resolves at once.
CREATE FUNCTION @extschema@._queue_alert_delivery()
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
               @extschema@._severity_rank(NEW.severity)
          FROM @extschema@._alert_targets() t,
               LATERAL (SELECT @extschema@._alert_event(NEW, tr) AS event) e
         WHERE CASE WHEN tr = 'open'
                    THEN @extschema@._severity_rank(NEW.severity) >= @extschema@._severity_rank(t.min_severity)
                    ELSE EXISTS (SELECT FROM @extschema@.alert_delivery d
                                  WHERE d.alert_id = NEW.alert_id AND d.target_name = t.target_name
                                    AND d.transition = 'open') END
        ON CONFLICT (target_name, idempotency_key) DO NOTHING;
        GET DIAGNOSTICS k = ROW_COUNT;
        n := n + k;
    END LOOP;
    IF n > 0 THEN
        PERFORM @extschema@._wake_alert_delivery();
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER alert_delivery_queue AFTER INSERT OR UPDATE OF state ON @extschema@.alert
    FOR EACH ROW EXECUTE FUNCTION @extschema@._queue_alert_delivery();

-- The deliveries the alerts worker may send, and from when: pending, not
-- in flight, every earlier transition of the incident to that target
-- settled (a resolution never overtakes its opening), due at their
-- next_attempt or when their target's breaker lets a probe through.
CREATE FUNCTION @extschema@._claimable_deliveries()
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
CREATE FUNCTION @extschema@._claim_delivery()
RETURNS TABLE (delivery_id bigint, target_name text, event jsonb, attempts integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH due AS (
        SELECT d.delivery_id
          FROM @extschema@._claimable_deliveries() c
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
CREATE FUNCTION @extschema@._next_delivery()
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT min(c.due) FROM @extschema@._claimable_deliveries() c;
END;

-- Records the outcome of one attempt. Delivered: the target's breaker
-- closes. Failed: the breaker counts it; the delivery is retried after
-- an exponential backoff with jitter (1 s doubling to 10 minutes, at
-- least the target's Retry-After), or fails for good when the answer
-- cannot change (permanent) or retry_limit attempts were made; one that
-- never reached its target (target_answered false: dropped, renamed, or
-- no request could be built) fails at once without touching the breaker.
CREATE FUNCTION @extschema@._delivery_result(delivery_id bigint, delivered boolean, http_status integer,
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
    SELECT x.* INTO d FROM @extschema@.alert_delivery x WHERE x.delivery_id = _delivery_result.delivery_id FOR UPDATE;
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
CREATE FUNCTION @extschema@._release_claims()
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    UPDATE @extschema@.alert_delivery d SET claimed_at = NULL WHERE d.state = 'pending' AND d.claimed_at IS NOT NULL;
END;

-- The request a delivery sends (format, URL, event, secrets as jsonb):
-- what the alerts worker builds, for tests. Not granted: its headers hold
-- the secrets.
CREATE FUNCTION @extschema@._alert_request(format text, url text, event jsonb, secrets jsonb,
                                           OUT request_url text, OUT headers text[], OUT body text)
RETURNS record
AS 'MODULE_PATHNAME', 'finalize_alert_request'
LANGUAGE C STABLE STRICT;

-- Deliveries per incident and target, for people: attempts, the last HTTP
-- status and error, and the target's breaker.
CREATE VIEW @extschema@.alert_deliveries AS
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

-- 8. finalize.wait_final: sensors that wait rather than poll. Kept equal
-- to their parts (03_tables.sql, 10_sensor.sql).
-- Waiters of finalize.wait_final sleep until a commit wakes them: a verdict
-- that moves (finalized_until or loss_blocked) wakes only the waiters of its
-- table's shard (verdict_cache.c); any other change above wakes them all.
CREATE FUNCTION @extschema@._verdict_wake()
RETURNS trigger
AS 'MODULE_PATHNAME', 'finalize_verdict_wake'
LANGUAGE C;
CREATE TRIGGER verdict_wake
    AFTER UPDATE OF finalized_until, loss_blocked ON @extschema@.watermark
    FOR EACH ROW
    WHEN (OLD.finalized_until IS DISTINCT FROM NEW.finalized_until
          OR OLD.loss_blocked IS DISTINCT FROM NEW.loss_blocked)
    EXECUTE FUNCTION @extschema@._verdict_wake();

-- is_final that waits: true as soon as the period is final, false once
-- timeout has passed (interval '0' checks once). It sleeps on a condition
-- variable that commits moving a verdict wake, holding no lock and no
-- snapshot of its own while it sleeps (each check runs in a subtransaction
-- that is rolled back); the calling statement's snapshot stays, as for any
-- statement that runs, so keep timeouts bounded. READ COMMITTED only.
-- VOLATILE and PARALLEL UNSAFE: it waits, and checks in subtransactions.
CREATE FUNCTION @extschema@.wait_final(table_name text, period_start timestamptz,
                                       timeout interval DEFAULT '1 hour')
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_wait_final'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.wait_final(text, timestamptz, interval) IS
    'Waits until is_final(table_name, period_start) is true (returns true) or timeout has passed (returns false); READ COMMITTED only';

CREATE FUNCTION @extschema@.wait_final(table_names text[], period_start timestamptz,
                                       timeout interval DEFAULT '1 hour')
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_wait_final_all'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.wait_final(text[], timestamptz, interval) IS
    'Waits until the period containing period_start is final in every one of the tables (true) or timeout has passed (false)';

-- Late copies of functions 0.1.0 had (alerts): kept equal to their parts.
CREATE OR REPLACE FUNCTION @extschema@._set_condition(table_id bigint, condition text, detail text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    IF condition IS NULL THEN
        DELETE FROM @extschema@.table_condition c WHERE c.table_id = _set_condition.table_id;
        PERFORM @extschema@._table_alerts(_set_condition.table_id, NULL, NULL, NULL);
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
    PERFORM @extschema@._table_alerts(c.table_id, c.condition, c.detail, c.since)
       FROM @extschema@.table_condition c WHERE c.table_id = _set_condition.table_id;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@._source_ok(
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
    PERFORM @extschema@._source_alerts(server_name, condition, message,
                                       (SELECT s.condition_since FROM @extschema@.source_status s
                                         WHERE s.server_name = _source_ok.server_name));
END
$$;

CREATE OR REPLACE FUNCTION @extschema@._source_failed(
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
    PERFORM @extschema@._source_alerts(server_name, condition, error,
                                       (SELECT s.condition_since FROM @extschema@.source_status s
                                         WHERE s.server_name = _source_failed.server_name));
END
$$;

CREATE OR REPLACE FUNCTION @extschema@._record_event(
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
        PERFORM @extschema@._raise_alert(event, 'critical', tt.table_id, tt.server_name, '',
                                         coalesce(state_detail,
                                                  format('Changes of table "%s" from LSN %s to %s were lost before finalize read them (%s); the periods they touch are not final until finalize.acknowledge_loss() covers them.',
                                                         tt.table_name, coalesce(detail ->> 'lost_from_lsn', start_lsn),
                                                         coalesce(detail ->> 'lost_to_lsn', end_lsn),
                                                         coalesce(detail ->> 'cause', event))),
                                         detail);
    END IF;
END
$$;

-- A release attempt's full report: the stored one with the manifest's files
-- and the listing put back (rebuilt from the manifest and listing_delta).
CREATE FUNCTION @extschema@.release_report(release_id bigint)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'finalize_release_report'
LANGUAGE C STABLE STRICT
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.release_report(bigint) IS
    'The full report of a release attempt: manifest files, listing, catalog view, facts and problems';

-- Late copies for set-based recording (issue 16): kept equal to their parts.
-- The payload of an advance on channel "finalize": the table, the old and
-- new verdicts, the offset of its facts (LSN and commit time, null for a
-- derived table), and "kind": "derived" for a derived table only, so that a
-- tracked table's payload stays what it always was. In C (thousands of
-- advances in one statement), in json_build_object's layout.
CREATE OR REPLACE FUNCTION @extschema@._advance_payload(table_name text, kind text, old_until timestamptz,
                                             new_until timestamptz, offset_lsn text,
                                             offset_commit_time timestamptz)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_advance_payload'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- The verdict each of some tables may have now: the least of its source
-- verdict (watermark.source_until) and its required consumers' verdicts, or
-- NULL (no advance) when any of them is NULL: a consumer that has not
-- reported holds everything. One query for many tables, so that a worker
-- cycle over thousands of tables (_advance_sources) and _advance for one
-- share the rule.
CREATE FUNCTION @extschema@._effective_untils(table_ids bigint[])
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
      FROM (SELECT DISTINCT i.id FROM unnest(_effective_untils.table_ids) AS i(id)) i
      JOIN @extschema@.tracked_table t ON t.table_id = i.id
      JOIN @extschema@.watermark w ON w.table_id = t.table_id
     CROSS JOIN LATERAL (SELECT bool_or(x.until IS NULL) AS unreported, min(x.until) AS least_until
                           FROM @extschema@.consumer rc
                          CROSS JOIN LATERAL (SELECT @extschema@._consumer_until(t.kind, t.granularity, rc.commit_time,
                                                                                rc.processed_until) AS until) x
                          WHERE rc.table_id = t.table_id AND rc.required) c;
END;

-- _advance for source tables partitioned by commit time, many at once (a
-- worker's cycle records thousands of tables in one transaction): each
-- verdict, which the caller has locked, moves commit_until to the greatest
-- of its old value and _effective_untils, then finalized_until likewise,
-- with a NOTIFY on channel "finalize" for each one that moved. Returns the
-- tables whose finalized_until moved: the caller lets their derived tables
-- follow. Other tables (derived, event-time) are left alone.
CREATE FUNCTION @extschema@._advance_sources(table_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    WITH cur AS (
        SELECT t.table_id, t AS tt, w AS wm, GREATEST(w.commit_until, e.until) AS new_commit
          FROM @extschema@._effective_untils(table_ids) e
          JOIN @extschema@.tracked_table t ON t.table_id = e.table_id
          JOIN @extschema@.watermark w ON w.table_id = t.table_id
         WHERE t.kind = 'source' AND t.event_time_column IS NULL),
    moved AS (
        UPDATE @extschema@.watermark w
           SET commit_until = c.new_commit,
               finalized_until = GREATEST(w.finalized_until, c.new_commit),
               advanced_at = CASE WHEN GREATEST(w.finalized_until, c.new_commit) IS DISTINCT FROM w.finalized_until
                                  THEN now() ELSE w.advanced_at END
          FROM cur c
         WHERE w.table_id = c.table_id
           AND (c.new_commit IS DISTINCT FROM w.commit_until
                OR GREATEST(w.finalized_until, c.new_commit) IS DISTINCT FROM w.finalized_until)
        RETURNING w.table_id, c.tt, c.wm, w.finalized_until AS new_until),
    advanced AS (
        SELECT m.* FROM moved m WHERE m.new_until IS DISTINCT FROM (m.wm).finalized_until)
    SELECT a.table_id
      FROM advanced a
     CROSS JOIN LATERAL pg_catalog.pg_notify('finalize',
                            @extschema@._advance_payload((a.tt).table_name, (a.tt).kind, (a.wm).finalized_until,
                                                         a.new_until, (a.wm).offset_lsn,
                                                         (a.wm).offset_commit_time)) n
     ORDER BY a.table_id;
END
$$;

-- Lets the derived tables that use any of the given tables follow them,
-- each once, in table order: _advance without waiting, so that an input's
-- advance never waits for a pipeline's open transaction (the worker's
-- _refresh_derived catches a skipped one up next cycle). The one loop of
-- _advance and _record_ranges.
CREATE FUNCTION @extschema@._advance_dependents(input_ids bigint[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dependent bigint;
BEGIN
    FOR dependent IN SELECT DISTINCT d.table_id FROM @extschema@.derived_input d
                       JOIN @extschema@.tracked_table t ON t.table_id = d.table_id
                      WHERE d.input_id = ANY (input_ids) AND t.untracked_at IS NULL
                      ORDER BY d.table_id LOOP
        PERFORM @extschema@._advance(dependent, false);
    END LOOP;
END
$$;

-- The one function that moves a verdict: locks the table's verdict, takes a
-- derived table's source verdict from its inputs, moves the commit-time
-- verdict commit_until to the greatest of its old value and
-- _effective_untils, then finalized_until to the greatest of its old value
-- and that (on an event-time table: the event-time verdict _event_until
-- draws from it, held by losses as _loss_cap says in event time), with a NOTIFY on
-- channel "finalize" when it moved, and lets every derived table that uses
-- this one follow in the same transaction. The inputs form a DAG
-- (track_derived refuses cycles), so the recursion ends. A derived table
-- whose verdict another transaction holds is skipped (wait false): an input's
-- advance never waits for a pipeline's open transaction, nor two sources'
-- workers for each other; the worker's _refresh_derived catches it up on the
-- next cycle. Returns finalized_until, NULL for a table no longer tracked
-- (or skipped).
CREATE OR REPLACE FUNCTION @extschema@._advance(table_id bigint, wait boolean DEFAULT true)
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := CASE WHEN wait THEN @extschema@._lock_tracked(table_id, false)
                                         ELSE @extschema@._try_lock_tracked(table_id) END;
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
        moved := EXISTS (SELECT FROM @extschema@._advance_sources(ARRAY[tt.table_id]));
        -- run on every call (for no table when nothing moved): its plan is
        -- made at the first call, not at the first advance hours later
        PERFORM @extschema@._advance_dependents(CASE WHEN moved THEN ARRAY[tt.table_id] ELSE '{}' END);
        RETURN (SELECT w.finalized_until FROM @extschema@.watermark w WHERE w.table_id = tt.table_id);
    END IF;
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    IF tt.kind = 'derived' THEN
        from_inputs := @extschema@._inputs_until(tt.table_id, tt.granularity);
        IF from_inputs > coalesce(wm.source_until, '-infinity') THEN
            UPDATE @extschema@.watermark w SET source_until = from_inputs WHERE w.table_id = tt.table_id;
            wm.source_until := from_inputs;
        END IF;
    END IF;
    new_commit := GREATEST(wm.commit_until,
                           (SELECT e.until FROM @extschema@._effective_untils(ARRAY[tt.table_id]) e));
    IF tt.event_time_column IS NULL THEN
        new_until := GREATEST(wm.finalized_until, new_commit);
    ELSE
        -- The event-time verdict, held by losses (whose spans are event times
        -- on an event-time table, see _record_loss).
        ev := @extschema@._event_until(tt, new_commit);
        -- A loss holds the event times its rows may have under the
        -- allowance: when the allowance grows (or becomes known), its start
        -- reaches further back, never into periods already final.
        IF ev.allowance IS NOT NULL AND ev.allowance > coalesce(wm.event_allowance, interval '0')
           AND EXISTS (SELECT FROM @extschema@.loss l WHERE l.table_id = tt.table_id AND l.commit_from IS NOT NULL) THEN
            UPDATE @extschema@.loss l
               SET lost_from = GREATEST(coalesce(@extschema@._instant_minus(l.commit_from, ev.allowance), '-infinity'),
                                        coalesce(wm.finalized_until, '-infinity'))
             WHERE l.table_id = tt.table_id AND l.commit_from IS NOT NULL
               AND GREATEST(coalesce(@extschema@._instant_minus(l.commit_from, ev.allowance), '-infinity'),
                            coalesce(wm.finalized_until, '-infinity')) < l.lost_from;
            IF FOUND THEN
                PERFORM @extschema@._refresh_loss_blocked(tt.table_id);
                SELECT w.loss_blocked INTO wm.loss_blocked FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
            END IF;
        END IF;
        IF wm.loss_blocked AND ev.until IS NOT NULL THEN
            cap := @extschema@._loss_cap(tt.table_id);
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
        RETURN new_until;
    END IF;
    UPDATE @extschema@.watermark w SET finalized_until = new_until, advanced_at = now()
     WHERE w.table_id = tt.table_id;
    PERFORM pg_notify('finalize', @extschema@._advance_payload(tt.table_name, tt.kind, wm.finalized_until, new_until,
                                                               wm.offset_lsn, wm.offset_commit_time));
    PERFORM @extschema@._advance_dependents(ARRAY[tt.table_id]);
    RETURN new_until;
END
$$;

-- Stores the facts of checked ranges that chain onto the facts of their
-- tables (one range per table) and returns their ids. Consecutive empty
-- ranges coalesce into one fact, so an idle table keeps a bounded number of
-- rows; any other range is a fact of its own (the first one, without start,
-- marks where tracking started). One statement for a worker's whole cycle
-- (_record_ranges) or one range (_store_range_fact).
CREATE FUNCTION @extschema@._store_range_facts(
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
        SELECT * FROM unnest(_store_range_facts.table_ids, _store_range_facts.starts, _store_range_facts.ends,
                             _store_range_facts.end_commit_times, _store_range_facts.inserts,
                             _store_range_facts.updates, _store_range_facts.deletes,
                             _store_range_facts.first_commit_times, _store_range_facts.last_commit_times,
                             _store_range_facts.capture_instances, _store_range_facts.events,
                             _store_range_facts.details)
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
CREATE OR REPLACE FUNCTION @extschema@._store_range_fact(
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
      FROM @extschema@._store_range_facts(ARRAY[_store_range_fact.table_id], ARRAY[s], ARRAY[e],
                                          ARRAY[end_commit_time], ARRAY[inserts], ARRAY[updates],
                                          ARRAY[deletes], ARRAY[first_commit_time], ARRAY[last_commit_time],
                                          ARRAY[capture_instance], ARRAY[event], ARRAY[detail]) f;
END;

-- Moves the offsets of tables whose ranges were just stored to the ends of
-- those ranges, and their source verdicts to the periods those ends' commit
-- times start (never back): the step of the write path between the fact and
-- the verdict, for one table or a cycle's many.
CREATE FUNCTION @extschema@._store_offsets(table_ids bigint[], ends @extschema@.lsn[], end_commit_times timestamptz[])
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    UPDATE @extschema@.watermark w
       SET source_until = GREATEST(w.source_until, @extschema@.period_start(r.end_time, t.granularity)),
           offset_lsn = r.e,
           offset_commit_time = r.end_time,
           recorded_at = now()
      FROM unnest(_store_offsets.table_ids, _store_offsets.ends, _store_offsets.end_commit_times)
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
-- allow, all in the caller's transaction.
CREATE OR REPLACE FUNCTION @extschema@._record_range(
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
    last_event_time   timestamptz)
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
    fid   bigint;
BEGIN
    tt := @extschema@._check_range_args(_record_range.table_id, s, e, end_commit_time, inserts, updates, deletes,
                                        first_commit_time, last_commit_time, event);
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    IF @extschema@._check_range_chain(tt, wm.offset_lsn, s, e, inserts, updates, deletes,
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
    fid := @extschema@._store_range_fact(tt.table_id, s, e, end_commit_time, inserts, updates, deletes,
                                         first_commit_time, last_commit_time, capture_instance, event, detail);
    -- A schema change the verdict went on across (ddl_policy warn) is an
    -- incident for the record: informational, born resolved.
    IF event = 'schema_change' THEN
        PERFORM @extschema@._raise_alert('schema_change', 'info', tt.table_id, tt.server_name, '',
                                         format('Table "%s": %s', tt.table_name,
                                                coalesce(detail ->> 'summary', 'a schema change was recorded')),
                                         detail);
        PERFORM @extschema@._resolve_alerts('schema_change', tt.table_id, tt.server_name);
    END IF;
    IF tt.event_time_column IS NOT NULL AND inserts + updates + deletes > 0 THEN
        UPDATE @extschema@.fact f
           SET sketch = lateness_sketch, first_event_time = _record_range.first_event_time,
               last_event_time = _record_range.last_event_time
         WHERE f.fact_id = fid;
        -- Late data is judged against the event-time verdict before this range moves it.
        PERFORM @extschema@._store_event_facts(tt, fid, event_periods, lateness_sketch, end_commit_time, e,
                                               wm.finalized_until);
    END IF;

    PERFORM @extschema@._store_offsets(ARRAY[tt.table_id], ARRAY[e], ARRAY[end_commit_time]);
    RETURN @extschema@._advance(tt.table_id);
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
-- stores it (_store_range_facts, _store_offsets, _advance_sources), in the
-- caller's transaction. Returns the table ids left to the caller.
CREATE FUNCTION @extschema@._record_ranges(
    table_ids          bigint[],
    start_lsns         text[],
    end_lsns           text[],
    end_commit_times   timestamptz[],
    inserts            bigint[],
    updates            bigint[],
    deletes            bigint[],
    first_commit_times timestamptz[],
    last_commit_times  timestamptz[],
    capture_instances  text[])
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    horizon timestamptz := clock_timestamp() + @extschema@._max_clock_skew();
    locked  bigint[];
    ok      record;
    moved   bigint[];
BEGIN
    -- The tables' rows, then their verdicts, in the order _lock_tracked
    -- takes them; a row another session holds is left to _record_range,
    -- which waits for it (finalize.lock_timeout) and says so.
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
      LEFT JOIN (SELECT DISTINCT h.h FROM @extschema@._held_conditions(table_ids) AS h(h)) held
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
        PERFORM @extschema@._store_range_facts(ok.ids, ok.s, ok.e, ok.end_time, ok.ins, ok.upd, ok.del,
                                               ok.first_time, ok.last_time, ok.ci,
                                               pg_catalog.array_fill(NULL::text, ARRAY[pg_catalog.cardinality(ok.ids)]),
                                               pg_catalog.array_fill(NULL::jsonb, ARRAY[pg_catalog.cardinality(ok.ids)]));
        PERFORM @extschema@._store_offsets(ok.ids, ok.e, ok.end_time);
        moved := ARRAY(SELECT @extschema@._advance_sources(ok.ids));
    END IF;
    -- on every call, for no table when nothing moved: its plan is made at
    -- the first cycle, not at the first advance (a worker's memory stays flat)
    PERFORM @extschema@._advance_dependents(coalesce(moved, '{}'));
    RETURN QUERY SELECT u.x FROM unnest(table_ids) AS u(x)
                  LEFT JOIN unnest(ok.ids) AS k(x) ON k.x = u.x
                 WHERE k.x IS NULL;
END
$$;

-- The incident kinds of a table's conditions: what _set_condition opens
-- and resolves (the other table incidents, such as freshness, late_data or
-- release_rejected, have their own lives).
CREATE FUNCTION @extschema@._condition_alert_kinds()
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN ARRAY['no_access', 'read_failed', 'record_failed', 'lock_timeout', 'lsn_regressed',
             'no_capture_instance', 'source_replaced', 'event_column_invalid'];

-- Of some tables, those with a condition or an open incident of one: the
-- worker clears the condition of every table it read (_set_condition), and
-- a cycle over thousands of idle tables needs no write for the others.
CREATE FUNCTION @extschema@._held_conditions(table_ids bigint[])
RETURNS SETOF bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT c.table_id FROM @extschema@.table_condition c WHERE c.table_id = ANY (_held_conditions.table_ids)
    UNION
    SELECT a.table_id FROM @extschema@.alert a
     WHERE a.table_id = ANY (_held_conditions.table_ids) AND a.state <> 'resolved' AND a.subject = ''
       AND a.kind = ANY (@extschema@._condition_alert_kinds());
END;

-- The incidents of a table's condition (_set_condition): one opens once
-- the condition has lasted finalize.alert_after; a cleared or changed
-- condition resolves the others.
CREATE OR REPLACE FUNCTION @extschema@._table_alerts(table_id bigint, condition text, message text, since timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    kinds text[] := @extschema@._condition_alert_kinds();
    server text := (SELECT t.server_name FROM @extschema@.tracked_table t WHERE t.table_id = _table_alerts.table_id);
BEGIN
    -- one statement, through the index of open incidents: it runs every cycle
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.kind = ANY (kinds) AND a.kind IS DISTINCT FROM condition AND a.state <> 'resolved'
       AND coalesce(a.table_id, 0) = coalesce(_table_alerts.table_id, 0)
       AND coalesce(a.server_name, '') = coalesce(server, '') AND a.subject = '';
    IF condition = ANY (kinds) AND since <= now() - @extschema@._alert_after() THEN
        PERFORM @extschema@._raise_alert(condition, CASE WHEN condition = 'lock_timeout' THEN 'warning' ELSE 'critical' END,
                                         table_id, server, '', coalesce(message, condition),
                                         jsonb_build_object('since', @extschema@._utc_iso(since)));
    END IF;
END
$$;

-- A cycle that read the source: what it saw. condition is ok, or
-- capture_stalled (with a message) when the commit time of max LSN lags
-- SQL Server's clock by more than the source's threshold; entering and
-- leaving that condition sends an alert.
CREATE OR REPLACE FUNCTION @extschema@._source_ok(
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
    took interval := clock_timestamp() - cycle_started;
BEGIN
    SELECT s.condition INTO previous FROM @extschema@.source_status s
     WHERE s.server_name = _source_ok.server_name FOR UPDATE;
    INSERT INTO @extschema@.source_status AS s
        (server_name, worker_pid, condition, condition_since, last_poll, last_success, failures, cycles,
         next_attempt, max_lsn, max_lsn_time, max_lsn_changed, server_time, clock_skew, last_error, last_error_at,
         cycle_time)
    VALUES (_source_ok.server_name, _source_ok.worker_pid, condition, now(), now(), now(), 0, 1,
            NULL, _source_ok.max_lsn, _source_ok.max_lsn_time, now(), _source_ok.server_time,
            _source_ok.server_time - now(), message, CASE WHEN message IS NOT NULL THEN now() END, took)
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
           cycle_time = excluded.cycle_time;
    IF condition = 'capture_stalled' AND previous IS DISTINCT FROM 'capture_stalled' THEN
        PERFORM @extschema@._alert(jsonb_build_object('alert', 'capture_stalled', 'server', server_name,
            'max_lsn', max_lsn, 'max_lsn_time', max_lsn_time, 'server_time', server_time, 'detail', message));
    ELSIF condition = 'ok' AND previous = 'capture_stalled' THEN
        PERFORM @extschema@._alert(jsonb_build_object('alert', 'capture_resumed', 'server', server_name,
            'max_lsn', max_lsn, 'max_lsn_time', max_lsn_time));
    END IF;
    PERFORM @extschema@._source_alerts(server_name, condition, message,
                                       (SELECT s.condition_since FROM @extschema@.source_status s
                                         WHERE s.server_name = _source_ok.server_name));
END
$$;

DROP FUNCTION @extschema@._effective_until(@extschema@.tracked_table, timestamptz);
DROP FUNCTION @extschema@._advance_payload(@extschema@.tracked_table, @extschema@.watermark, timestamptz);
DROP FUNCTION @extschema@._source_ok(text, integer, text, timestamptz, timestamptz, text, text);

-- End of late copies for set-based recording.
-- End of late copies.
REVOKE ALL ON ALL SEQUENCES IN SCHEMA @extschema@ FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA @extschema@ FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.release_report(bigint) TO finalize_admin;
GRANT EXECUTE ON FUNCTION
    @extschema@.track_table(text, text, text, interval, text, text, text,
                            text, text, text, interval, double precision, interval),
    @extschema@.alter_tracked_table(text, interval, text, text, text, text, text, interval,
                                    double precision, interval, interval),
    @extschema@.record_range(text, text, text, timestamptz, bigint, bigint, bigint,
                             timestamptz, timestamptz, text, text, jsonb,
                             jsonb, bytea, timestamptz, timestamptz)
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
-- Sensors that wait: granted as is_final is.
GRANT EXECUTE ON FUNCTION
    @extschema@.wait_final(text, timestamptz, interval),
    @extschema@.wait_final(text[], timestamptz, interval)
    TO finalize_reader;

-- Statistics for the extension's tables (new ones are empty). A table never
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

-- Last: objects this script created belong to whoever ran it. Hand them to
-- the extension's owner, as a fresh install has them: a role that ran the
-- update must not own code that the owner's functions run.
DO $owner$
DECLARE
    ext oid := (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'finalize');
    owner oid := (SELECT e.extowner FROM pg_catalog.pg_extension e WHERE e.extname = 'finalize');
    obj record;
BEGIN
    FOR obj IN
        SELECT p.oid::pg_catalog.regprocedure::text AS name, 'ROUTINE' AS kind
          FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_proc p ON p.oid = d.objid
         WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.deptype = 'e'
           AND d.refobjid = ext AND p.proowner OPERATOR(pg_catalog.<>) owner
        UNION ALL
        SELECT c.oid::pg_catalog.regclass::text, 'TABLE'
          FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_class c ON c.oid = d.objid
         WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.deptype = 'e'
           AND c.relkind IN ('r', 'v', 'p') AND d.refobjid = ext AND c.relowner OPERATOR(pg_catalog.<>) owner
    LOOP
        -- ALTER TABLE also hands over views and a table's identity sequences.
        EXECUTE pg_catalog.format('ALTER %s %s OWNER TO %I', obj.kind, obj.name, pg_catalog.pg_get_userbyid(owner));
    END LOOP;
END
$owner$;
