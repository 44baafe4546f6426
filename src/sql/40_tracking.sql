-- Registering and unregistering tracked tables (finalize_admin).

-- Raises the error every function uses for a missing argument.
CREATE FUNCTION @extschema@._require(value anyelement, argname text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL THEN
        RAISE EXCEPTION 'argument % must not be NULL', argname
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
END
$$;

-- Checks that a granularity can define periods; the error names the argument.
CREATE FUNCTION @extschema@._check_granularity(granularity interval, argname text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @extschema@._require(granularity, argname);
    IF extract(year FROM granularity) <> 0 OR extract(month FROM granularity) <> 0 THEN
        RAISE EXCEPTION 'invalid value for argument %: "%" contains months or years', argname, granularity
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Periods are aligned on a fixed origin (2000-01-01 00:00 UTC), and months have no fixed length.',
                  HINT = 'Use days, hours, minutes or seconds, for example ''1 day'' or ''15 minutes''.';
    END IF;
    IF granularity <= interval '0' THEN
        RAISE EXCEPTION 'invalid value for argument %: "%" is not positive', argname, granularity
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use a positive interval, for example ''1 hour''.';
    END IF;
END
$$;

-- Finds a server of the finalize_mssql wrapper by name; the errors say what
-- to create or fix.
CREATE FUNCTION @extschema@._mssql_server(server_name text, argname text)
RETURNS pg_catalog.pg_foreign_server
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    srv pg_foreign_server;
    wrapper name;
    opt text;
BEGIN
    PERFORM @extschema@._require(server_name, argname);
    SELECT s.* INTO srv FROM pg_foreign_server s WHERE s.srvname = server_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'server "%" does not exist', server_name
            USING ERRCODE = 'undefined_object',
                  HINT = 'Create it with CREATE SERVER ... FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host ''...'', database ''...''), then a user mapping for its login.';
    END IF;
    SELECT w.fdwname INTO wrapper FROM pg_foreign_data_wrapper w WHERE w.oid = srv.srvfdw;
    IF wrapper <> 'finalize_mssql' THEN
        RAISE EXCEPTION 'server "%" is not a SQL Server source', server_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = format('It uses the foreign-data wrapper "%s"; tracked tables need a server of finalize_mssql.', wrapper),
                  HINT = 'Create a server with CREATE SERVER ... FOREIGN DATA WRAPPER finalize_mssql.';
    END IF;
    FOREACH opt IN ARRAY ARRAY['host', 'database'] LOOP
        IF NOT EXISTS (SELECT FROM pg_options_to_table(srv.srvoptions) o WHERE o.option_name = opt) THEN
            RAISE EXCEPTION 'server "%" has no option "%"', server_name, opt
                USING ERRCODE = 'fdw_option_name_not_found',
                      HINT = format('Add it with ALTER SERVER %I OPTIONS (ADD %s ''...'').', server_name, opt);
        END IF;
    END LOOP;
    RETURN srv;
END
$$;

CREATE FUNCTION @extschema@.track_table(
    table_name   text,
    server_name  text,
    source_table text,
    granularity  interval DEFAULT interval '1 hour',
    start_from   text DEFAULT 'max_lsn')
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    parts text[];
    new_id bigint;
BEGIN
    PERFORM @extschema@._require(track_table.table_name, 'table_name');
    IF track_table.table_name !~ '\S' OR length(track_table.table_name) > 255 THEN
        RAISE EXCEPTION 'invalid value for argument table_name: "%"', track_table.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A tracked table name is the name consumers use (for example sales.orders): 1 to 255 characters, not only spaces.';
    END IF;
    PERFORM @extschema@._mssql_server(track_table.server_name, 'server_name');
    PERFORM @extschema@._require(track_table.source_table, 'source_table');
    parts := @extschema@._split_mssql_name(track_table.source_table, 'source_table');
    PERFORM @extschema@._check_granularity(track_table.granularity, 'granularity');
    PERFORM @extschema@._require(track_table.start_from, 'start_from');
    IF track_table.start_from NOT IN ('max_lsn', 'capture_start') THEN
        RAISE EXCEPTION 'invalid value for argument start_from: "%"', track_table.start_from
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Tracking starts at SQL Server''s current max LSN (max_lsn, the default) or at the start of the capture instance (capture_start).';
    END IF;

    BEGIN
        INSERT INTO @extschema@.tracked_table
            (table_name, server_name, source_schema, source_name, granularity, start_from, created_by)
        VALUES (track_table.table_name, track_table.server_name, parts[1], parts[2], track_table.granularity,
                track_table.start_from, @extschema@._calling_role())
        RETURNING table_id INTO new_id;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'table "%" is already tracked', track_table.table_name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Untrack it first with finalize.untrack_table(), or choose another name.';
    END;
    INSERT INTO @extschema@.watermark (table_id) VALUES (new_id);
    RETURN new_id;
END
$$;
COMMENT ON FUNCTION @extschema@.track_table(text, text, text, interval, text) IS
    'Start tracking a logical table fed by a SQL Server table with CDC enabled';

CREATE FUNCTION @extschema@.untrack_table(table_name text, keep_facts boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    id bigint;
BEGIN
    PERFORM @extschema@._require(untrack_table.table_name, 'table_name');
    PERFORM @extschema@._require(keep_facts, 'keep_facts');
    SELECT t.table_id INTO id
      FROM @extschema@.tracked_table t
     WHERE t.table_name = untrack_table.table_name AND t.untracked_at IS NULL
       FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM @extschema@._not_tracked(untrack_table.table_name);
    END IF;
    IF keep_facts THEN
        UPDATE @extschema@.tracked_table SET untracked_at = now() WHERE table_id = id;
    ELSE
        DELETE FROM @extschema@.tracked_table WHERE table_id = id;
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@.untrack_table(text, boolean) IS
    'Stop tracking a table; its facts stay until retention removes them unless keep_facts is false';

-- The one error for a table name that is not tracked.
CREATE FUNCTION @extschema@._not_tracked(table_name text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'table "%" is not tracked by finalize', table_name
        USING ERRCODE = 'undefined_object',
              HINT = 'Check the name in finalize.status, or start tracking it with finalize.track_table().';
END
$$;
