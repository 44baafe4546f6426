-- ===========================================================================
-- Releases of Iceberg tables: write-audit-publish with the release gate as
-- the audit (finalize.release_iceberg, src/publish/). The snapshot's own
-- manifests say what the partition holds; the catalog commit publishes it.
-- ===========================================================================

-- Release a partition of an Iceberg table: audit a snapshot (a WAP branch's
-- head, a wap.id, a snapshot id) against the store and the CDC facts, then
-- publish it through the catalog (fast-forward a branch, or create a tag).
CREATE OR REPLACE FUNCTION @extschema@.release_iceberg(request jsonb,
                                            OUT released boolean, OUT generation text, OUT problems jsonb)
RETURNS record
AS 'MODULE_PATHNAME', 'finalize_release_iceberg'
LANGUAGE C VOLATILE
-- It runs parts as the extension's owner: the caller's search_path must not
-- reach them (its SPI text is schema-qualified as well).
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.release_iceberg(jsonb) IS
    'Audit an Iceberg snapshot''s partition (files, finality, row counts) and publish it through the catalog if nothing disagrees';

-- Whether this very request (as stored: the request and the snapshot's
-- manifest list) released this snapshot of the partition before: the same
-- request again, when nothing changed, stores nothing.
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_released(table_id bigint, partition text, generation text, stored jsonb)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT EXISTS (
        SELECT FROM @extschema@.release r
         WHERE r.table_id = iceberg_released.table_id AND r.partition = iceberg_released.partition
           AND r.generation = iceberg_released.generation AND r.released
           AND r.manifest = iceberg_released.stored);
END;

-- The lake consumers whose LSN properties must hold a partition's changes
-- when it is released from an Iceberg table: a plain table's own; on a
-- sharded table (shards are databases, each with its own LSNs) the
-- partition's shard's, or every shard's for a partition of no shard. One
-- row per consumer that follows this Iceberg table (by its name, or the
-- uuid it was seen with), through any catalog server, and one row with no
-- consumer for each table in scope that has none: followed_elsewhere when
-- another shard of the table has one (then the lake's copy of this shard
-- is not known to be followed, which is a problem, never a skip).
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_lake_consumers(table_id bigint, shard text, iceberg_table text,
                                                    table_uuid text)
