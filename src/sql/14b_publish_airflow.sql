-- The options of a publication to Airflow (kind airflow, a finalize_airflow
-- server): the asset's URI, which the delivery looks up among Airflow's
-- assets, and the partition key's template. Checked when the publication
-- is added (finalize.add_publication); returned with the defaults filled.
CREATE OR REPLACE FUNCTION finalize_internal.publication_options_airflow(options jsonb, table_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    unknown text;
    uri jsonb := options -> 'asset_uri';
    key jsonb := coalesce(options -> 'partition_key', '"{start}"'::jsonb);
BEGIN
    IF options IS NULL OR jsonb_typeof(options) <> 'object' THEN
        RAISE EXCEPTION 'the options of an airflow publication are a JSON object'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'An airflow publication takes asset_uri (required) and partition_key.',
                  HINT = 'For example ''{"asset_uri": "s3://lake/sales/orders"}''.';
    END IF;
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
    IF jsonb_typeof(uri) <> 'string' OR uri ->> 0 !~ '^[\x21-\x7e]+$' OR length(uri ->> 0) > 1500 THEN
        RAISE EXCEPTION 'invalid value for option asset_uri of an airflow publication: %', uri::text
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The option asset_uri is the URI of the asset a DAG is scheduled on, as a string of at most 1,500 printable ASCII characters without spaces, written as the DAG writes it (Asset(uri=...)).',
                  HINT = 'For example ''{"asset_uri": "s3://lake/sales/orders"}''.';
    END IF;
    -- Airflow keeps at most 250 characters of a partition key and refuses a
    -- blank one; an unknown placeholder would give every period the same key.
    IF jsonb_typeof(key) <> 'string' OR key ->> 0 !~ '\S' OR length(key ->> 0) > 200
       OR regexp_replace(key ->> 0, '\{(year|month|day|hour|minute|date|start)\}', '', 'g') ~ '[{}]'
       OR key ->> 0 !~ '\{(year|month|day|hour|minute|date|start)\}' THEN
        RAISE EXCEPTION 'invalid value for option partition_key of an airflow publication: %', key::text
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A partition key template is a string of at most 200 characters with at least one of the placeholders {start} (the period''s start, local, YYYY-MM-DDTHH:MI:SS: the default), {date}, {year}, {month}, {day}, {hour} and {minute} (local, in the table''s period_zone), and no other braces.',
                  HINT = 'Leave it out for the default, which the partition mappers of Airflow (StartOfHourMapper, StartOfDayMapper, ...) read; or for example ''{date}''.';
    END IF;
    RETURN options || jsonb_build_object('partition_key', key);
END
$$;
