-- finalize 0.1.0 to 0.2.0, run by ALTER EXTENSION finalize UPDATE. Every
-- change here is also made in the parts under src/sql/, which build a fresh
-- 0.2.0 install: test/integration/test_upgrade.py checks that both give the
-- same catalog, and that facts, verdicts and releases are kept. Nothing here
-- rewrites a row; the constraints added check the rows there are.

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
                             'lsn_regressed', 'record_failed', 'lock_timeout'));
ALTER TABLE @extschema@.source_status
    ADD CONSTRAINT source_status_condition_check
        CHECK (condition IN ('starting', 'ok', 'capture_stalled', 'no_worker', 'server_dropped',
                             'configuration', 'commit_time_ahead', 'unreachable', 'timeout',
                             'cancelled', 'sql_error', 'no_max_lsn', 'timezone_mismatch',
                             'clock_skew', 'internal_error')),
    ADD CONSTRAINT source_status_held_by_check
        CHECK (held_by IN ('commit_time_ahead'));

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
BEGIN
    tt := @extschema@._tracked(table_name);
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

-- Changes per period between two instants. A period is covered when every
-- commit in it lies after the start of the recorded facts (tracking began, or
-- retention removed older facts, before it) and outside every range lost to
-- retention cleanup. A range whose rows all committed
-- inside one period counts there; a range whose rows straddle a period
-- boundary is counted in straddling_ranges of every period it touches (its
-- rows may belong to either). Counts are exact where the period is covered
-- and no range straddles it.
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
    until timestamptz;
    covered_after timestamptz;
BEGIN
    PERFORM @extschema@._require(changes_by_period.table_name, 'table_name');
    PERFORM @extschema@._require(from_time, 'from_time');
    PERFORM @extschema@._require(to_time, 'to_time');
    tt := @extschema@._tracked(changes_by_period.table_name);
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
-- table. Consecutive empty ranges coalesce into one fact, so an idle table
-- keeps a bounded number of rows; any other range is a fact of its own (the
-- first one, without start, marks where tracking started).
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
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    prev bigint;
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
    ELSE
        INSERT INTO @extschema@.fact
            (table_id, kind, start_lsn, end_lsn, end_commit_time, inserts, updates, deletes,
             first_commit_time, last_commit_time, capture_instance, event, detail)
        VALUES
            (_store_range_fact.table_id, 'range', s, e, end_commit_time, inserts, updates, deletes,
             first_commit_time, last_commit_time, capture_instance,
             CASE WHEN s IS NULL THEN 'tracking_started' ELSE event END, detail);
    END IF;
END
$$;

-- The write path itself, by table id (the worker's way; record_range is the
-- same by name): the arguments are checked (and the table's verdict locked),
-- the range must chain onto the recorded ones, its fact is stored and the
-- verdict advances, all in the caller's transaction.
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
    new_until timestamptz;
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
