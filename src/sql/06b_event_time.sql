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
    -- The publications that published one of these periods hear of it
    -- (docs/publishing.md): each time rows land there.
    PERFORM finalize_internal.publish_late_data(tt.table_id, e.event_period, e.late_rows, l.rows)
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
