-- ===========================================================================
-- Publications of kind dagster (src/push/dagster.c): each final period of a
-- table becomes a runless materialization of a partition of a Dagster
-- asset, reported to a finalize_dagster server (a Dagster webserver).
-- ===========================================================================

-- The options of a dagster publication, checked and completed for
-- finalize.add_publication (finalize_internal.publication_options checked
-- the common partition_key before, and calls this for the dagster kind):
--   asset_key      required: 'a/b' (Dagster's user string, '/' between
--                  segments) or a JSON array of segments; stored as the array
--   metadata       a JSON object of entries added to every materialization's
--                  metadata (finalize's own entries win on a clash)
-- The partition key sent is the publication's partition_key rendered; it
-- must be a key of the asset's partitions (docs/publishing.md, "Dagster":
-- '{date}-{hour}:{minute}' is HourlyPartitionsDefinition's, '{date}'
-- DailyPartitionsDefinition's).
CREATE OR REPLACE FUNCTION finalize_internal.publication_options_dagster(options jsonb, table_id bigint)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    key jsonb;
    segment jsonb;
    extra text;
BEGIN
    SELECT string_agg(k, ', ' ORDER BY k) INTO extra
      FROM jsonb_object_keys(options) AS k
     WHERE k NOT IN ('asset_key', 'partition_key', 'metadata');
    IF extra IS NOT NULL THEN
        RAISE EXCEPTION 'unknown option(s) of a dagster publication: %', extra
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A dagster publication takes asset_key (required), partition_key and metadata.';
    END IF;

    -- asset_key: Dagster's segments. The report's URL carries them as path
    -- segments, which Dagster splits at '/': a segment cannot hold one.
    key := options -> 'asset_key';
    IF key IS NULL OR jsonb_typeof(key) = 'null' THEN
        RAISE EXCEPTION 'publication option "asset_key" is required for a dagster publication'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The asset key names the Dagster asset whose partitions the publication materializes.',
                  HINT = 'Give it as Dagster prints it, such as ''{"asset_key": "lake/sales/orders"}'', or as a JSON array of segments.';
    END IF;
    IF jsonb_typeof(key) = 'string' THEN
        key := to_jsonb(string_to_array(key #>> '{}', '/'));
    END IF;
    IF jsonb_typeof(key) <> 'array' OR jsonb_array_length(key) NOT BETWEEN 1 AND 32 THEN
        RAISE EXCEPTION 'invalid publication option "asset_key": %', options -> 'asset_key'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'An asset key is a string with ''/'' between its segments or a JSON array of 1 to 32 segments.',
                  HINT = 'For example "lake/sales/orders" or ["lake", "sales", "orders"].';
    END IF;
    FOR segment IN SELECT s FROM jsonb_array_elements(key) AS s LOOP
        IF jsonb_typeof(segment) <> 'string' OR length(segment #>> '{}') NOT BETWEEN 1 AND 255
           OR segment #>> '{}' IN ('.', '..') OR strpos(segment #>> '{}', '/') > 0
           OR segment #>> '{}' ~ '[[:cntrl:]]' THEN
            RAISE EXCEPTION 'invalid publication option "asset_key": %', options -> 'asset_key'
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = pg_catalog.format('Each segment is a string of 1 to 255 characters without ''/'' or control characters, and not "." or ".."; %s is not.', segment),
                      HINT = 'Write the key as Dagster prints it: its segments joined by ''/'', such as "lake/sales/orders".';
        END IF;
    END LOOP;

    IF options ? 'metadata' AND (jsonb_typeof(options -> 'metadata') <> 'object'
                                 OR length((options -> 'metadata')::text) > 16384) THEN
        RAISE EXCEPTION 'invalid publication option "metadata" of a dagster publication'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The metadata is a JSON object of at most 16 kB whose entries are added to every materialization.',
                  HINT = 'For example {"owner": "sales-data"}; finalize adds its own entries (event_id, table, period_start, ...) beside them.';
    END IF;
    RETURN options || jsonb_build_object('asset_key', key);
END
$$;
COMMENT ON FUNCTION finalize_internal.publication_options_dagster(jsonb, bigint) IS
    'The options of a dagster publication checked (asset_key, metadata) and its asset_key stored as an array of segments';
