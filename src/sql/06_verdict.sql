-- The verdict and what holds it. One function moves finalized_until
-- (_advance): to the least of the table's source verdict
-- (watermark.source_until: what SQL Server captured, or for a derived table
-- what its inputs allow) and the verdict of every required consumer, never
-- below where it was. Losses never move it: they hold the periods they
-- intersect until an acknowledgement covers them (_loss_blocks), and
-- watermark.loss_blocked says when that must be asked.
-- See docs/design/pipelines.md.

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
-- derived table's source verdict from its inputs, then sets finalized_until
-- to the greatest of its old value and _effective_until, with a NOTIFY on
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
    new_until timestamptz;
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
    new_until := GREATEST(wm.finalized_until, @extschema@._effective_until(tt, wm.source_until));
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

-- The table and its inputs, transitively (a derived table inherits their
-- losses).
CREATE FUNCTION @extschema@._lineage(table_id bigint)
RETURNS TABLE (member_id bigint, member_granularity interval)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH RECURSIVE up(id) AS (
        SELECT _lineage.table_id
        UNION
        SELECT d.input_id FROM @extschema@.derived_input d JOIN up ON d.table_id = up.id)
    SELECT t.table_id, t.granularity FROM up JOIN @extschema@.tracked_table t ON t.table_id = up.id;
END;

-- Whether the acknowledgements of a table recorded after a loss (since)
-- cover every instant of [s, e); adjacent or overlapping ones join.
CREATE FUNCTION @extschema@._acked(table_id bigint, s timestamptz, e timestamptz, since timestamptz)
RETURNS boolean
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
            RETURN false;
        END IF;
        reach := further;
    END LOOP;
    RETURN true;
END
$$;

-- The losses (of the table or of an input, transitively) that hold the
-- period [period_start, period_end): they intersect it, and the periods of
-- their own table that they share with it are not all acknowledged.
CREATE FUNCTION @extschema@._open_losses(table_id bigint, period_start timestamptz, period_end timestamptz)
RETURNS SETOF @extschema@.loss
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT l.*
      FROM @extschema@._lineage(_open_losses.table_id) AS x
      JOIN @extschema@.loss l ON l.table_id = x.member_id
     WHERE l.lost_from < _open_losses.period_end AND l.lost_to >= _open_losses.period_start
       AND NOT @extschema@._acked(x.member_id,
               @extschema@.period_start(GREATEST(_open_losses.period_start, l.lost_from), x.member_granularity),
               @extschema@.period_end(LEAST(_open_losses.period_end - interval '1 microsecond', l.lost_to),
                                      x.member_granularity),
               l.created_at)
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

-- Whether the table or an input (transitively) has a loss whose periods
-- the acknowledgements recorded after it do not all cover.
CREATE FUNCTION @extschema@._has_open_loss(table_id bigint)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN EXISTS (
    SELECT FROM @extschema@._lineage(table_id) AS x
      JOIN @extschema@.loss l ON l.table_id = x.member_id
     WHERE NOT @extschema@._acked(x.member_id,
               CASE WHEN isfinite(l.lost_from) THEN @extschema@.period_start(l.lost_from, x.member_granularity)
                    ELSE l.lost_from END,
               CASE WHEN isfinite(l.lost_to) THEN @extschema@.period_end(l.lost_to, x.member_granularity)
                    ELSE l.lost_to END,
               l.created_at));

-- Recomputes watermark.loss_blocked of a table and of every derived table
-- that uses it (transitively): after a loss, an acknowledgement, a new
-- derived table or a new granularity.
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
