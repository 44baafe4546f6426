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
