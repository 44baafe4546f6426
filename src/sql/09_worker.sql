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
-- The hold is set here, by the cycle that found the step, and never by a
-- failed cycle that only reports a hold: that cycle's worker read the hold
-- before its failure was written, and a release_source committed in
-- between would be undone (CI: released, then held again 0.2 s later).
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
    UPDATE @extschema@.source_status s
       SET held_by = 'commit_time_ahead', held_since = coalesce(s.held_since, now())
     WHERE s.server_name = clock_went_back.server_name;
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

-- When a Kerberos source's service ticket ends (NULL: it has none, or the
-- source logs in otherwise), as its worker last knew it; written only when
-- it changed, after _source_ok or _source_failed made the source's row.
CREATE OR REPLACE FUNCTION finalize_internal.source_ticket(server_name text, ticket_expires timestamptz)
RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    UPDATE @extschema@.source_status s SET ticket_expires = source_ticket.ticket_expires
     WHERE s.server_name = source_ticket.server_name
       AND s.ticket_expires IS DISTINCT FROM source_ticket.ticket_expires;
END;

-- A cycle that could not read the source: why, and when it tries again.
-- Conditions that say SQL Server's times cannot be trusted (commit times
-- ahead of its clock, a clock far ahead of PostgreSQL's, a zone that
-- disagrees with the timezone option) stop every verdict of the source: the
-- first cycle that finds one sends an alert. Commit times ahead of the clock
-- also hold the source until finalize.release_source() (_clock_went_back
-- sets the hold): the check sees them only while capture lags less than
-- they lead, so a later cycle that does not see them proves nothing.
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
