-- ===========================================================================
-- Publications of kind dagster (src/push/dagster.c): each final period of a
-- table becomes a runless materialization of a partition of a Dagster
-- asset, reported to a finalize_dagster server (a Dagster webserver).
-- ===========================================================================

-- The options of a dagster publication, checked and completed for
-- finalize.add_publication (which calls the function of the target's kind):
--   asset_key      required: 'a/b' (Dagster's user string, '/' between
--                  segments) or a JSON array of segments; stored as the array
--   partition_key  a template (placeholders of finalize.render_location and
--                  {start}); by default the key Dagster's own time-window
--                  partitions give the period's start: '{date}-{hour}:{minute}'
--                  (HourlyPartitionsDefinition's format) for periods shorter
--                  than a day, '{date}' (Daily, Weekly and Monthly
--                  PartitionsDefinition's) for longer ones
--   metadata       a JSON object of entries added to every materialization's
--                  metadata (finalize's own entries win on a clash)
CREATE OR REPLACE FUNCTION finalize_internal.publication_options_dagster(options jsonb, table_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    key jsonb;
    segment jsonb;
    extra text;
    template text;
    rest text;
    granularity interval;
BEGIN
    IF options IS NULL OR jsonb_typeof(options) <> 'object' THEN
        RAISE EXCEPTION 'the options of a dagster publication must be a JSON object'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('They are %s.', coalesce(jsonb_typeof(options), 'NULL')),
                  HINT = 'Give at least the asset key, such as ''{"asset_key": "lake/sales/orders"}''.';
    END IF;
    SELECT string_agg(pg_catalog.quote_literal(k), ', ' ORDER BY k) INTO extra
      FROM jsonb_object_keys(options) AS k
     WHERE k NOT IN ('asset_key', 'partition_key', 'metadata');
    IF extra IS NOT NULL THEN
        RAISE EXCEPTION 'invalid option % for a dagster publication', extra
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A dagster publication takes asset_key (required), partition_key and metadata.';
    END IF;

    -- asset_key: Dagster's segments. The report's URL carries them as path
    -- segments, which Dagster splits at '/': a segment cannot hold one.
    key := options -> 'asset_key';
    IF key IS NULL OR jsonb_typeof(key) = 'null' THEN
        RAISE EXCEPTION 'option asset_key of a dagster publication is required'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The asset key names the Dagster asset whose partitions the publication materializes.',
                  HINT = 'Give it as Dagster prints it, such as ''{"asset_key": "lake/sales/orders"}'', or as a JSON array of segments.';
    END IF;
    IF jsonb_typeof(key) = 'string' THEN
        key := to_jsonb(string_to_array(key #>> '{}', '/'));
    END IF;
    IF jsonb_typeof(key) <> 'array' OR jsonb_array_length(key) NOT BETWEEN 1 AND 32 THEN
        RAISE EXCEPTION 'invalid value for option asset_key of a dagster publication: %', options -> 'asset_key'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'An asset key is a string with ''/'' between its segments or a JSON array of 1 to 32 segments.',
                  HINT = 'For example "lake/sales/orders" or ["lake", "sales", "orders"].';
    END IF;
    FOR segment IN SELECT s FROM jsonb_array_elements(key) AS s LOOP
        IF jsonb_typeof(segment) <> 'string' OR length(segment #>> '{}') NOT BETWEEN 1 AND 255
           OR segment #>> '{}' IN ('.', '..') OR strpos(segment #>> '{}', '/') > 0
           OR segment #>> '{}' ~ '[[:cntrl:]]' THEN
            RAISE EXCEPTION 'invalid value for option asset_key of a dagster publication: %', options -> 'asset_key'
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = pg_catalog.format('Each segment is a string of 1 to 255 characters without ''/'' or control characters, and not "." or ".."; %s is not.', segment),
                      HINT = 'Write the key as Dagster prints it: its segments joined by ''/'', such as "lake/sales/orders".';
        END IF;
    END LOOP;

    -- partition_key: a template of the period's start (add_publication renders it).
    SELECT t.granularity INTO granularity FROM @extschema@.tracked_table t WHERE t.table_id = table_id;
    template := CASE WHEN options ? 'partition_key' THEN options ->> 'partition_key'
                     WHEN granularity < interval '1 day' THEN '{date}-{hour}:{minute}'
                     ELSE '{date}' END;
    IF jsonb_typeof(options -> 'partition_key') IS DISTINCT FROM 'string' AND options ? 'partition_key' THEN
        template := NULL;
    END IF;
    rest := regexp_replace(template, '\{(year|month|day|hour|minute|date|start)\}', '', 'g');
    IF template IS NULL OR length(template) NOT BETWEEN 1 AND 255 OR rest ~ '[{}]' OR rest ~ '[[:cntrl:]]'
       OR template !~ '\{(year|month|day|hour|minute|date|start)\}' THEN
        RAISE EXCEPTION 'invalid value for option partition_key of a dagster publication: %', options -> 'partition_key'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A partition key template is a string of at most 255 characters with at least one of the placeholders {year}, {month}, {day}, {hour}, {minute}, {date} (YYYY-MM-DD) and {start} (YYYY-MM-DDTHH:MI:SS), in the table''s period_zone, and no other braces.',
                  HINT = 'Match the keys of the asset''s partitions: ''{date}-{hour}:{minute}'' for HourlyPartitionsDefinition, ''{date}'' for DailyPartitionsDefinition (the default depends on the table''s granularity).';
    END IF;

    IF options ? 'metadata' AND (jsonb_typeof(options -> 'metadata') <> 'object'
                                 OR length((options -> 'metadata')::text) > 16384) THEN
        RAISE EXCEPTION 'invalid value for option metadata of a dagster publication'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The metadata is a JSON object of at most 16 kB whose entries are added to every materialization.',
                  HINT = 'For example {"owner": "sales-data"}; finalize adds its own entries (event_id, table, period_start, ...) beside them.';
    END IF;
    RETURN options || jsonb_build_object('asset_key', key, 'partition_key', template);
END
$$;
COMMENT ON FUNCTION finalize_internal.publication_options_dagster(jsonb, bigint) IS
    'The options of a dagster publication checked (asset_key, partition_key, metadata) and completed with their defaults';
