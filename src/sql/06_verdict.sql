-- The verdict and what holds it. One function moves finalized_until
-- (_advance): to the least of the table's source verdict
-- (watermark.source_until: what SQL Server captured, or for a derived table
-- what its inputs allow) and the verdict of every required consumer, never
-- below where it was. Losses never move it: they hold the periods they
-- intersect until acknowledgements cover them (_loss_blocks; on the table
-- that lost the data and on the derived tables whose jobs must rebuild
-- them, _loss_ackers), finalized_until() stops at the first of those
-- periods (_loss_cap), and watermark.loss_blocked says when that must be
-- asked. What is announced of a verdict (NOTIFY, finalize.status,
-- explain_verdict) is what finalized_until() answers (_sensor_until), never
-- the watermark; _announce sends it (docs/design/announcements.md).
-- See docs/design/pipelines.md.

-- The verdict of one consumer: the period start (the table's periods:
-- granularity in zone) of the commit time it has applied up to (a tracked
-- table's consumer, as the worker resolved its LSN) or of the input
-- watermark its job processed (a derived table's); NULL while it has none.
CREATE OR REPLACE FUNCTION finalize_internal.consumer_until(kind text, granularity interval, zone text,
                                            commit_time timestamptz, processed_until timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.period_start(CASE WHEN kind = 'source' THEN commit_time ELSE processed_until END, granularity,
                                zone);

-- The verdict each of some tables may have now: the least of its source
-- verdict (watermark.source_until) and its required consumers' verdicts, or
-- NULL (no advance) when any of them is NULL: a consumer that has not
-- reported holds everything. One query for many tables, so that a worker
-- cycle over thousands of tables (_advance_sources) and _advance for one
-- share the rule.
CREATE OR REPLACE FUNCTION finalize_internal.effective_untils(table_ids bigint[])
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
      FROM (SELECT DISTINCT i.id FROM unnest(effective_untils.table_ids) AS i(id)) i
      JOIN @extschema@.tracked_table t ON t.table_id = i.id
      JOIN @extschema@.watermark w ON w.table_id = t.table_id
     CROSS JOIN LATERAL (SELECT bool_or(x.until IS NULL) AS unreported, min(x.until) AS least_until
                           FROM @extschema@.consumer rc
                          CROSS JOIN LATERAL (SELECT finalize_internal.consumer_until(t.kind, t.granularity, t.period_zone,
                                                                                rc.commit_time, rc.processed_until)
                                                       AS until) x
                          WHERE rc.table_id = t.table_id AND rc.required) c;
END;

-- What derived tables' inputs are final until (the least of their
-- verdicts, NULL while one has none), many at once (the scheduler looks at
-- every derived table each round): a job cannot have processed complete
-- input beyond it.
CREATE OR REPLACE FUNCTION finalize_internal.inputs_final_untils(table_ids bigint[])
RETURNS TABLE (table_id bigint, until timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT d.table_id, CASE WHEN count(*) = count(w.finalized_until) THEN min(w.finalized_until) END
      FROM @extschema@.derived_input d
      JOIN @extschema@.watermark w ON w.table_id = d.input_id
     WHERE d.table_id = ANY (inputs_final_untils.table_ids)
     GROUP BY d.table_id;
END;

-- What one derived table's inputs are final until (_inputs_final_untils).
CREATE OR REPLACE FUNCTION finalize_internal.inputs_final_until(table_id bigint)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT u.until FROM finalize_internal.inputs_final_untils(ARRAY[inputs_final_until.table_id]) AS u;
END;


-- The source verdict of a derived table: its inputs' least
-- finalized_until rounded down to a start of its own periods (granularity
-- in zone, which may differ from its inputs'), NULL while any input has
-- none.
CREATE OR REPLACE FUNCTION finalize_internal.inputs_until(table_id bigint, granularity interval, zone text)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.period_start(finalize_internal.inputs_final_until(table_id), granularity, zone);

-- The payload of an advance on channel "finalize": the table, the old and
-- new verdicts, the offset of its facts (LSN and commit time, null for a
-- derived table), and "kind": "derived" for a derived table only, so that a
-- tracked table's payload stays what it always was. In C (thousands of
-- advances in one statement), in json_build_object's layout.
CREATE OR REPLACE FUNCTION finalize_internal.advance_payload(table_name text, kind text, old_until timestamptz,
                                             new_until timestamptz, offset_lsn text,
                                             offset_commit_time timestamptz)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_advance_payload'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- What finalized_until() answers for a table of a kind whose watermark
-- row holds finalized_until and loss_blocked (its own flag: the function
-- adds the flags of the tables a derived or sharded one is built from),
-- under the statement's snapshot:
-- the sensors' own rule in C (src/sensor/sensor.c), rounded down to a
-- start of the table's periods and stopped where losses hold periods
-- (_loss_cap, asked as the extension's owner). Every announcement of a
-- verdict tells this one and never a raw watermark: NOTIFY payloads
-- (_announce), finalize.status, explain_verdict. Readers may call it
-- (finalize.status does).
CREATE OR REPLACE FUNCTION finalize_internal.sensor_until(table_id bigint, kind text, finalized_until timestamptz,
                                          granularity interval, period_zone text, loss_blocked boolean)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_sensor_until'
LANGUAGE C STABLE;

-- Whether no other transaction can lower the verdicts a derived or
-- sharded table is built from until this one ends: the rows of the tables
-- it is built from (transitively) are held FOR SHARE, each without
-- waiting. What lowers a verdict already final (new periods, whose
-- acknowledgements may no longer cover a loss; a lake's rollback) holds
-- the table's row FOR NO KEY UPDATE, which conflicts; ranges and reports
-- take KEY SHARE, which does not (a state change of the worker, which does
-- not wait, may find a row held for milliseconds and retries next cycle,
-- as _lock_tracked_row says). True for a table built
-- from none; false in a session, which never holds another team's rows
-- (the scheduler's round, whose transactions end within milliseconds,
-- announces the table). Rows it could take stay held.
CREATE OR REPLACE FUNCTION finalize_internal.hold_inputs(table_id bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    ids bigint[];
    n integer;
BEGIN
    ids := ARRAY(WITH RECURSIVE up(id) AS (
                     SELECT d.input_id FROM @extschema@.derived_input d WHERE d.table_id = hold_inputs.table_id
                     UNION
                     SELECT d.input_id FROM @extschema@.derived_input d JOIN up ON d.table_id = up.id)
                 SELECT up.id FROM up ORDER BY up.id);
    IF cardinality(ids) = 0 THEN
        RETURN true;
    ELSIF NOT finalize_internal.in_background() THEN
        RETURN false;
    END IF;
    SELECT count(*) INTO n
      FROM (SELECT FROM @extschema@.tracked_table t WHERE t.table_id = ANY (ids)
             ORDER BY t.table_id FOR SHARE SKIP LOCKED) AS x;
    RETURN n = cardinality(ids);
END
$$;

-- Announces the verdicts of some tables whose rows the caller holds:
-- records what finalized_until() answers now (_sensor_until) as
-- watermark.announced_until and, for each that moved past the verdict
-- announced last, sends one NOTIFY on channel "finalize" naming the two
-- (old, new). A verdict that went back (a lake's rollback, other periods)
-- is recorded without a notification, so that the next one names where it
-- stood; with falls_only nothing else is recorded, for callers that an
-- advance follows in the same transaction (it announces once, at the
-- verdict the transaction ends with). A rise of a derived or sharded
-- table is announced only once _hold_inputs holds its inputs, before the
-- verdict is read (a statement of its own: a new snapshot): read before a
-- transaction that lowers an input's verdict commits, and sent at this
-- one's commit after it, a payload would name periods finalized_until()
-- no longer gives. One another transaction holds is left as it was (the
-- scheduler's next round announces it). Returns the tables announced.
-- With the same rule in the UPDATE of _advance_sources, the one way a
-- verdict is announced (docs/design/announcements.md).
CREATE OR REPLACE FUNCTION finalize_internal.announce(table_ids bigint[], falls_only boolean DEFAULT false)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    held bigint[] := '{}';
BEGIN
    IF NOT falls_only THEN
        held := ARRAY(SELECT i.id FROM unnest(table_ids) AS i(id) WHERE finalize_internal.hold_inputs(i.id));
    END IF;
    RETURN QUERY
    WITH cur AS (
        SELECT w.table_id, w.announced_until AS old_until,
               finalize_internal.sensor_until(w.table_id, t.kind, w.finalized_until, t.granularity, t.period_zone,
                                         w.loss_blocked) AS new_until
          FROM (SELECT DISTINCT i.id FROM unnest(table_ids) AS i(id)) i
          JOIN @extschema@.tracked_table t ON t.table_id = i.id
          JOIN @extschema@.watermark w ON w.table_id = t.table_id
         WHERE t.untracked_at IS NULL),
    changed AS (
        UPDATE @extschema@.watermark w
           SET announced_until = c.new_until
          FROM cur c
         WHERE w.table_id = c.table_id AND c.new_until IS DISTINCT FROM c.old_until
           AND (c.table_id = ANY (held) OR c.new_until IS NULL OR c.new_until < c.old_until)
        RETURNING w.table_id, c.old_until, c.new_until, w.offset_lsn, w.offset_commit_time)
    SELECT x.table_id
      FROM (SELECT ch.* FROM changed ch WHERE ch.new_until > coalesce(ch.old_until, '-infinity')) x
      JOIN @extschema@.tracked_table t ON t.table_id = x.table_id
     CROSS JOIN LATERAL finalize_internal.notify('finalize',
                            finalize_internal.advance_payload(t.table_name, t.kind, x.old_until, x.new_until,
                                                         x.offset_lsn, x.offset_commit_time)) n
     ORDER BY x.table_id;
END
$$;

-- Like _lock_tracked(table_id, false), but NULL instead of waiting when
-- another transaction holds the table's row or verdict.
CREATE OR REPLACE FUNCTION finalize_internal.try_lock_tracked(table_id bigint)
RETURNS @extschema@.tracked_table
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
BEGIN
    PERFORM FROM @extschema@.tracked_table t
     WHERE t.table_id = try_lock_tracked.table_id AND t.untracked_at IS NULL FOR KEY SHARE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM FROM @extschema@.watermark w WHERE w.table_id = try_lock_tracked.table_id FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = try_lock_tracked.table_id;
    RETURN tt;
END
$$;

-- _advance for source tables partitioned by commit time, many at once (a
-- worker's cycle records thousands of tables in one transaction): each
-- verdict, which the caller has locked, moves commit_until to the greatest
-- of its old value and _effective_untils, then finalized_until likewise,
-- and announces the verdict as _announce does, in the same statement
-- (announced_until is what _sensor_until answers for the new row: a
-- source table is built from no other, so its own loss flag is its
-- lineage's): a NOTIFY on channel "finalize" for each one that moved past
-- the last one announced, never past a loss that holds periods. Returns
-- the tables whose finalized_until moved: the caller lets their derived
-- tables follow. Other tables (derived, event-time) are left alone.
CREATE OR REPLACE FUNCTION finalize_internal.advance_sources(table_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    WITH cur AS (
        SELECT t.table_id, t AS tt, w AS wm, GREATEST(w.commit_until, e.until) AS new_commit
          FROM finalize_internal.effective_untils(table_ids) e
          JOIN @extschema@.tracked_table t ON t.table_id = e.table_id
          JOIN @extschema@.watermark w ON w.table_id = t.table_id
         WHERE t.kind = 'source' AND t.event_time_column IS NULL),
    moved AS (
        UPDATE @extschema@.watermark w
           SET commit_until = c.new_commit,
               finalized_until = GREATEST(w.finalized_until, c.new_commit),
               advanced_at = CASE WHEN GREATEST(w.finalized_until, c.new_commit) IS DISTINCT FROM w.finalized_until
                                  THEN now() ELSE w.advanced_at END,
               announced_until = finalize_internal.sensor_until(w.table_id, 'source', GREATEST(w.finalized_until, c.new_commit),
                                                           (c.tt).granularity, (c.tt).period_zone, w.loss_blocked)
          FROM cur c
         WHERE w.table_id = c.table_id
           AND (c.new_commit IS DISTINCT FROM w.commit_until
                OR GREATEST(w.finalized_until, c.new_commit) IS DISTINCT FROM w.finalized_until)
        RETURNING w.table_id, c.tt, c.wm, w.finalized_until AS new_until, w.announced_until AS announced)
    SELECT x.table_id
      FROM (SELECT m.table_id, m.new_until IS DISTINCT FROM (m.wm).finalized_until AS advanced
              FROM moved m
              -- every row is looked at (OFFSET 0: the filter below comes after)
              LEFT JOIN LATERAL (
                    SELECT finalize_internal.notify('finalize',
                               finalize_internal.advance_payload((m.tt).table_name, (m.tt).kind, (m.wm).announced_until,
                                                            m.announced, (m.wm).offset_lsn,
                                                            (m.wm).offset_commit_time)) AS sent
                     WHERE m.announced > coalesce((m.wm).announced_until, '-infinity')) n ON true
            OFFSET 0) x
     WHERE x.advanced
     ORDER BY x.table_id;
END
$$;

-- Lets the derived tables that use any of the given tables follow them,
-- each once, in table order, in a background worker's transaction only:
-- a row it locks there is released within milliseconds. A session's
-- transaction (a pipeline's report, an admin's change) moves only the
-- table it writes, never the derived tables of other teams, which it
-- would hold until it ends; the scheduler's _refresh_derived moves them
-- within a round of its commit. _advance without waiting, so that an
-- input's advance never waits for a pipeline's open transaction either
-- (_refresh_derived catches a skipped one up). The one loop of _advance
-- and _record_ranges.
CREATE OR REPLACE FUNCTION finalize_internal.advance_dependents(input_ids bigint[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dependent bigint;
BEGIN
    IF NOT finalize_internal.in_background() THEN
        RETURN;
    END IF;
    FOR dependent IN SELECT DISTINCT d.table_id FROM @extschema@.derived_input d
                       JOIN @extschema@.tracked_table t ON t.table_id = d.table_id
                      WHERE d.input_id = ANY (input_ids) AND t.untracked_at IS NULL
                      ORDER BY d.table_id LOOP
        PERFORM finalize_internal.advance(dependent, false);
    END LOOP;
END
$$;

-- The one function that moves a verdict: locks the table's verdict, takes a
-- derived table's source verdict from its inputs, moves the commit-time
-- verdict commit_until to the greatest of its old value and
-- _effective_untils, then finalized_until to the greatest of its old value
-- and that (on an event-time table: the event-time verdict _event_until
-- draws from it, held by losses as _loss_cap says in event time), announces
-- the verdict (_announce: a NOTIFY on channel "finalize" when what
-- finalized_until() answers moved, also when the watermark did not), and
-- lets every derived table that uses
-- this one follow in the same transaction when it is a background
-- worker's (_advance_dependents). The inputs form a DAG (track_derived
-- refuses cycles), so the recursion ends. A derived table whose verdict
-- another transaction holds is skipped (wait false): an input's advance
-- never waits for a pipeline's open transaction, nor two sources' workers
-- for each other; the scheduler's _refresh_derived catches it up. Returns
-- finalized_until, NULL for a table no longer tracked (or skipped).
CREATE OR REPLACE FUNCTION finalize_internal.advance(table_id bigint, wait boolean DEFAULT true)
RETURNS timestamptz
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := CASE WHEN wait THEN finalize_internal.lock_tracked(table_id, false)
                                         ELSE finalize_internal.try_lock_tracked(table_id) END;
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
        moved := EXISTS (SELECT FROM finalize_internal.advance_sources(ARRAY[tt.table_id]));
        -- announced there if it moved; else what made periods final may be
        -- an acknowledgement, or a consumer dropped
        IF NOT moved THEN
            PERFORM finalize_internal.announce(ARRAY[tt.table_id]);
        END IF;
        -- run on every call (for no table when nothing moved): its plan is
        -- made at the first call, not at the first advance hours later
        PERFORM finalize_internal.advance_dependents(CASE WHEN moved THEN ARRAY[tt.table_id] ELSE '{}' END);
        RETURN (SELECT w.finalized_until FROM @extschema@.watermark w WHERE w.table_id = tt.table_id);
    END IF;
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    -- A sharded table is derived from its shards (derived_input): the
    -- least of their verdicts, NULL while one has none or it has no shard.
    IF tt.kind IN ('derived', 'sharded') THEN
        from_inputs := finalize_internal.inputs_until(tt.table_id, tt.granularity, tt.period_zone);
        IF from_inputs > coalesce(wm.source_until, '-infinity') THEN
            UPDATE @extschema@.watermark w SET source_until = from_inputs WHERE w.table_id = tt.table_id;
            wm.source_until := from_inputs;
        END IF;
    END IF;
    new_commit := GREATEST(wm.commit_until,
                           (SELECT e.until FROM finalize_internal.effective_untils(ARRAY[tt.table_id]) e));
    -- (A sharded table partitioned by event time takes its shards'
    -- event-time verdicts as they are: each is drawn from its own.)
    IF tt.event_time_column IS NULL OR tt.kind = 'sharded' THEN
        new_until := GREATEST(wm.finalized_until, new_commit);
    ELSE
        -- The event-time verdict, held by losses (whose spans are event times
        -- on an event-time table, see _record_loss).
        ev := finalize_internal.event_until(tt, new_commit);
        -- A loss holds the event times its rows may have under the
        -- allowance: when the allowance grows (or becomes known), its start
        -- reaches further back, never into periods already final.
        IF ev.allowance IS NOT NULL AND ev.allowance > coalesce(wm.event_allowance, interval '0')
           AND EXISTS (SELECT FROM @extschema@.loss l WHERE l.table_id = tt.table_id AND l.commit_from IS NOT NULL) THEN
            UPDATE @extschema@.loss l
               SET lost_from = GREATEST(coalesce(finalize_internal.instant_minus(l.commit_from, ev.allowance), '-infinity'),
                                        coalesce(wm.finalized_until, '-infinity'))
             WHERE l.table_id = tt.table_id AND l.commit_from IS NOT NULL
               AND GREATEST(coalesce(finalize_internal.instant_minus(l.commit_from, ev.allowance), '-infinity'),
                            coalesce(wm.finalized_until, '-infinity')) < l.lost_from;
            IF FOUND THEN
                PERFORM finalize_internal.refresh_loss_blocked(tt.table_id);
                SELECT w.loss_blocked INTO wm.loss_blocked FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
            END IF;
        END IF;
        IF wm.loss_blocked AND ev.until IS NOT NULL THEN
            cap := finalize_internal.loss_cap(tt.table_id);
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
        -- (an acknowledgement, a consumer dropped: periods may be final now)
        PERFORM finalize_internal.announce(ARRAY[tt.table_id]);
        RETURN new_until;
    END IF;
    UPDATE @extschema@.watermark w SET finalized_until = new_until, advanced_at = now()
     WHERE w.table_id = tt.table_id;
    PERFORM finalize_internal.announce(ARRAY[tt.table_id]);
    PERFORM finalize_internal.advance_dependents(ARRAY[tt.table_id]);
    RETURN new_until;
END
$$;

-- How far from s the acknowledgements of a table recorded after a loss
-- (since) reach without a gap, adjacent or overlapping ones joined: at
-- least e once they cover every instant of [s, e). Where they stop, the
-- loss still holds periods (_acked, _loss_cap). In C (src/sensor/loss_sql.c),
-- the sweep the sensors use.
CREATE OR REPLACE FUNCTION finalize_internal.ack_reach(table_id bigint, s timestamptz, e timestamptz, since timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_ack_reach'
LANGUAGE C STABLE;

-- Whether the acknowledgements of a table recorded after a loss (since)
-- cover every instant of [s, e) (_ack_reach, in C).
CREATE OR REPLACE FUNCTION finalize_internal.acked(table_id bigint, s timestamptz, e timestamptz, since timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_acked'
LANGUAGE C STABLE;

-- The periods (granularity g in zone z) that the lost commit times
-- [lost_from, lost_to] touch, as [span_from, span_to): what an
-- acknowledgement on a table of those periods must cover. An infinite end
-- stays infinite.
CREATE OR REPLACE FUNCTION finalize_internal.loss_span(lost_from timestamptz, lost_to timestamptz, g interval, z text,
                                       OUT span_from timestamptz, OUT span_to timestamptz)
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT CASE WHEN isfinite(loss_span.lost_from)
                THEN @extschema@.period_start(loss_span.lost_from, loss_span.g, loss_span.z)
                ELSE loss_span.lost_from END,
           CASE WHEN isfinite(loss_span.lost_to)
                THEN @extschema@.period_end(loss_span.lost_to, loss_span.g, loss_span.z)
                ELSE loss_span.lost_to END;
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
-- span_from, span_to: the loss's periods in the periods of that table
-- (acker_granularity in acker_zone, as _loss_span). In C over the catalog
-- (src/sensor/losses.c), the rule the sensors read.
CREATE OR REPLACE FUNCTION finalize_internal.loss_ackers(table_id bigint)
RETURNS TABLE (loss_id bigint, acker_id bigint, acker_granularity interval, acker_zone text,
               span_from timestamptz, span_to timestamptz)
AS 'MODULE_PATHNAME', 'finalize_loss_ackers'
LANGUAGE C STABLE ROWS 10;

-- The losses (of the table or of an input, transitively) that hold the
-- period [period_start, period_end), each with every table it has yet to be
-- acknowledged on for it (_loss_ackers): the loss intersects the period,
-- and that table's periods it shares with it are not all acknowledged. In
-- C (src/sensor/loss_rule.c), the rule of _loss_blocks.
CREATE OR REPLACE FUNCTION finalize_internal.open_loss_ackers(table_id bigint, period_start timestamptz, period_end timestamptz)
RETURNS TABLE (loss_id bigint, acker_id bigint)
AS 'MODULE_PATHNAME', 'finalize_open_loss_ackers'
LANGUAGE C STABLE ROWS 10;

-- The losses (of the table or of an input, transitively) that hold the
-- period [period_start, period_end) (see _open_loss_ackers).
CREATE OR REPLACE FUNCTION finalize_internal.open_losses(table_id bigint, period_start timestamptz, period_end timestamptz)
RETURNS SETOF @extschema@.loss
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT l.*
      FROM @extschema@.loss l
     WHERE l.loss_id IN (SELECT o.loss_id
                           FROM finalize_internal.open_loss_ackers(open_losses.table_id, open_losses.period_start,
                                                              open_losses.period_end) AS o)
     ORDER BY l.loss_id;
END;

-- Whether a loss holds the period [period_start, period_end) of a table
-- (the rule of _open_losses), in C over the catalog (src/sensor/losses.c):
-- the sensors read the same rule without SQL while watermark.loss_blocked
-- is set.
CREATE OR REPLACE FUNCTION finalize_internal.loss_blocks(table_id bigint, period_start timestamptz, period_end timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_loss_blocks'
LANGUAGE C STABLE;

-- Where finalized_until() stops while losses hold periods, since every
-- period ending at or before it must be complete: the start of the table's
-- earliest period (its own granularity) that a loss may still hold, for
-- want of an acknowledgement on any table it needs one on (_loss_ackers);
-- 'infinity' when none does, '-infinity' when such a loss has no start.
-- It may name an earlier period than the first one a loss holds (the
-- acknowledgements count only from a period start of the table they are
-- on), never a later one. In C over the catalog (src/sensor/losses.c),
-- which the sensors read without SQL while watermark.loss_blocked is set.
CREATE OR REPLACE FUNCTION finalize_internal.loss_cap(table_id bigint)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_loss_cap'
LANGUAGE C STABLE;

-- Whether the table or an input (transitively) has a loss that a table it
-- must be acknowledged on (_loss_ackers) has not acknowledged for all its
-- periods. In C (src/sensor/loss_rule.c), the rule of _loss_cap.
CREATE OR REPLACE FUNCTION finalize_internal.has_open_loss(table_id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_has_open_loss'
LANGUAGE C STABLE;

-- Whether an unacknowledged loss holds some periods of a table, for
-- finalize.status (whose readers may not read the losses themselves: hence
-- SECURITY DEFINER, granted to finalize_reader; it answers only this). The
-- view asks it only while a flag of the table's lineage is set: a flag may
-- stay set for a table built from it that still has to acknowledge.
CREATE OR REPLACE FUNCTION finalize_internal.loss_holds(table_id bigint)
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN finalize_internal.has_open_loss(table_id);

-- Whether a loss may hold periods of a table, as the sensors read it
-- (src/sensor/catalog.c does the same in C): the loss_blocked flag of the
-- table or of any table it is built from, transitively, is set. Every
-- transaction that gives a table a loss to wait for (a loss recorded, a
-- consumer made required, new periods, a longer lateness allowance) sets
-- the flag of the one table it holds (_lock_tracked), so that the tables
-- built from it are held at once without their rows: a pipeline may keep
-- those in an open transaction for as long as it likes.
CREATE OR REPLACE FUNCTION finalize_internal.lineage_blocked(table_id bigint)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH RECURSIVE up(id) AS (
        SELECT lineage_blocked.table_id
        UNION
        SELECT d.input_id FROM @extschema@.derived_input d JOIN up ON d.table_id = up.id)
    SELECT EXISTS (SELECT FROM up JOIN @extschema@.watermark w ON w.table_id = up.id WHERE w.loss_blocked);
END;

-- The tables built from a table (transitively, not itself) that have a
-- loss to wait for and no flag of their own yet: while there is one, the
-- table's own flag holds it (_lineage_blocked) and may not be cleared.
CREATE OR REPLACE FUNCTION finalize_internal.unflagged_below(table_id bigint)
RETURNS SETOF bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH RECURSIVE down(id) AS (
        SELECT d.table_id FROM @extschema@.derived_input d WHERE d.input_id = unflagged_below.table_id
        UNION
        SELECT d.table_id FROM @extschema@.derived_input d JOIN down ON d.input_id = down.id)
    SELECT down.id FROM down JOIN @extschema@.watermark w ON w.table_id = down.id
     WHERE NOT w.loss_blocked AND finalize_internal.has_open_loss(down.id)
     ORDER BY down.id;
END;

-- Whether any table built from a table (transitively, not itself) has a
-- loss to wait for, flagged or not. A flag is kept while one has: clearing
-- it because the tables below carry flags of their own would rely on rows
-- another transaction may be clearing at the same time (each would see the
-- other's flag still set, and both would go).
CREATE OR REPLACE FUNCTION finalize_internal.open_below(table_id bigint)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH RECURSIVE down(id) AS (
        SELECT d.table_id FROM @extschema@.derived_input d WHERE d.input_id = open_below.table_id
        UNION
        SELECT d.table_id FROM @extschema@.derived_input d JOIN down ON d.input_id = down.id)
    SELECT EXISTS (SELECT FROM down WHERE finalize_internal.has_open_loss(down.id));
END;

-- Recomputes watermark.loss_blocked of a table whose verdict the caller
-- holds (_lock_tracked): after a loss, an acknowledgement (on the table
-- that lost the data or on a derived table), a new derived table, a new
-- granularity, a longer lateness allowance or a change of required
-- consumers. Set when the table has a loss to wait for; cleared when
-- neither it nor any table built from it has one (_open_below: until then
-- this flag may be what holds them). Only this table's row is written, so that no
-- transaction holds another team's table: the tables built from it are
-- held through _lineage_blocked at once, and their own flags follow in the
-- worker's transaction when their rows are free (SKIP LOCKED) or in the
-- scheduler's next round (_refresh_derived).
CREATE OR REPLACE FUNCTION finalize_internal.refresh_loss_blocked(table_id bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    was boolean := (SELECT w.loss_blocked FROM @extschema@.watermark w WHERE w.table_id = refresh_loss_blocked.table_id);
    now_blocked boolean;
BEGIN
    now_blocked := finalize_internal.has_open_loss(table_id)
                   OR (was AND finalize_internal.open_below(table_id));
    IF now_blocked IS DISTINCT FROM was THEN
        UPDATE @extschema@.watermark w SET loss_blocked = now_blocked WHERE w.table_id = refresh_loss_blocked.table_id;
    END IF;
    -- A verdict a loss took back is recorded as announced; one that an
    -- acknowledgement moved on is announced by the _advance that follows.
    PERFORM finalize_internal.announce(ARRAY[table_id], true);
    IF now_blocked AND finalize_internal.in_background() THEN
        PERFORM finalize_internal.flag_below(table_id);
    END IF;
END
$$;

-- Gives the tables built from a table that have a loss to wait for their
-- own flag, each whose row no other transaction holds (SKIP LOCKED: one a
-- pipeline holds keeps being held through the table's flag and is flagged
-- later). Returns how many it flagged. Background workers only.
CREATE OR REPLACE FUNCTION finalize_internal.flag_below(table_id bigint)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    below bigint;
    n integer := 0;
BEGIN
    FOR below IN SELECT u.id FROM finalize_internal.unflagged_below(table_id) AS u(id) LOOP
        PERFORM FROM @extschema@.watermark w WHERE w.table_id = below FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        UPDATE @extschema@.watermark w SET loss_blocked = true WHERE w.table_id = below AND NOT w.loss_blocked;
        PERFORM finalize_internal.announce(ARRAY[below], true);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- Keeps watermark.loss_blocked current when a table's required consumers
-- change (add_consumer, alter_consumer, drop_consumer, however they do it):
-- whether a derived table must acknowledge its inputs' losses itself
-- depends on them (_loss_ackers).
CREATE OR REPLACE FUNCTION finalize_internal.consumer_loss_refresh()
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
        PERFORM finalize_internal.refresh_loss_blocked(id);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER loss_blocked_refresh
    AFTER INSERT OR DELETE OR UPDATE OF required ON @extschema@.consumer
    FOR EACH ROW EXECUTE FUNCTION finalize_internal.consumer_loss_refresh();

-- Whether the period starting at period_start is final for the table, as
-- the sensors answer it: the watermark has passed it (_period_final, the
-- C rule of is_final) and no loss holds it. Called once per period (up to
-- 100000 in changes_by_period), so it pins no search_path: a SET clause
-- made each call save and restore the setting, and kept the planner from
-- inlining it (PostgreSQL 16: 9 s for 100000 periods, 0.75 s without).
-- Nothing in it is looked up by name when it runs: its SQL-standard body
-- was resolved when it was created.
CREATE OR REPLACE FUNCTION finalize_internal.final(tt @extschema@.tracked_table, wm @extschema@.watermark,
                                   period_start timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
RETURN finalize_internal.period_final(period_start, (tt).granularity, (tt).period_zone, (wm).finalized_until)
   AND NOT (((wm).loss_blocked OR finalize_internal.lineage_blocked((tt).table_id))
            AND finalize_internal.loss_blocks((tt).table_id, period_start,
                                         @extschema@.period_end(period_start, (tt).granularity, (tt).period_zone)));
