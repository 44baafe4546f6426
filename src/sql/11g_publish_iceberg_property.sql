-- The iceberg_property publication target (src/push/iceberg_property.c):
-- its options, checked and completed when a publication is added.

-- Checks and completes the options of an iceberg_property publication:
-- iceberg_table (required, named as lake consumers name it: ns.table) and
-- the names of the properties it moves, each a name or null (not written):
-- finalize's own, the period's end as UTC ISO 8601 and the event that
-- moved it, and Gobblin's completionWatermark (epoch milliseconds) with
-- its zone (a watermark set to null takes its companion with it). Returns
-- the options with the defaults filled in.
CREATE OR REPLACE FUNCTION finalize_internal.publication_options_iceberg_property(options jsonb, table_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    defaults constant jsonb := jsonb_build_object(
        'finalized_until_property', 'finalize.finalized-until',
        'event_id_property', 'finalize.event-id',
        'watermark_property', 'completionWatermark',
        'watermark_timezone_property', 'completionWatermarkTimezone');
    names constant text[] := ARRAY['finalized_until_property', 'event_id_property', 'watermark_property',
                                   'watermark_timezone_property'];
    allowed constant text[] := ARRAY['iceberg_table', 'partition_key'] || names;
    result jsonb;
    k text;
    seen text[] := '{}';
BEGIN
    IF options IS NULL OR jsonb_typeof(options) <> 'object' THEN
        RAISE EXCEPTION 'invalid options for an iceberg_property publication: %', coalesce(options::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The options are a JSON object.',
                  HINT = 'Pass at least the Iceberg table, such as ''{"iceberg_table": "sales.orders"}''.';
    END IF;
    FOR k IN SELECT jsonb_object_keys(options) LOOP
        IF NOT k = ANY (allowed) THEN
            RAISE EXCEPTION 'unknown option "%" for an iceberg_property publication', k
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('An iceberg_property publication takes the options %s.', array_to_string(allowed, ', ')),
                      HINT = 'Check the spelling of the option''s name.';
        END IF;
    END LOOP;
    IF jsonb_typeof(options -> 'iceberg_table') IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION 'option iceberg_table of an iceberg_property publication is %',
                        CASE WHEN options ? 'iceberg_table' THEN 'not a string' ELSE 'missing' END
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The publication sets properties of one Iceberg table of the catalog, named by its namespace and its name joined by dots, as lake consumers name it.',
                  HINT = 'Add it to the options, such as ''{"iceberg_table": "sales.orders"}''.';
    END IF;
    PERFORM finalize_internal.check_iceberg_table(options ->> 'iceberg_table');
    -- A watermark left out takes its companion with it, unless that is named.
    result := defaults
              || CASE WHEN jsonb_typeof(options -> 'finalized_until_property') = 'null'
                      THEN '{"event_id_property": null}'::jsonb ELSE '{}' END
              || CASE WHEN jsonb_typeof(options -> 'watermark_property') = 'null'
                      THEN '{"watermark_timezone_property": null}'::jsonb ELSE '{}' END
              || options;
    FOREACH k IN ARRAY names LOOP
        CONTINUE WHEN jsonb_typeof(result -> k) = 'null';
        IF jsonb_typeof(result -> k) <> 'string' THEN
            RAISE EXCEPTION 'option % of an iceberg_property publication is not a string', k
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'A property is named by a string, or not written when the option is null.',
                      HINT = format('Use, for example, ''{"%s": %s}''.', k, defaults -> k);
        END IF;
        PERFORM finalize_internal.check_lake_word(result ->> k, k, defaults ->> k);
        IF result ->> k = ANY (seen) THEN
            RAISE EXCEPTION 'option % of an iceberg_property publication names property "%" a second time', k, result ->> k
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'Each property the publication writes holds one value, so each needs a name of its own.',
                      HINT = 'Give each option another property name, or null to leave that property out.';
        END IF;
        seen := seen || (result ->> k);
    END LOOP;
    IF jsonb_typeof(result -> 'finalized_until_property') = 'null' AND jsonb_typeof(result -> 'watermark_property') = 'null' THEN
        RAISE EXCEPTION 'options finalized_until_property and watermark_property of an iceberg_property publication are both null'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The verdict is written to the first (UTC ISO 8601), the second (epoch milliseconds), or both: with neither, the publication would write nothing.',
                  HINT = 'Leave one of them out of the options to get its default name.';
    END IF;
    IF jsonb_typeof(result -> 'finalized_until_property') = 'null' AND jsonb_typeof(result -> 'event_id_property') = 'string' THEN
        RAISE EXCEPTION 'option event_id_property of an iceberg_property publication needs finalized_until_property'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The event id is written with the period''s end in finalized_until_property, which is null.',
                  HINT = 'Set event_id_property to null as well, or name finalized_until_property.';
    END IF;
    IF jsonb_typeof(result -> 'watermark_property') = 'null' AND jsonb_typeof(result -> 'watermark_timezone_property') = 'string' THEN
        RAISE EXCEPTION 'option watermark_timezone_property of an iceberg_property publication needs watermark_property'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The zone is written with the watermark in watermark_property, which is null.',
                  HINT = 'Set watermark_timezone_property to null as well, or name watermark_property.';
    END IF;
    RETURN result;
END
$$;
COMMENT ON FUNCTION finalize_internal.publication_options_iceberg_property(jsonb, bigint) IS
    'Check and complete the options of an iceberg_property publication';

-- What a release of a partition of table_id (its periods ending by
-- period_end) through catalog and iceberg_table may set in its publish
-- commit: the properties of the table's iceberg_property publication of
-- that Iceberg table, at its newest pending final event that ends by
-- period_end and is final now. Only while nothing of that publication can
-- be in flight: its oldest pending event is locked here until the
-- release's transaction ends (the delivery worker's claim skips it) and
-- was never attempted (an attempt without an answer may still reach the
-- table, with older values). Nothing when any of this does not hold: the
-- outbox then sets the properties, as always. The events the release
-- covers find them there (outcome already).
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_property_for_release(table_id bigint, catalog text,
                                                                          iceberg_table text, period_end timestamptz)
RETURNS TABLE (publication text, options jsonb, event_id text, event_end timestamptz, period_zone text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    p record;
    head_seq bigint;
    e @extschema@.publication_event;
BEGIN
    SELECT x.publication_id, x.name, x.options, x.created_by, x.server_name, t.table_name, t.period_zone INTO p
      FROM @extschema@.publication x
      JOIN @extschema@.tracked_table t ON t.table_id = x.table_id
     WHERE x.table_id = iceberg_property_for_release.table_id AND x.target_kind = 'iceberg_property'
       AND x.server_name = catalog AND x.options ->> 'iceberg_table' = iceberg_table
     ORDER BY x.publication_id
     LIMIT 1;
    -- As every attempt of the delivery worker: only while its declaring role may still publish.
    IF NOT FOUND OR finalize_internal.publication_refused(p.created_by, p.server_name) IS NOT NULL THEN
        RETURN;
    END IF;
    SELECT x.event_seq INTO head_seq FROM @extschema@.publication_event x
     WHERE x.publication_id = p.publication_id AND x.state = 'pending'
     ORDER BY x.event_seq LIMIT 1;
    -- The head itself, or nothing: SKIP LOCKED in the query above would pass to the next event.
    -- The conditions are the lock's own: a claimed head is never locked here, or the worker
    -- would wait for this transaction to record its outcome.
    -- A caller in REPEATABLE READ whose snapshot missed a claim gets a serialization failure:
    -- then nothing is carried, and the release goes on.
    BEGIN
        PERFORM FROM @extschema@.publication_event x
         WHERE x.event_seq = head_seq AND x.state = 'pending' AND x.claimed_at IS NULL AND x.attempts = 0
           FOR UPDATE SKIP LOCKED;
    EXCEPTION WHEN serialization_failure THEN
        RETURN;
    END;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT x.* INTO e FROM @extschema@.publication_event x
     WHERE x.publication_id = p.publication_id AND x.state = 'pending' AND x.kind = 'final'
       AND x.event_seq >= head_seq AND x.period_end <= iceberg_property_for_release.period_end
     ORDER BY x.event_seq DESC LIMIT 1;
    IF NOT FOUND OR (e.period_end <= @extschema@.finalized_until(p.table_name)) IS NOT TRUE THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT p.name::text, p.options, e.event_id::text, e.period_end, p.period_zone;
END
$$;
