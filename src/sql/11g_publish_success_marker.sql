-- The success_marker publications (docs/publishing.md, "_SUCCESS markers"):
-- their options, checked and completed once, when the publication is added.

-- The options of a success_marker publication of a tracked table, checked,
-- with their defaults filled in: "location", the template of the directory
-- of a period (s3://<bucket>/... on a finalize_s3 server,
-- abfss://<container>@<account>.dfs.core.windows.net/... on a finalize_azure
-- server, file:///... with no server), and "format" (paimon, empty or s3a). The C target
-- (src/push/marker.c) writes <location>/_SUCCESS for the last period of each
-- directory the template renders, once that period is final.
CREATE OR REPLACE FUNCTION finalize_internal.publication_options_success_marker(options jsonb, table_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    location text;
    format text;
    unknown text;
    rest text;
BEGIN
    IF jsonb_typeof(options) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'invalid options of a success_marker publication: %', coalesce(options::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The options are a JSON object.',
                  HINT = 'For example ''{"location": "s3://lake/orders/dt={date}/"}''.';
    END IF;
    SELECT string_agg(k, ', ' ORDER BY k) INTO unknown
      FROM jsonb_object_keys(options) AS k WHERE k NOT IN ('location', 'format', 'partition_key');
    IF unknown IS NOT NULL THEN
        RAISE EXCEPTION 'unknown option of a success_marker publication: %', unknown
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A success_marker publication takes the options location, format and partition_key.',
                  HINT = 'Check the spelling of the option.';
    END IF;
    IF jsonb_typeof(options -> 'location') IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION 'option location of a success_marker publication must be a string'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'It is the template of the directory that receives _SUCCESS, written as the release gate''s projection is.',
                  HINT = 'For example "s3://lake/orders/dt={date}/" (a finalize_s3 server) or "file:///srv/lake/orders/dt={date}/" (no server).';
    END IF;
    location := options ->> 'location';
    -- The placeholders of finalize.render_location, from the year down:
    -- each one present has every coarser one, so the directories of the
    -- periods follow each other (a directory may hold several periods:
    -- its marker waits for its last).
    rest := regexp_replace(location, '\{(year|month|day|hour|minute|date)\}', '', 'g');
    IF location !~ '^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/|abfss://[a-z0-9-]{3,63}@[a-z0-9]{3,24}\.dfs\.core\.windows\.net/|file:///[^/{])' OR location !~ '/$' OR rest ~ '[{}]'
       OR location !~ '\{(year|date)\}'
       OR (location ~ '\{day\}' AND location !~ '\{month\}')
       OR (location ~ '\{hour\}' AND location !~ '\{(day|date)\}')
       OR (location ~ '\{minute\}' AND location !~ '\{hour\}') THEN
        RAISE EXCEPTION 'invalid value for option location of a success_marker publication: "%"', location
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The location is s3://<the server''s bucket>/..., abfss://<the server''s container>@<its account>.dfs.core.windows.net/... or file:///<directory>/..., ends with "/", and names each period''s directory with the placeholders {year}, {month}, {day}, {hour}, {minute} and {date} (the local date in the table''s period_zone), each with the coarser ones ({hour} needs {date} or {day}, {month} and {year}), and no other braces.',
                  HINT = 'For example "s3://lake/orders/dt={date}/hour={hour}/" or "file:///srv/lake/orders/dt={date}/".';
    END IF;
    IF location ~ '^file:' AND substring(location FROM '^file://(/.*)/[^/]*\{') IS NULL THEN
        RAISE EXCEPTION 'invalid value for option location of a success_marker publication: "%"', location
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A local location names its store''s root directory before its first placeholder: finalize creates the directories below the root, never the root itself, and follows no link below it.',
                  HINT = 'For example "file:///srv/lake/orders/dt={date}/", whose root /srv/lake/orders must exist.';
    END IF;
    -- The directory inside its store, checked as the gate checks locations:
    -- the template as written (the message shows what the user wrote, the
    -- same every day), since a placeholder renders to digits and dashes,
    -- never to an empty, "." or ".." part or a slash.
    PERFORM finalize_internal.check_location(regexp_replace(location, '^(s3://[^/]+/|abfss://[^/]+/|file:///)', ''), 'location', true);
    format := coalesce(options ->> 'format', 'paimon');
    PERFORM finalize_internal.check_choice(format, 'format', ARRAY['paimon', 'empty', 's3a'],
        'The body of _SUCCESS: paimon (Paimon''s {"creationTime", "modificationTime"} in milliseconds, with finalize''s event), empty, or s3a (Hadoop''s S3A committer SuccessData).');
    RETURN options || jsonb_build_object('format', format);
END
$$;

-- What only the publication's store can tell of a success_marker
-- publication's location, checked when it is added (the delivery checks it
-- again, src/push/marker.c): on a finalize_s3 server, the location is in
-- the server's bucket; on a finalize_azure server, in its container; with no server, it is file:// (who may publish there,
-- pg_write_server_files, publication_server checks).
CREATE OR REPLACE FUNCTION finalize_internal.check_success_marker_store(options jsonb, server_name text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    location text := options ->> 'location';
    bucket text;
    wrapper name;
    container text;
    account text;
    base text;
BEGIN
    IF server_name IS NULL THEN
        IF location !~ '^file:' THEN
            RAISE EXCEPTION 'invalid value for option location of a success_marker publication without a server: "%"', location
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'With no server, the markers go to a directory of the database server: file:///<directory>/....',
                      HINT = 'Name the finalize_s3 or finalize_azure server that holds the location, or write the location file:///....';
        END IF;
        RETURN;
    END IF;
    SELECT w.fdwname INTO wrapper
      FROM pg_catalog.pg_foreign_server s JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
     WHERE s.srvname = server_name;
    IF wrapper = 'finalize_azure' THEN
        SELECT max(o.option_value) FILTER (WHERE o.option_name = 'container'),
               max(o.option_value) FILTER (WHERE o.option_name = 'account')
          INTO container, account
          FROM pg_catalog.pg_foreign_server s, pg_catalog.pg_options_to_table(s.srvoptions) o
         WHERE s.srvname = server_name;
        base := format('abfss://%s@%s.dfs.core.windows.net/', coalesce(container, '<container>'), coalesce(account, '<account>'));
        IF container IS NULL OR account IS NULL OR NOT starts_with(location, base) THEN
            RAISE EXCEPTION 'invalid value for option location of a success_marker publication on server "%": "%"', server_name, location
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('The markers go to the server''s container, so the location starts with %s.', base),
                      HINT = 'Write the location in the server''s container, or name the server of the location''s container.';
        END IF;
        RETURN;
    END IF;
    SELECT o.option_value INTO bucket
      FROM pg_catalog.pg_foreign_server s, pg_catalog.pg_options_to_table(s.srvoptions) o
     WHERE s.srvname = server_name AND o.option_name = 'bucket';
    IF location !~ '^s3://' OR bucket IS NULL OR NOT starts_with(location, 's3://' || bucket || '/') THEN
        RAISE EXCEPTION 'invalid value for option location of a success_marker publication on server "%": "%"', server_name, location
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('The markers go to the server''s bucket, so the location starts with s3://%s/.', coalesce(bucket, '<bucket>')),
                  HINT = CASE WHEN bucket IS NULL THEN format('Name the bucket: ALTER SERVER %I OPTIONS (ADD bucket ''...'').', server_name)
                              ELSE 'Write the location in the server''s bucket, or name the server of the location''s bucket.' END;
    END IF;
END
$$;
