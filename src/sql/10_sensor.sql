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
       CASE WHEN l.delta_table IS NULL THEN l.server_name END AS iceberg_server,
       l.iceberg_table,
       l.ref AS iceberg_ref,
       CASE WHEN l.delta_table IS NULL THEN l.seen_snapshot_id END AS iceberg_snapshot_id,
       CASE WHEN l.delta_table IS NULL THEN l.polled_at END AS iceberg_polled_at,
       -- A shard's consumer: its sharded table and shard, and whether it
       -- was declared on the sharded table (a consumer of every shard).
       CASE WHEN t.shard_of IS NOT NULL
            THEN (SELECT p.table_name FROM @extschema@.tracked_table p WHERE p.table_id = t.shard_of)
       END AS sharded_table,
       t.shard,
       EXISTS (SELECT FROM @extschema@.shard_consumer x
                WHERE x.table_id = t.shard_of AND x.consumer = c.consumer) AS table_wide,
       -- A Delta consumer: its table, store, the version read last, when the worker last looked.
       l.delta_table,
       CASE WHEN l.delta_table IS NOT NULL THEN l.server_name END AS delta_store,
       CASE WHEN l.delta_table IS NOT NULL THEN l.seen_head_id END AS delta_version,
       CASE WHEN l.delta_table IS NOT NULL THEN l.polled_at END AS delta_polled_at
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
    clock_lag interval;
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
    -- A range ends at or after its last commit's time, unless SQL Server's
    -- clock went back inside it (its end LSN stamped before some of its
    -- commits). The search by end_commit_time (indexed) reaches back by the
    -- largest such lag of the table's ranges (fact_clock_lag_idx holds only
    -- those), so that such a range still counts in the later periods.
    SELECT coalesce(max(f.last_commit_time - f.end_commit_time), interval '0') INTO clock_lag
      FROM @extschema@.fact f
     WHERE f.table_id = tt.table_id AND f.kind = 'range' AND f.last_commit_time > f.end_commit_time;
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
               AND x.end_commit_time >= p.ps - clock_lag
               AND x.last_commit_time >= p.ps
               AND x.first_commit_time < p.pe) f ON true
     GROUP BY p.ps, p.pe, p.covered
     ORDER BY p.ps;
END
$$;
COMMENT ON FUNCTION @extschema@.changes_by_period(text, timestamptz, timestamptz) IS
    'Rows inserted, updated and deleted per period, from the recorded facts';
