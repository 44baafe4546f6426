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
