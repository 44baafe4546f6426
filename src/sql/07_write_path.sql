-- The one write path of the verdict. The worker records every range it reads
-- through record_range, in the same transaction as the facts, so a crash can
-- only leave the verdict behind, never ahead.
--
-- NOTIFY channel "finalize": on every advance, a JSON object
--   {"table": ..., "old": ..., "new": ..., "lsn": ..., "commit_time": ...}
-- with times in UTC ISO 8601 ("old" is null on the first advance), and
-- "kind": "derived" for a derived table (see _advance).

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
