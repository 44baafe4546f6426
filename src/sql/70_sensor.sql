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
COMMENT ON FUNCTION @extschema@.changes_by_period(text, timestamptz, timestamptz) IS
    'Rows inserted, updated and deleted per period, from the recorded facts';
