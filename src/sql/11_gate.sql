-- The release gate: object stores, the catalog view of partitions, release
-- attempts and the published marker of each partition.

-- Object stores are foreign servers of finalize_s3 (and of finalize_azure,
-- 11d_wrapper_azure.sql); keys live in user mappings, and the gate uses the
-- calling user's mapping.
CREATE OR REPLACE FUNCTION finalize_internal.s3_validator(options text[], catalog oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_s3_validator'
LANGUAGE C STRICT;

-- Checks a location or path inside a store: relative, no "." or ".." parts,
-- no empty parts; the error names the argument.
CREATE OR REPLACE FUNCTION finalize_internal.check_location(location text, argname text, trailing_slash boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(location, argname);
    IF location = '' OR location LIKE '/%' OR location ~ '(^|/)\.\.?(/|$)' OR location ~ '//'
       OR (NOT trailing_slash AND location LIKE '%/') THEN
        RAISE EXCEPTION 'invalid value for argument %: "%"', argname, location
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A location is a relative path inside the store, without a leading /, without empty, "." or ".." parts.';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION finalize_internal.lock_table_catalog(table_id bigint, exclusive boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM FROM @extschema@.tracked_table t
     WHERE t.table_id = lock_table_catalog.table_id AND t.untracked_at IS NULL FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tracked table with id % was untracked meanwhile', table_id
            USING ERRCODE = 'serialization_failure',
                  DETAIL = 'It was untracked (and perhaps tracked again under a new id) during the call; nothing was released or registered.',
                  HINT = 'Try again.';
    END IF;
    INSERT INTO @extschema@.catalog_lock VALUES (table_id, '') ON CONFLICT DO NOTHING;
    IF exclusive THEN
        PERFORM FROM @extschema@.catalog_lock c WHERE c.table_id = lock_table_catalog.table_id AND c.partition = '' FOR UPDATE;
    ELSE
        PERFORM FROM @extschema@.catalog_lock c WHERE c.table_id = lock_table_catalog.table_id AND c.partition = '' FOR SHARE;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION finalize_internal.lock_partition(table_id bigint, partition text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM finalize_internal.lock_table_catalog(table_id, false);
    INSERT INTO @extschema@.catalog_lock VALUES (table_id, partition) ON CONFLICT DO NOTHING;
    PERFORM FROM @extschema@.catalog_lock c
     WHERE c.table_id = lock_partition.table_id AND c.partition = lock_partition.partition FOR UPDATE;
END
$$;

-- The body of finalize.register_partition, run as the extension's owner by its C entry
-- point (owner.c) with the caller taken before the switch.
CREATE OR REPLACE FUNCTION finalize_internal.register_partition(
    caller name,
    table_name text, partition text, location text,
    period_start timestamptz DEFAULT NULL, period_end timestamptz DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    span_end timestamptz;
BEGIN
    PERFORM finalize_internal.require(partition, 'partition');
    PERFORM finalize_internal.check_location(location, 'location', true);
    IF period_end IS NOT NULL AND period_start IS NULL THEN
        RAISE EXCEPTION 'argument period_end needs period_start'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Give the start of the first period the partition holds as well.';
    END IF;
    -- Whole periods of the table, so that the gate checks the right ones.
    IF period_start IS NOT NULL THEN
        span_end := finalize_internal.check_period_span(period_start, period_end, tt.granularity, tt.period_zone,
                                                   format('partition "%s" of "%s"', partition, tt.table_name));
    END IF;
    PERFORM finalize_internal.lock_partition(tt.table_id, partition);
    INSERT INTO @extschema@.partition_registration AS r (table_id, partition, location, registered_by,
                                                         period_start, period_end)
    VALUES (tt.table_id, partition, location, caller, period_start, span_end)
    ON CONFLICT ON CONSTRAINT partition_registration_pkey DO UPDATE
       SET location = excluded.location, registered_at = now(), registered_by = excluded.registered_by,
           period_start = excluded.period_start, period_end = excluded.period_end;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.register_partition(table_name text, partition text, location text,
                                               period_start timestamptz DEFAULT NULL,
                                               period_end timestamptz DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.register_partition(text, text, text, timestamptz, timestamptz) IS
    'Register (or move) the location of a partition in the catalog view, with the periods it holds';

-- The periods registered with a partition (no row when it is not
-- registered; NULLs when it was registered without them).
CREATE OR REPLACE FUNCTION finalize_internal.registered_period(table_id bigint, partition text,
                                               OUT period_start timestamptz, OUT period_end timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT r.period_start, r.period_end FROM @extschema@.partition_registration r
     WHERE r.table_id = registered_period.table_id AND r.partition = registered_period.partition;
END;

-- Renders a projection template for a period start, in the local time of
-- the table's zone (zero-padded): dt={date} is the local date of a local
-- day. A period that starts at the end of a DST gap renders the local time
-- it starts at.
CREATE OR REPLACE FUNCTION @extschema@.render_location(location_template text, period_start timestamptz, zone text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN replace(replace(replace(replace(replace(replace(location_template,
        '{year}', to_char(timezone(zone, period_start), 'YYYY')),
        '{month}', to_char(timezone(zone, period_start), 'MM')),
        '{day}', to_char(timezone(zone, period_start), 'DD')),
        '{hour}', to_char(timezone(zone, period_start), 'HH24')),
        '{minute}', to_char(timezone(zone, period_start), 'MI')),
        '{date}', to_char(timezone(zone, period_start), 'YYYY-MM-DD'));
COMMENT ON FUNCTION @extschema@.render_location(text, timestamptz, text) IS
    'The location a projection template gives a period (placeholders {year} {month} {day} {hour} {minute} {date}, in the local time of the zone)';

-- The same for a shard's partition of a sharded table: {shard} is the
-- shard's label (as in shard={shard}/dt={date}/).
CREATE OR REPLACE FUNCTION @extschema@.render_location(location_template text, period_start timestamptz, zone text, shard text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN replace(@extschema@.render_location(location_template, period_start, zone), '{shard}', shard);
COMMENT ON FUNCTION @extschema@.render_location(text, timestamptz, text, text) IS
    'The location a projection template gives a period of a shard (placeholders {year} {month} {day} {hour} {minute} {date} in the local time of the zone, and {shard})';

CREATE OR REPLACE FUNCTION @extschema@.render_location(location_template text, period_start timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.render_location(location_template, period_start, 'UTC');
COMMENT ON FUNCTION @extschema@.render_location(text, timestamptz) IS
    'The location a projection template gives a period (placeholders {year} {month} {day} {hour} {minute} {date}, UTC)';

-- The body of finalize.set_projection, run as the extension's owner by its C entry
-- point (owner.c) with the caller taken before the switch.
CREATE OR REPLACE FUNCTION finalize_internal.set_projection(
    caller name,
    table_name text, location_template text,
                                           range_start timestamptz, range_end timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    id bigint := tt.table_id;
    rest text;
BEGIN
    PERFORM finalize_internal.require(location_template, 'location_template');
    PERFORM finalize_internal.require(range_start, 'range_start');
    PERFORM finalize_internal.require(range_end, 'range_end');
    rest := regexp_replace(location_template, '\{(year|month|day|hour|minute|date|shard)\}', '', 'g');
    IF rest ~ '[{}]' OR location_template !~ '\{(year|month|day|hour|minute|date)\}' THEN
        RAISE EXCEPTION 'invalid value for argument location_template: "%"', location_template
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A template uses the placeholders {year}, {month}, {day}, {hour}, {minute} and {date} (the local date, YYYY-MM-DD, in the table''s period_zone), on a sharded table also {shard}, and no other braces.',
                  HINT = 'For example ''dt={date}/'' or ''year={year}/month={month}/day={day}/hour={hour}/''.';
    END IF;
    -- {shard} is the label of a shard of a sharded table (finalize.add_shard).
    IF location_template ~ '\{shard\}' AND tt.kind <> 'sharded' THEN
        RAISE EXCEPTION 'invalid value for argument location_template: table "%" is not sharded, so it has no {shard}', tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The placeholder {shard} is the label of the shard a partition of a sharded table holds (finalize.track_sharded, finalize.add_shard).',
                  HINT = 'Remove {shard} from the template.';
    END IF;
    PERFORM finalize_internal.check_location(@extschema@.render_location(location_template, range_start,
                                                                    (finalize_internal.tracked(table_name)).period_zone),
                                        'location_template', true);
    IF range_end <= range_start THEN
        RAISE EXCEPTION 'invalid projection range from % to %', range_start, range_end
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'range_end must be after range_start.';
    END IF;
    PERFORM finalize_internal.lock_table_catalog(id, true);
    INSERT INTO @extschema@.projection AS p (table_id, location_template, range_start, range_end, set_by)
    VALUES (id, location_template, range_start, range_end, caller)
    ON CONFLICT ON CONSTRAINT projection_pkey DO UPDATE
       SET location_template = excluded.location_template, range_start = excluded.range_start,
           range_end = excluded.range_end, set_at = now(), set_by = excluded.set_by;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.set_projection(table_name text, location_template text,
                                           range_start timestamptz, range_end timestamptz)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.set_projection(text, text, timestamptz, timestamptz) IS
    'Declare partition projection for a table: a location template and the range of visible periods';

-- Why a partition of a sharded table cannot be released as shard
-- `shard`'s alone, judged by that shard's verdict (NULL when it can). A
-- shard's verdict decides only a partition the catalog binds to that
-- shard: one whose key names it (shard=<label>), or one that is not
-- registered and that the table's projection places by a template with
-- {shard} (rendered with the shard: the only location the gate then
-- accepts). A registered location, or a template without {shard}, may
-- hold every shard, whatever the manifest's "shard" says. And a partition
-- keeps the scope it was published with: its marker is keyed by the
-- partition alone, so a partition published as every shard's, or as
-- another shard's, is never published again as this shard's (its readers
-- would be sent to one shard's data, judged by one shard's verdict, where
-- they read more or other). The gate asks before the partition's lock
-- (_gate_table) and again after it (_catalog_view).
CREATE OR REPLACE FUNCTION finalize_internal.shard_scope_problem(table_id bigint, partition text, shard text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    sharded text;
    reg @extschema@.partition_registration;
    template text;
    pub_generation text;
    pub_shard text;
BEGIN
    IF shard IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT t.table_name INTO sharded FROM @extschema@.tracked_table t WHERE t.table_id = shard_scope_problem.table_id;
    IF NOT shard = ANY (ARRAY(SELECT m[1] FROM regexp_matches(partition, '(?:^|/)shard=([^/]*)', 'g') AS m)) THEN
        SELECT r.* INTO reg FROM @extschema@.partition_registration r
         WHERE r.table_id = shard_scope_problem.table_id AND r.partition = shard_scope_problem.partition;
        IF FOUND THEN
            RETURN format('Partition "%s" of sharded table "%s" names no shard (shard=<label>), and the catalog registers it at "%s", a location that may hold every shard, so it cannot be released as shard "%s"''s alone: it is checked as a partition of every shard. Name the shard in the partition key (shard=%s/...), or leave "shard" out of the manifest to release it once every shard is final.',
                          partition, sharded, reg.location, left(shard, 63), left(shard, 63));
        END IF;
        SELECT p.location_template INTO template FROM @extschema@.projection p
         WHERE p.table_id = shard_scope_problem.table_id;
        IF template IS NULL OR strpos(template, '{shard}') = 0 THEN
            RETURN format('Partition "%s" of sharded table "%s" names no shard (shard=<label>), and %s, so it cannot be released as shard "%s"''s alone: it is checked as a partition of every shard. Name the shard in the partition key (shard=%s/...), project the table with {shard} in its template, or leave "shard" out of the manifest to release it once every shard is final.',
                          partition, sharded,
                          CASE WHEN template IS NULL THEN 'the catalog neither registers nor projects it'
                               ELSE format('the projection places it by template "%s", which has no {shard} and may hold every shard', template) END,
                          left(shard, 63), left(shard, 63));
        END IF;
    END IF;
    SELECT p.generation, r.report -> 'catalog' ->> 'shard' INTO pub_generation, pub_shard
      FROM @extschema@.published p JOIN @extschema@.release r ON r.release_id = p.release_id
     WHERE p.table_id = shard_scope_problem.table_id AND p.partition = shard_scope_problem.partition;
    IF FOUND AND pub_shard IS DISTINCT FROM shard THEN
        RETURN format('Partition "%s" of sharded table "%s" is published as %s (generation "%s"), and a partition has one marker whatever shard it holds: released as shard "%s"''s, it would send its readers to %s. It is checked as a partition of every shard. %s keys of their own (shard=%s/...).',
                      partition, sharded,
                      CASE WHEN pub_shard IS NULL THEN 'a partition of every shard'
                           ELSE format('shard "%s"''s partition', pub_shard) END,
                      pub_generation, left(shard, 63),
                      CASE WHEN pub_shard IS NULL
                           THEN 'one shard''s data, judged by that shard''s verdict alone, where they read every shard''s'
                           ELSE 'another shard''s data' END,
                      CASE WHEN pub_shard IS NULL THEN 'Release it without "shard", or give each shard''s partitions'
                           ELSE 'Give each shard''s partitions' END,
                      left(shard, 63));
    END IF;
    RETURN NULL;
END
$$;

-- What else the catalog places at or inside a generation's location
-- ("location", ending in "/"): a partition released there on the verdict
-- of one shard and of the periods [period_start, period_end) is complete
-- only if the location holds nothing of another shard or of other
-- periods. The other partitions' registered locations and published
-- prefixes (Iceberg releases aside, whose files are their snapshots'), and
-- what a projection renders for the periods next to these, of the table
-- and of every table of its sharded table (the sharded table and each
-- shard, dropped ones included: their files stay), are such evidence: a
-- template without {shard} places every shard's partition of a period at
-- one location, a coarser template (dt={date}/ on an hourly table) the
-- neighbouring periods, one without {date} or {day} (h={hour}/) the same
-- hour of every day of its range, and a location registered for two
-- shards holds both. At most one row per problem, the first such entry by location:
-- unknown_shard when the release is one shard's (scope: the sharded
-- table's partition of shard "shard", or a shard named as the table) and
-- the entry holds another shard or every shard (holds NULL),
-- catalog_mismatch when the entry's periods, [entry_start, entry_end)
-- (NULL: not known), are not inside the release's. entry says what the
-- catalog does, for the problem's detail.
CREATE OR REPLACE FUNCTION finalize_internal.location_sharers(table_id bigint, partition text, location text,
                                              period_start timestamptz, period_end timestamptz, shard text)
RETURNS TABLE (code text, entry text, holds text, entry_start timestamptz, entry_end timestamptz,
               scope text, sharded_table text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
    root bigint;
    label text;
    upper text := left(location, -1) || '0';
    near timestamptz[];
BEGIN
    SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = location_sharers.table_id;
    root := coalesce(tt.shard_of, tt.table_id);
    label := CASE WHEN tt.shard_of IS NOT NULL THEN tt.shard ELSE shard END;
    -- The period before the partition's, its first one and the one after it
    -- (a coarser template's neighbours), and the periods an hour, a day, a
    -- month or two, a year or four away in local time (where a template
    -- without {hour}, {day}, {month} or {year} places them again: day 31 is
    -- back within two months, February 29 within four years).
    near := ARRAY[@extschema@.period_start(period_start - interval '1 microsecond', tt.granularity, tt.period_zone),
                  period_start, period_end]
            || ARRAY(SELECT @extschema@.period_start(timezone(tt.period_zone, timezone(tt.period_zone, period_start) + x.d),
                                                     tt.granularity, tt.period_zone)
                       FROM unnest(ARRAY['1 hour', '1 day', '1 month', '2 months', '1 year', '4 years']::interval[]) AS s(d)
                      CROSS JOIN LATERAL (VALUES (s.d), (-s.d)) AS x(d));
    RETURN QUERY
    WITH family AS (
        SELECT x.table_id, x.table_name, x.shard FROM @extschema@.tracked_table x
         WHERE x.table_id = root OR x.shard_of = root),
    entries AS (
        SELECT rtrim(g.location, '/') || '/' AS at,
               format('registers partition "%s" of "%s" at "%s"', g.partition, f.table_name, g.location) AS what,
               coalesce(f.shard, (regexp_match(g.partition, '(?:^|/)shard=([^/]*)'))[1]) AS holder,
               g.period_start AS p_start, g.period_end AS p_end
          FROM @extschema@.partition_registration g JOIN family f ON f.table_id = g.table_id
         WHERE ((rtrim(g.location, '/') || '/') COLLATE "C") >= (location COLLATE "C")
           AND ((rtrim(g.location, '/') || '/') COLLATE "C") < (upper COLLATE "C")
           AND NOT (g.table_id = location_sharers.table_id AND g.partition = location_sharers.partition)
        UNION ALL
        SELECT q.prefix,
               format('publishes generation "%s" of partition "%s" of "%s" at "%s"', q.generation, q.partition,
                      f.table_name, q.prefix),
               coalesce(f.shard, r.report -> 'catalog' ->> 'shard'), r.period_start, r.period_end
          FROM @extschema@.published q JOIN family f ON f.table_id = q.table_id
          JOIN @extschema@.release r ON r.release_id = q.release_id
         WHERE (q.prefix COLLATE "C") >= (location COLLATE "C") AND (q.prefix COLLATE "C") < (upper COLLATE "C")
           AND NOT (q.table_id = location_sharers.table_id AND q.partition = location_sharers.partition)
           AND NOT coalesce(r.manifest ? 'iceberg', false)
        UNION ALL
        SELECT v.at,
               format('projects %s of "%s" at "%s" (template "%s")',
                      CASE WHEN v.holder IS NOT NULL THEN format('shard "%s"''s partition', v.holder)
                           WHEN tt.kind = 'sharded' OR tt.shard_of IS NOT NULL THEN 'every shard''s partition'
                           ELSE 'the partition' END, f.table_name, v.at, j.location_template),
               v.holder, c.p, @extschema@.period_end(c.p, tt.granularity, tt.period_zone)
          FROM @extschema@.projection j JOIN family f ON f.table_id = j.table_id
         CROSS JOIN LATERAL unnest(near) AS c(p)
         -- A shard's own template renders its shard; a sharded table's with
         -- {shard} every shard it ever had; one without {shard}, every shard.
         CROSS JOIN LATERAL (
             SELECT coalesce(f.shard, s.label) AS holder,
                    @extschema@.render_location(j.location_template, c.p, tt.period_zone,
                                                coalesce(f.shard, s.label, '{shard}')) AS at
               FROM (SELECT x.shard FROM @extschema@.tracked_table x
                      WHERE f.shard IS NULL AND strpos(j.location_template, '{shard}') > 0 AND x.shard_of = f.table_id
                     UNION ALL
                     SELECT NULL WHERE f.shard IS NOT NULL OR strpos(j.location_template, '{shard}') = 0) AS s(label)) AS v
         WHERE c.p >= j.range_start AND c.p < j.range_end AND starts_with(v.at, location)),
    problems AS (
        SELECT 'unknown_shard' AS code, e.* FROM entries e
         WHERE label IS NOT NULL AND e.holder IS DISTINCT FROM label
        UNION ALL
        SELECT 'catalog_mismatch', e.* FROM entries e
         WHERE NOT coalesce(e.p_start >= period_start AND e.p_end <= period_end, false))
    SELECT DISTINCT ON (p.code) p.code, p.what, p.holder, p.p_start, p.p_end, label,
           (SELECT t.table_name FROM @extschema@.tracked_table t WHERE t.table_id = root)
      FROM problems p
     ORDER BY p.code, p.at COLLATE "C", p.p_start DESC NULLS FIRST, p.what;
END
$$;

-- The catalog view of one partition, as the gate sees it: where the catalog
-- points (registration first, else projection), or why it cannot. shard:
-- the label of the shard the partition holds, on a sharded table ({shard}
-- of a projection; without one the template keeps it, and places the
-- partition nowhere a generation is). The gate reads it once it holds the
-- partition's lock: the shard it judges the partition by (_gate_table,
-- before the lock) must still be one the catalog binds the partition to,
-- else a registration, projection or release committed meanwhile changed
-- that and nothing is released (serialization failure; a retry reports
-- why).
CREATE OR REPLACE FUNCTION finalize_internal.catalog_view(table_id bigint, partition text, period_start timestamptz, shard text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    reg @extschema@.partition_registration;
    proj @extschema@.projection;
    zone text;
    unbound text;
BEGIN
    unbound := finalize_internal.shard_scope_problem(table_id, partition, shard);
    IF unbound IS NOT NULL THEN
        RAISE EXCEPTION 'could not serialize access to the catalog of partition "%" of "%"', partition,
                        (SELECT t.table_name FROM @extschema@.tracked_table t WHERE t.table_id = catalog_view.table_id)
            USING ERRCODE = 'serialization_failure',
                  DETAIL = format('Another transaction changed the catalog view or the published marker of the partition while the gate checked it as shard "%s"''s; nothing was released. %s',
                                  left(shard, 63), unbound),
                  HINT = 'Retry the release: the gate then reports what the catalog says now.';
    END IF;
    SELECT r.* INTO reg FROM @extschema@.partition_registration r
     WHERE r.table_id = catalog_view.table_id AND r.partition = catalog_view.partition;
    IF FOUND THEN
        RETURN jsonb_build_object('source', 'registration', 'location', reg.location,
                                  'registered_at', reg.registered_at, 'registered_by', reg.registered_by)
               || CASE WHEN reg.period_start IS NOT NULL
                       THEN jsonb_build_object('period_start', reg.period_start, 'period_end', reg.period_end)
                       ELSE '{}' END
               || CASE WHEN shard IS NOT NULL THEN jsonb_build_object('shard', shard) ELSE '{}' END;
    END IF;
    SELECT p.* INTO proj FROM @extschema@.projection p WHERE p.table_id = catalog_view.table_id;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('source', 'none');
    END IF;
    IF period_start IS NULL THEN
        RETURN jsonb_build_object('source', 'projection', 'template', proj.location_template,
                                  'range_start', proj.range_start, 'range_end', proj.range_end,
                                  'location', NULL)
               || CASE WHEN shard IS NOT NULL THEN jsonb_build_object('shard', shard) ELSE '{}' END;
    END IF;
    SELECT t.period_zone INTO zone FROM @extschema@.tracked_table t WHERE t.table_id = catalog_view.table_id;
    RETURN jsonb_build_object('source', 'projection', 'template', proj.location_template,
                              'range_start', proj.range_start, 'range_end', proj.range_end,
                              'in_range', period_start >= proj.range_start AND period_start < proj.range_end,
                              'location', @extschema@.render_location(proj.location_template, period_start, zone,
                                                                      coalesce(shard, '{shard}')))
           || CASE WHEN shard IS NOT NULL THEN jsonb_build_object('shard', shard) ELSE '{}' END;
END
$$;

-- The catalog view of a partition as typed columns, for the gate's C code
-- (which then needs no operators of its own).
CREATE OR REPLACE FUNCTION finalize_internal.gate_catalog(table_id bigint, partition text, period_start timestamptz, shard text)
RETURNS TABLE (catalog jsonb, source text, location text, in_range boolean, range_start text,
               range_end text, registered_at text, registered_by text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT c, c ->> 'source', c ->> 'location', (c ->> 'in_range')::boolean, c ->> 'range_start',
           c ->> 'range_end', c ->> 'registered_at', c ->> 'registered_by'
      FROM finalize_internal.catalog_view(table_id, partition, period_start, shard) AS c;
END;

-- The manifest's table as the gate checks it (or the not-tracked error):
-- its id and periods, the table whose verdict and facts decide whether the
-- partition's periods are final (verdict_table), and on a sharded table
-- the shard the partition holds: the partition key's shard=<label>, else
-- the manifest's "shard" (manifest_shard) where the catalog binds the
-- partition to it (_shard_scope_problem). A shard's partition is final
-- when that shard is; a partition of no shard, when every shard is. A
-- "shard" the catalog does not bind the partition to, or that is not the
-- scope the partition was published with, is never believed:
-- the partition is checked as one of every shard (shard NULL) and
-- shard_problem says why (the gate's problem unknown_shard, so it is not
-- released). A partition of a shard the table does not have gets no
-- verdict_table and says why in shard_problem too, and so does a shard
-- named as the table whose partition key names another. A "shard" on a table
-- that is not sharded, or one that the partition key contradicts, is a
-- malformed manifest (22023).
CREATE OR REPLACE FUNCTION finalize_internal.gate_table(table_name text, partition text, manifest_shard text)
RETURNS TABLE (table_id bigint, granularity interval, period_zone text, verdict_table text, shard text,
               shard_problem text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(gate_table.table_name);
    named text[];
    label text;
    part text;
    dropped timestamptz;
    unbound text;
BEGIN
    IF tt.kind <> 'sharded' THEN
        IF manifest_shard IS NOT NULL THEN
            RAISE EXCEPTION 'invalid manifest: field "shard" names a shard of table "%", which is not sharded', tt.table_name
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'Only a sharded table (finalize.track_sharded) has shards.',
                      HINT = 'Remove "shard" from the manifest, or name the sharded table in "table".';
        END IF;
        -- A shard named as the table releases its own partitions: a key
        -- naming another shard holds that shard's rows.
        named := ARRAY(SELECT DISTINCT m[1] FROM regexp_matches(gate_table.partition, '(?:^|/)shard=([^/]*)', 'g') AS m
                        WHERE tt.shard_of IS NOT NULL AND m[1] <> tt.shard ORDER BY 1);
        RETURN QUERY
        SELECT tt.table_id, tt.granularity, tt.period_zone, tt.table_name, NULL::text,
               CASE WHEN cardinality(named) > 0
                    THEN format('Table "%s" is shard "%s" of sharded table "%s", but partition "%s" names shard "%s": it holds that shard''s rows, which shard "%s"''s verdict cannot release. Release it as "%s/%s", or as "%s" (whose partitions are final when the shard their key names is).',
                                tt.table_name, tt.shard, s.table_name, gate_table.partition, left(named[1], 63),
                                tt.shard, s.table_name, left(named[1], 63), s.table_name) END
          FROM (SELECT NULL) AS one
          LEFT JOIN @extschema@.tracked_table s ON s.table_id = tt.shard_of;
        RETURN;
    END IF;
    named := ARRAY(SELECT DISTINCT m[1] FROM regexp_matches(gate_table.partition, '(?:^|/)shard=([^/]*)', 'g') AS m
                    ORDER BY 1);
    IF cardinality(named) > 1 THEN
        RAISE EXCEPTION 'invalid manifest: field "partition" names % shards (%)', cardinality(named),
                        array_to_string(named, ', ')
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('A partition of sharded table "%s" holds one shard (shard=<label>) or all of them (no shard).', tt.table_name);
    END IF;
    IF manifest_shard IS NOT NULL AND named[1] IS NOT NULL AND named[1] <> manifest_shard THEN
        RAISE EXCEPTION 'invalid manifest: field "shard" is "%" but the partition key "%" names shard "%"',
                        manifest_shard, gate_table.partition, named[1]
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Give the shard the partition holds, or leave "shard" out.';
    END IF;
    label := coalesce(named[1], manifest_shard);
    IF label IS NULL THEN
        RETURN QUERY SELECT tt.table_id, tt.granularity, tt.period_zone, tt.table_name, NULL::text, NULL::text;
        RETURN;
    END IF;
    -- Never one shard's verdict for a partition that may hold more.
    unbound := finalize_internal.shard_scope_problem(tt.table_id, gate_table.partition, label);
    IF unbound IS NOT NULL THEN
        RETURN QUERY SELECT tt.table_id, tt.granularity, tt.period_zone, tt.table_name, NULL::text, unbound;
        RETURN;
    END IF;
    SELECT t.table_name INTO part FROM @extschema@.tracked_table t
     WHERE t.shard_of = tt.table_id AND t.shard = label AND t.untracked_at IS NULL;
    IF FOUND THEN
        RETURN QUERY SELECT tt.table_id, tt.granularity, tt.period_zone, part, label, NULL::text;
        RETURN;
    END IF;
    SELECT max(t.untracked_at) INTO dropped FROM @extschema@.tracked_table t
     WHERE t.shard_of = tt.table_id AND t.shard = label;
    RETURN QUERY
    SELECT tt.table_id, tt.granularity, tt.period_zone, NULL::text, label,
           format('Partition "%s" holds shard "%s", which sharded table "%s" %s, so whether its periods are final cannot be checked: check the partition key (or the manifest''s "shard"), or add the shard with finalize.add_shard(%L, %L, ...).',
                  gate_table.partition, left(label, 63), tt.table_name,
                  CASE WHEN dropped IS NOT NULL THEN format('no longer has (it was dropped at %s)', dropped)
                       ELSE 'does not have' END,
                  tt.table_name, left(label, 63));
END
$$;

-- What the CDC facts say about the periods [period_start, period_end) of a
-- release (whole periods of the table): final when every one is (losses
-- included), covered and exact when every one is, the changes in them, and
-- why the first one that is not final is not (explain_verdict). Finality
-- comes from the C period arithmetic, through changes_by_period.
CREATE OR REPLACE FUNCTION finalize_internal.period_facts(table_name text, period_start timestamptz, period_end timestamptz)
RETURNS TABLE (facts jsonb, is_final boolean, covered boolean, exact boolean, changes bigint,
               straddling_ranges bigint, not_final_reason text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- An event-time table's partitions hold event periods: their facts are
    -- the rows per event period (with the late ones), not per commit time.
    IF (finalize_internal.tracked(period_facts.table_name)).event_time_column IS NOT NULL THEN
        RETURN QUERY
        SELECT jsonb_build_object('period_start', min(c.period_start), 'period_end', max(c.period_end),
                                  'periods', count(*), 'is_final', bool_and(c.is_final),
                                  'covered', bool_and(c.covered), 'exact', bool_and(c.exact),
                                  'inserts', sum(c.inserts), 'updates', sum(c.updates), 'deletes', sum(c.deletes),
                                  'late_rows', sum(c.late_rows), 'partitioned_by', 'event_time'),
               bool_and(c.is_final), bool_and(c.covered), bool_and(c.exact),
               sum(c.inserts + c.updates + c.deletes)::bigint, sum(c.straddling_ranges)::bigint,
               (@extschema@.explain_verdict(period_facts.table_name,
                                            min(c.period_start) FILTER (WHERE NOT c.is_final))).reason
          FROM @extschema@.changes_by_event_period(period_facts.table_name, period_facts.period_start,
                                                   period_facts.period_end) AS c;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT jsonb_build_object('period_start', min(c.period_start), 'period_end', max(c.period_end),
                              'periods', count(*), 'is_final', bool_and(c.is_final),
                              'covered', bool_and(c.covered), 'exact', bool_and(c.exact),
                              'inserts', sum(c.inserts), 'updates', sum(c.updates), 'deletes', sum(c.deletes),
                              'straddling_ranges', sum(c.straddling_ranges)),
           bool_and(c.is_final), bool_and(c.covered), bool_and(c.exact),
           sum(c.inserts + c.updates + c.deletes)::bigint, sum(c.straddling_ranges)::bigint,
           (@extschema@.explain_verdict(period_facts.table_name,
                                        min(c.period_start) FILTER (WHERE NOT c.is_final))).reason
      FROM @extschema@.changes_by_period(period_facts.table_name, period_facts.period_start,
                                         period_facts.period_end) AS c;
END
$$;

-- Why a partition must not be released as it is, or NULL: late rows
-- landed in its periods [period_start, period_end) after they were
-- declared final (a late_period span that overlaps them, which may be a
-- period of other periods the table had then): rows of an event-time
-- table in a final event period, or commits of a commit-time table that
-- SQL Server's clock, stepped back, stamped in a final period
-- (_store_late_commits); and this generation does not say it was built
-- after the last of them (the manifest's built_at): a correction is due.
-- Without built_at only a partition whose late rows all landed before its
-- previous release passes: that release's generation was checked against
-- them. A commit-time table whose clock went back into these periods
-- after they were final (a clock_stepped_back event that ran ahead) and
-- whose reads have not passed the commit times read before the step yet
-- (the source held, or its clock still behind them) may still get late
-- commits there, unread or unstamped: no generation can hold them, so
-- none passes until its reads do. On a sharded table the late rows and
-- steps are those of the partition's shard, or of every shard for a
-- partition of no shard (shard NULL).
CREATE OR REPLACE FUNCTION finalize_internal.late_data_problem(table_name text, partition text, period_start timestamptz,
                                               period_end timestamptz, built_at timestamptz, shard text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    ids bigint[];
    step jsonb;
    late_rows bigint;
    last_seen timestamptz;
    pub @extschema@.published;
BEGIN
    IF tt.kind = 'sharded' THEN
        ids := ARRAY(SELECT x.table_id FROM @extschema@.tracked_table x
                      WHERE x.shard_of = tt.table_id AND (shard IS NULL OR x.shard = shard));
    ELSE
        ids := ARRAY[tt.table_id];
    END IF;
    IF tt.event_time_column IS NULL THEN
        SELECT c.detail INTO step
          FROM @extschema@.fact c
          JOIN @extschema@.watermark w ON w.table_id = c.table_id
         WHERE c.table_id = ANY (ids) AND c.event = 'clock_stepped_back'
           AND (c.detail ->> 'ran_ahead')::boolean
           AND (c.detail ->> 'from')::timestamptz < period_end AND (c.detail ->> 'to')::timestamptz > period_start
           AND NOT coalesce(w.offset_commit_time > (c.detail ->> 'after_commit_time')::timestamptz, false)
         ORDER BY c.fact_id DESC LIMIT 1;
        IF step IS NOT NULL THEN
            RETURN format('SQL Server''s clock was stepped back to %s, into this partition''s periods after they were declared final (commits stamped up to %s had been read): commits stamped in them may not all be read yet, so no generation can be known to hold them. They are read once the source is not held (finalize.release_source) and its clock has passed %s; then release a generation built after the last of them (finalize.late_data says when), with "built_at" in its manifest.',
                          step ->> 'commit_time', step ->> 'after_commit_time', step ->> 'after_commit_time');
        END IF;
    END IF;
    SELECT sum(l.rows), max(l.last_seen) INTO late_rows, last_seen FROM @extschema@.late_period l
     WHERE l.table_id = ANY (ids) AND l.event_period < period_end AND l.period_end > period_start;
    IF last_seen IS NULL OR built_at >= last_seen THEN
        RETURN NULL;
    END IF;
    SELECT p.* INTO pub FROM @extschema@.published p
     WHERE p.table_id = tt.table_id AND p.partition = late_data_problem.partition;
    IF built_at IS NULL AND FOUND AND pub.published_at >= last_seen THEN
        RETURN NULL;
    END IF;
    RETURN format('%s late row(s) %s after they were declared final (the last at %s)%s: a correction is due. Write a generation that includes them and give "built_at" (when its data was read, at or after %s) in its manifest.',
                  late_rows,
                  CASE WHEN tt.event_time_column IS NOT NULL THEN 'landed in this partition''s event periods'
                       ELSE 'were stamped in this partition''s periods by SQL Server''s clock, stepped back,' END,
                  last_seen,
                  CASE WHEN built_at IS NOT NULL THEN format(', after this generation was built (%s)', built_at)
                       WHEN pub.generation IS NOT NULL
                       THEN format(', after generation "%s" was released (%s)', pub.generation, pub.published_at)
                       ELSE ', and this manifest does not say when its data was read' END,
                  last_seen);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.release_gate(manifest jsonb,
                                         OUT released boolean, OUT generation text, OUT problems jsonb)
RETURNS record
AS 'MODULE_PATHNAME', 'finalize_release_gate'
LANGUAGE C VOLATILE
-- It runs parts as the extension's owner: the caller's search_path must not
-- reach them (its SPI text is schema-qualified as well).
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.release_gate(jsonb) IS
    'Compare a partition''s manifest, the object-store listing and the catalog; publish the generation if they agree';

-- The comparison alone, on a listing given as jsonb ({"key": size} or
-- {"key": {"size": n, "etag": "..."}}): for tests, benchmarks and dry runs.
CREATE OR REPLACE FUNCTION @extschema@.compare_inventories(manifest_files jsonb, listing jsonb, prefix text)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'finalize_compare_inventories'
LANGUAGE C IMMUTABLE;
COMMENT ON FUNCTION @extschema@.compare_inventories(jsonb, jsonb, text) IS
    'The problems the gate finds between a manifest''s files and a listing under a prefix';

-- A release attempt's full report: the stored one with the manifest's files
-- and the listing put back (rebuilt from the manifest and listing_delta).
CREATE OR REPLACE FUNCTION @extschema@.release_report(release_id bigint)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'finalize_release_report'
LANGUAGE C STABLE STRICT
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.release_report(bigint) IS
    'The full report of a release attempt: manifest files, listing, catalog view, facts and problems';

CREATE OR REPLACE FUNCTION @extschema@.released_generation(table_name text, partition text)
RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN (SELECT p.generation FROM @extschema@.published p
         WHERE p.table_id = finalize_internal.tracked_id(table_name) AND p.partition = released_generation.partition);
COMMENT ON FUNCTION @extschema@.released_generation(text, text) IS
    'The published generation of a partition (NULL if none was released)';

-- Every release attempt: who, when, what, outcome.
CREATE OR REPLACE VIEW @extschema@.releases AS
SELECT r.release_id, t.table_name, r.partition, r.generation, r.released,
       jsonb_array_length(r.problems) AS problem_count, r.problems,
       r.store, r.prefix, r.requested_by, r.requested_at,
       p.release_id IS NOT NULL AS current
  FROM @extschema@.release r
  JOIN @extschema@.tracked_table t USING (table_id)
  LEFT JOIN @extschema@.published p ON p.release_id = r.release_id;
COMMENT ON VIEW @extschema@.releases IS
    'Release attempts with who, when and the outcome; current marks the published one';

CREATE OR REPLACE FUNCTION finalize_internal.generation_retention()
RETURNS interval
AS 'MODULE_PATHNAME', 'finalize_generation_retention'
LANGUAGE C STABLE;

-- The prefixes a prefix lies inside: "a/", "a/b/" and "a/b/c/" for "a/b/c/".
CREATE OR REPLACE FUNCTION finalize_internal.ancestor_prefixes(prefix text)
RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN ARRAY(SELECT left(prefix, p) FROM generate_series(1, length(prefix)) AS p WHERE substr(prefix, p, 1) = '/');

-- Whether a generation's prefix (ending in "/") contains or lies inside a
-- location readers may be sent to: a published prefix or a registered
-- location of any partition, or what a projection gives its period: its
-- table's, or another's of its sharded table (a shard's generation inside
-- the sharded table's projected location is live data too), rendered for
-- every shard ({shard}). Descendants are a range: in bytewise order every
-- key starting with "a/b/" lies in ["a/b/", "a/b0"), "0" following "/".
CREATE OR REPLACE FUNCTION finalize_internal.overlaps_live(prefix text, table_id bigint, period_start timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN right(overlaps_live.prefix, 1) <> '/'
    OR EXISTS (SELECT FROM @extschema@.published q
                WHERE (q.prefix COLLATE "C") >= (overlaps_live.prefix COLLATE "C")
                  AND (q.prefix COLLATE "C") < ((left(overlaps_live.prefix, -1) || '0') COLLATE "C"))
    OR EXISTS (SELECT FROM @extschema@.published q
                WHERE (q.prefix COLLATE "C") = ANY (finalize_internal.ancestor_prefixes(overlaps_live.prefix)))
    OR EXISTS (SELECT FROM @extschema@.partition_registration g
                WHERE ((rtrim(g.location, '/') || '/') COLLATE "C") >= (overlaps_live.prefix COLLATE "C")
                  AND ((rtrim(g.location, '/') || '/') COLLATE "C") < ((left(overlaps_live.prefix, -1) || '0') COLLATE "C"))
    OR EXISTS (SELECT FROM @extschema@.partition_registration g
                WHERE ((rtrim(g.location, '/') || '/') COLLATE "C") = ANY (finalize_internal.ancestor_prefixes(overlaps_live.prefix)))
    OR EXISTS (SELECT FROM @extschema@.projection j
                 JOIN @extschema@.tracked_table t ON t.table_id = j.table_id
                 -- every shard the table ever had ({shard}), and the template itself
                CROSS JOIN LATERAL (SELECT @extschema@.render_location(j.location_template, overlaps_live.period_start,
                                                                       t.period_zone, x.label) AS location
                                      FROM (SELECT s.shard FROM @extschema@.tracked_table s WHERE s.shard_of = t.table_id
                                            UNION ALL SELECT '{shard}') AS x(label)) AS r
                -- of the table, or of any table of its sharded table (the sharded
                -- table and its shards: one lake table's locations)
                WHERE j.table_id IN (SELECT x.table_id FROM @extschema@.tracked_table x
                                       JOIN @extschema@.tracked_table me
                                         ON coalesce(me.shard_of, me.table_id) IN (x.table_id, x.shard_of)
                                      WHERE me.table_id = overlaps_live.table_id)
                  AND overlaps_live.period_start >= j.range_start AND overlaps_live.period_start < j.range_end
                  AND (starts_with(r.location, overlaps_live.prefix) OR starts_with(overlaps_live.prefix, r.location)));

-- Generations that were published, then superseded longer ago than the
-- retention: their objects may be deleted. The current one never appears.
CREATE OR REPLACE FUNCTION @extschema@.retired_generations(of_table text DEFAULT NULL, retention interval DEFAULT NULL)
RETURNS TABLE (table_name text, partition text, generation text, store text, prefix text,
               superseded_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH pubs AS (
        SELECT r.table_id, r.partition, r.generation, r.store, r.prefix, r.release_id, r.requested_at,
               r.period_start, lead(r.requested_at) OVER w AS superseded_at
          FROM @extschema@.release r
         -- An Iceberg release's files are its snapshots' (Iceberg's
         -- expire_snapshots deletes them), never a generation's to retire.
         WHERE r.released AND NOT coalesce(r.manifest ? 'iceberg', false)
        WINDOW w AS (PARTITION BY r.table_id, r.partition ORDER BY r.release_id))
    SELECT t.table_name, x.partition, x.generation, x.store, x.prefix, max(x.superseded_at)
      FROM pubs x
      JOIN @extschema@.tracked_table t ON t.table_id = x.table_id
      JOIN @extschema@.published p ON p.table_id = x.table_id AND p.partition = x.partition
     WHERE x.superseded_at IS NOT NULL
       AND x.generation <> p.generation
       -- Never a prefix readers may still be sent to (of any partition, in
       -- any store: deleting it would delete live data).
       AND NOT finalize_internal.overlaps_live(x.prefix, x.table_id, x.period_start)
       AND (retired_generations.of_table IS NULL OR t.table_name = retired_generations.of_table)
     GROUP BY t.table_name, x.partition, x.generation, x.store, x.prefix
    HAVING max(x.superseded_at) < now() - coalesce(retired_generations.retention, finalize_internal.generation_retention())
     ORDER BY 1, 2, 6;
END;
COMMENT ON FUNCTION @extschema@.retired_generations(text, interval) IS
    'Superseded generations whose retention window has passed (safe to delete); never the published one';

