-- ===========================================================================
-- Releases of Iceberg tables: write-audit-publish with the release gate as
-- the audit (finalize.release_iceberg, src/publish/). The snapshot's own
-- manifests say what the partition holds; the catalog commit publishes it.
-- ===========================================================================

-- Release a partition of an Iceberg table: audit a snapshot (a WAP branch's
-- head, a wap.id, a snapshot id) against the store and the CDC facts, then
-- publish it through the catalog (fast-forward a branch, or create a tag).
CREATE FUNCTION @extschema@.release_iceberg(request jsonb,
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
CREATE FUNCTION @extschema@._iceberg_released(table_id bigint, partition text, generation text, stored jsonb)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT EXISTS (
        SELECT FROM @extschema@.release r
         WHERE r.table_id = _iceberg_released.table_id AND r.partition = _iceberg_released.partition
           AND r.generation = _iceberg_released.generation AND r.released
           AND r.manifest = _iceberg_released.stored);
END;

-- The LSN property of the lake consumer that follows this Iceberg table for
-- the tracked table, through any catalog server (by the table's name, or by
-- the uuid it was seen with), or NULL when none does.
CREATE FUNCTION @extschema@._iceberg_lsn_property(table_id bigint, iceberg_table text, table_uuid text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT l.lsn_property
      FROM @extschema@.lake_consumer l
     WHERE l.table_id = _iceberg_lsn_property.table_id
       AND (l.iceberg_table = _iceberg_lsn_property.iceberg_table
            OR l.seen_table_uuid = _iceberg_lsn_property.table_uuid)
     ORDER BY l.seen_table_uuid IS NOT DISTINCT FROM _iceberg_lsn_property.table_uuid DESC,
              l.iceberg_table = _iceberg_lsn_property.iceberg_table DESC, l.consumer
     LIMIT 1;
END;

-- The CDC ranges of a table's facts that hold changes committed in
-- [period_start, period_end), at most 20, as the row-count problems name
-- them: [{"start_lsn", "end_lsn", "inserts", "updates", "deletes", "inside"}].
CREATE FUNCTION @extschema@._iceberg_ranges(table_id bigint, period_start timestamptz, period_end timestamptz)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT coalesce(jsonb_agg(x.r ORDER BY x.start_lsn), '[]')
      FROM (SELECT f.start_lsn,
                   jsonb_build_object('start_lsn', f.start_lsn, 'end_lsn', f.end_lsn, 'inserts', f.inserts,
                                      'updates', f.updates, 'deletes', f.deletes,
                                      'inside', f.first_commit_time >= _iceberg_ranges.period_start
                                                AND f.last_commit_time < _iceberg_ranges.period_end) AS r
              FROM @extschema@.fact f
             WHERE f.table_id = _iceberg_ranges.table_id AND f.kind = 'range'
               AND f.first_commit_time < _iceberg_ranges.period_end
               AND f.last_commit_time >= _iceberg_ranges.period_start
             ORDER BY f.start_lsn
             LIMIT 20) AS x;
END;

-- What the CDC facts say against an Iceberg partition of [period_start,
-- period_end) of table_name (the table whose verdict decides), beyond
-- finality (checked by the gate's own rule): its row count under the
-- request's rule ('default': net for an event-time table, else none;
-- records less position deletes against inserts, inserts
-- less deletes, or every change) and, when a lake consumer follows the
-- table (lsn_property), whether the audited snapshot's committed LSN
-- reaches every change committed before period_end. A count that cannot be
-- known (equality deletes, facts that are not exact) is a problem too:
-- nothing is published on a guess.
CREATE FUNCTION @extschema@._iceberg_checks(table_name text, period_start timestamptz, period_end timestamptz,
                                            row_rule text, records bigint, position_deletes bigint,
                                            uncountable_delete_files bigint, lsn_property text,
                                            committed_lsn @extschema@.lsn, lsn_carrier bigint)
RETURNS TABLE (code text, detail text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := @extschema@._tracked(table_name);
    f record;
    expected bigint;
    actual bigint := records - position_deletes;
    span text := pg_catalog.format('[%s, %s)', period_start, period_end);
    behind record;
BEGIN
    IF row_rule = 'default' THEN
        row_rule := CASE WHEN tt.event_time_column IS NOT NULL THEN 'net' ELSE 'none' END;
    END IF;
    IF row_rule <> 'none' THEN
        SELECT x.facts, x.is_final, x.exact INTO f
          FROM @extschema@._period_facts(table_name, period_start, period_end) AS x;
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
                                        @extschema@._iceberg_ranges(tt.table_id, period_start, period_end));
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
                                        @extschema@._iceberg_ranges(tt.table_id, period_start, period_end));
            RETURN NEXT;
        END IF;
    END IF;
    IF lsn_property IS NOT NULL THEN
        IF committed_lsn IS NULL THEN
            code := 'lake_behind';
            detail := pg_catalog.format('A lake consumer follows this table by the snapshot property "%s", but no '
                                        'snapshot on the audited snapshot''s ancestry carries it, so which changes it '
                                        'holds is unknown; write the property with each commit.', lsn_property);
            RETURN NEXT;
        ELSE
            SELECT count(*) AS n, max(x.end_lsn) AS last INTO behind
              FROM @extschema@.fact x
             WHERE x.table_id = tt.table_id AND x.kind = 'range' AND x.first_commit_time < period_end
               AND x.end_lsn > committed_lsn AND x.inserts + x.updates + x.deletes > 0;
            IF behind.n > 0 THEN
                code := 'lake_behind';
                detail := pg_catalog.format('The audited snapshot holds the change log up to %s (snapshot %s''s "%s"), '
                                            'but %s CDC range(s) with changes committed before %s reach up to %s: the '
                                            'snapshot may lack some of the period''s rows.', committed_lsn,
                                            lsn_carrier, lsn_property, behind.n, period_end, behind.last);
                RETURN NEXT;
            END IF;
        END IF;
    END IF;
END
$$;
