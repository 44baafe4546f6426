-- The options of a publication to Airflow (kind airflow, a finalize_airflow
-- server), after those of every kind (finalize_internal.publication_options:
-- an object, partition_key's template): the asset's URI, which the
-- delivery looks up among Airflow's assets, and what Airflow accepts of a
-- partition key. Returned as they are (partition_key's default is filled).
CREATE OR REPLACE FUNCTION finalize_internal.publication_options_airflow(options jsonb, table_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    unknown text;
    uri jsonb := options -> 'asset_uri';
    key text := options ->> 'partition_key';
BEGIN
    SELECT string_agg(k, ', ' ORDER BY k) INTO unknown
      FROM jsonb_object_keys(options) k WHERE k NOT IN ('asset_uri', 'partition_key');
    IF unknown IS NOT NULL THEN
        RAISE EXCEPTION 'unknown option of an airflow publication: %', unknown
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'An airflow publication takes asset_uri (the URI of the Airflow asset its events are for) and partition_key (a template of the partition key).',
                  HINT = 'Remove the option, or check its spelling.';
    END IF;
    IF uri IS NULL THEN
        RAISE EXCEPTION 'an airflow publication needs the option asset_uri'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'It is the URI of the Airflow asset the publication''s events are for: the asset a DAG is scheduled on, written as the DAG writes it (Asset(uri=...)).',
                  HINT = 'For example ''{"asset_uri": "s3://lake/sales/orders"}''.';
    END IF;
    -- Airflow refuses an asset URI that is empty or not ASCII, and keeps at
    -- most 1,500 characters of it.
    IF jsonb_typeof(uri) <> 'string' OR uri #>> '{}' !~ '^[\x21-\x7e]+$' OR length(uri #>> '{}') > 1500 THEN
        RAISE EXCEPTION 'invalid value for option asset_uri of an airflow publication: %', uri::text
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The option asset_uri is the URI of the asset a DAG is scheduled on, as a string of at most 1,500 printable ASCII characters without spaces, written as the DAG writes it (Asset(uri=...)).',
                  HINT = 'For example ''{"asset_uri": "s3://lake/sales/orders"}''.';
    END IF;
    -- Airflow refuses a blank partition key and one over 250 characters
    -- (each placeholder renders at most 19).
    IF key !~ '\S' OR length(key) + 12 * (length(key) - length(replace(key, '{', ''))) > 250 THEN
        RAISE EXCEPTION 'invalid value for option partition_key of an airflow publication: "%"', key
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Airflow takes a partition key of 1 to 250 characters, not only spaces; each placeholder renders up to 19 characters ({start}).',
                  HINT = 'Leave it out for the default, {start}, which Airflow''s partition mappers (StartOfHourMapper, StartOfDayMapper, ...) read; or for example ''{date}''.';
    END IF;
    RETURN options;
END
$$;