RETURNS TABLE (table_name text, consumer text, lsn_property text, followed_elsewhere boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH scope AS (
        SELECT t.table_id, t.table_name
          FROM @extschema@.tracked_table t
         WHERE t.untracked_at IS NULL
           AND ((t.table_id = iceberg_lake_consumers.table_id AND t.kind <> 'sharded')
                OR (t.shard_of = iceberg_lake_consumers.table_id
                    AND (iceberg_lake_consumers.shard IS NULL OR t.shard = iceberg_lake_consumers.shard)))),
    followed AS (
        SELECT l.table_id, l.consumer, l.lsn_property
          FROM @extschema@.lake_consumer l
         WHERE l.delta_table IS NULL
           AND (l.iceberg_table = iceberg_lake_consumers.iceberg_table
                OR l.seen_table_uuid = iceberg_lake_consumers.table_uuid))
    SELECT s.table_name, f.consumer, f.lsn_property,
           f.consumer IS NULL AND EXISTS (
               SELECT FROM followed o
                 JOIN @extschema@.tracked_table t ON t.table_id = o.table_id
                WHERE t.shard_of = iceberg_lake_consumers.table_id AND t.untracked_at IS NULL)
      FROM scope s
      LEFT JOIN followed f ON f.table_id = s.table_id
     ORDER BY 1, 2;
END;

-- Why a release that names a shard as its table cannot take the Iceberg
-- partition for that shard's rows alone, or NULL: the Iceberg table holds
-- other shards of its sharded table (its specs have a field "shard", or a
-- lake consumer of another shard follows it) and the partition's key does
-- not name this shard (shard=<label>). One shard's verdict would release
-- every shard's rows, which the gate never lets a manifest's "shard" do
-- either (_shard_scope_problem).
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_shard_scope(table_id bigint, partition text, iceberg_table text,
                                                 table_uuid text, shard_field boolean)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
    sharded text;
    other text;
BEGIN
    SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = iceberg_shard_scope.table_id;
    IF tt.shard_of IS NULL
       OR tt.shard = ANY (ARRAY(SELECT m[1] FROM regexp_matches(partition, '(?:^|/)shard=([^/]*)', 'g') AS m)) THEN
        RETURN NULL;
    END IF;
    SELECT s.table_name INTO sharded FROM @extschema@.tracked_table s WHERE s.table_id = tt.shard_of;
    SELECT o.table_name INTO other
      FROM @extschema@.lake_consumer l
      JOIN @extschema@.tracked_table o ON o.table_id = l.table_id
     WHERE o.shard_of = tt.shard_of AND o.table_id <> tt.table_id AND o.untracked_at IS NULL
       AND l.delta_table IS NULL
       AND (l.iceberg_table = iceberg_shard_scope.iceberg_table OR l.seen_table_uuid = iceberg_shard_scope.table_uuid)
     ORDER BY o.table_name
     LIMIT 1;
    IF other IS NULL AND NOT shard_field THEN
        RETURN NULL;
    END IF;
    RETURN pg_catalog.format('Table "%s" is shard "%s" of sharded table "%s", and Iceberg table "%s" holds other '
                             'shards'' rows too (%s), but partition "%s" does not name shard=%s: its files may hold '
                             'every shard''s rows, which one shard''s verdict cannot release. Release "%s" with the '
                             'shard in the partition ({"shard": "%s", ...}), or without it once every shard is final.',
                             tt.table_name, tt.shard, sharded, iceberg_table,
                             CASE WHEN other IS NOT NULL
                                  THEN pg_catalog.format('a lake consumer of shard "%s" follows it', other)
                                  ELSE 'its partition specs have a field "shard"' END,
                             partition, tt.shard, sharded, tt.shard);
END
$$;

-- The CDC ranges of a table's facts that hold changes committed in
-- [period_start, period_end), at most 20, as the row-count problems name
-- them: [{"start_lsn", "end_lsn", "inserts", "updates", "deletes", "inside"}].
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_ranges(table_id bigint, period_start timestamptz, period_end timestamptz)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT coalesce(jsonb_agg(x.r ORDER BY x.start_lsn), '[]')
      FROM (SELECT f.start_lsn,
                   jsonb_build_object('start_lsn', f.start_lsn, 'end_lsn', f.end_lsn, 'inserts', f.inserts,
                                      'updates', f.updates, 'deletes', f.deletes,
                                      'inside', f.first_commit_time >= iceberg_ranges.period_start
                                                AND f.last_commit_time < iceberg_ranges.period_end) AS r
              FROM @extschema@.fact f
             WHERE f.table_id = iceberg_ranges.table_id AND f.kind = 'range'
               AND f.first_commit_time < iceberg_ranges.period_end
               AND f.last_commit_time >= iceberg_ranges.period_start
             ORDER BY f.start_lsn
             LIMIT 20) AS x;
END;

-- What the CDC facts say against an Iceberg partition of [period_start,
-- period_end) of table_name (the table whose verdict decides), beyond
-- finality (checked by the gate's own rule): its row count under the
-- request's rule ('default': net for an event-time table, else none;
-- records less position deletes against inserts, inserts
-- less deletes, or every change) and, for each lake consumer of a table the
-- partition holds (lake: _iceberg_lake_consumers' rows with the LSN the
-- audited snapshot's ancestry carries in each one's property), whether
-- that LSN reaches every change of that table (the shard's own, in its own
-- LSN space) committed before period_end. A count that cannot be known
-- (equality deletes, facts that are not exact) and a shard whose lake
-- consumer is missing where other shards have one are problems too:
-- nothing is published on a guess.
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_checks(table_name text, period_start timestamptz, period_end timestamptz,
                                            row_rule text, records bigint, position_deletes bigint,
                                            uncountable_delete_files bigint, lake jsonb)
RETURNS TABLE (code text, detail text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    f record;
    expected bigint;
    actual bigint := records - position_deletes;
    span text := pg_catalog.format('[%s, %s)', period_start, period_end);
    behind record;
    c record;
    held bigint;
BEGIN
    IF row_rule = 'default' THEN
        row_rule := CASE WHEN tt.event_time_column IS NOT NULL THEN 'net' ELSE 'none' END;
    END IF;
    IF row_rule <> 'none' THEN
        SELECT x.facts, x.is_final, x.exact INTO f
          FROM finalize_internal.period_facts(table_name, period_start, period_end) AS x;
        expected := CASE row_rule
            WHEN 'inserts' THEN (f.facts ->> 'inserts')::bigint
            WHEN 'net' THEN (f.facts ->> 'inserts')::bigint - (f.facts ->> 'deletes')::bigint
            ELSE (f.facts ->> 'inserts')::bigint + (f.facts ->> 'updates')::bigint + (f.facts ->> 'deletes')::bigint
        END;
        IF uncountable_delete_files > 0 THEN
            code := 'row_count_unknown';
            detail := pg_catalog.format('The partition has %s delete file(s) whose deleted rows cannot be counted from '
                                        'the manifests (equality deletes, or position deletes that do not name one '
                                        'live data file of the partition written before them, or that share one), so '
                                        'its row count cannot be checked against the CDC facts; compact them away '
                                        '(rewrite the data files) and audit again, or release with "row_count": '
                                        '"none".', uncountable_delete_files);
            RETURN NEXT;
        ELSIF f.is_final IS NOT TRUE THEN
            NULL;       -- not_finalized says it: a count may still change
        ELSIF f.exact IS NOT TRUE OR expected IS NULL THEN
            code := 'row_count_unknown';
            detail := pg_catalog.format('The CDC facts of %s are not exact (%s CDC range(s) straddle its boundaries, or '
                                        'tracking did not cover it), so the partition''s %s rows cannot be checked '
                                        'against them.', span, coalesce(f.facts ->> 'straddling_ranges', '?'), actual);
            RETURN NEXT;
        ELSIF row_rule = 'inserts' AND ((f.facts ->> 'updates')::bigint > 0 OR (f.facts ->> 'deletes')::bigint > 0) THEN
            code := 'row_count_unknown';
            detail := pg_catalog.format('The release says the table is append-only ("row_count": "inserts"), but the '
                                        'CDC facts of %s record %s update(s) and %s delete(s); say "net" or '
                                        '"changes" for what the lake table holds. Ranges: %s', span,
                                        f.facts ->> 'updates', f.facts ->> 'deletes',
                                        finalize_internal.iceberg_ranges(tt.table_id, period_start, period_end));
            RETURN NEXT;
        ELSIF actual <> expected THEN
            code := 'row_count_mismatch';
            detail := pg_catalog.format('The partition''s files hold %s row(s) (%s record(s) less %s position '
                                        'delete(s)), but the CDC facts of %s say %s (%s: %s insert(s), %s update(s), '
                                        '%s delete(s)): %s. Ranges: %s', actual, records, position_deletes, span,
                                        expected, row_rule, f.facts ->> 'inserts', f.facts ->> 'updates',
                                        f.facts ->> 'deletes',
                                        CASE WHEN actual < expected THEN 'rows are missing (a dropped batch?)'
                                             ELSE 'rows are there twice or do not belong (a duplicate batch?)' END,
                                        finalize_internal.iceberg_ranges(tt.table_id, period_start, period_end));
            RETURN NEXT;
        END IF;
    END IF;
    FOR c IN SELECT x.* FROM pg_catalog.jsonb_to_recordset(lake)
                   AS x(table_name text, consumer text, lsn_property text, followed_elsewhere boolean,
                        committed_lsn text, lsn_carrier bigint)
    LOOP
        IF c.consumer IS NULL THEN
            IF c.followed_elsewhere THEN
                code := 'lake_consumer_missing';
                detail := pg_catalog.format('No lake consumer of shard "%s" follows this Iceberg table, while other '
                                            'shards of "%s" have one: whether the audited snapshot holds that '
                                            'shard''s changes committed before %s cannot be checked. Declare one '
                                            'with finalize.add_consumer(%L, ..., iceberg_server => ..., iceberg_table '
                                            '=> ..., lsn_property => ...) with the property that carries its LSN.',
                                            c.table_name, (SELECT s.table_name FROM @extschema@.tracked_table s
                                                           WHERE s.table_id = (finalize_internal.tracked(c.table_name)).shard_of),
                                            period_end, c.table_name);
                RETURN NEXT;
            END IF;
            CONTINUE;
        END IF;
        IF c.committed_lsn IS NULL THEN
            code := 'lake_behind';
            detail := pg_catalog.format('Lake consumer "%s" of "%s" follows this table by the snapshot property "%s", '
                                        'but no snapshot on the audited snapshot''s ancestry carries it, so which '
                                        'changes it holds is unknown; write the property with each commit.',
                                        c.consumer, c.table_name, c.lsn_property);
            RETURN NEXT;
            CONTINUE;
        END IF;
        held := (finalize_internal.tracked(c.table_name)).table_id;
        SELECT count(*) AS n, max(x.end_lsn) AS last INTO behind
          FROM @extschema@.fact x
         WHERE x.table_id = held AND x.kind = 'range' AND x.first_commit_time < period_end
           AND x.end_lsn > c.committed_lsn::@extschema@.lsn AND x.inserts + x.updates + x.deletes > 0;
        IF behind.n > 0 THEN
            code := 'lake_behind';
            detail := pg_catalog.format('The audited snapshot holds the change log of "%s" up to %s (snapshot %s''s '
                                        '"%s", lake consumer "%s"), but %s CDC range(s) of it with changes committed '
                                        'before %s reach up to %s: the snapshot may lack some of the period''s rows.',
                                        c.table_name, c.committed_lsn, c.lsn_carrier, c.lsn_property, c.consumer,
                                        behind.n, period_end, behind.last);
            RETURN NEXT;
        END IF;
    END LOOP;
END
$$;
