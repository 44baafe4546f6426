-- Sources and the tables tracked through them (finalize_admin).
--
-- Sources are foreign servers of this wrapper; credentials live only in user
-- mappings. The wrapper has no handler: it holds connection options, it does
-- not serve foreign tables.

CREATE OR REPLACE FUNCTION finalize_internal.mssql_validator(options text[], catalog oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_mssql_validator'
LANGUAGE C STRICT;


-- Splits a SQL Server two-part name (dbo.orders, [my schema].[odd]]name]) into
-- its unquoted parts; the error names the argument it was given as.
CREATE OR REPLACE FUNCTION finalize_internal.split_mssql_name(name text, argname text)
RETURNS text[]
AS 'MODULE_PATHNAME', 'finalize_split_mssql_name'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- Quotes one SQL Server identifier with brackets, doubling any ].
CREATE OR REPLACE FUNCTION @extschema@.quote_mssql_ident(ident text)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_quote_mssql_ident'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.quote_mssql_ident(text) IS
    'Quote a SQL Server identifier with brackets, doubling any ]';

-- Tracked tables. Their policies, each checked with an error that lists the
-- choices and what they mean.
CREATE OR REPLACE FUNCTION finalize_internal.check_ddl_policy(ddl_policy text)
RETURNS void
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN finalize_internal.check_choice(ddl_policy, 'ddl_policy', ARRAY['warn', 'block'],
    'With warn, DDL on the source table is an event fact and a warning and the verdict goes on; with block the verdict stops at the DDL until finalize.resume_table().');

CREATE OR REPLACE FUNCTION finalize_internal.check_on_data_loss(on_data_loss text)
RETURNS void
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN finalize_internal.check_choice(on_data_loss, 'on_data_loss', ARRAY['stop', 'resume'],
    'With stop, a data loss stops the verdict until finalize.resume_table(); with resume the worker records the loss and resumes by itself, unless another loss happened within finalize.data_loss_window.');

-- Finds a server of the finalize_mssql wrapper by name; the errors say what
-- to create or fix.
CREATE OR REPLACE FUNCTION finalize_internal.mssql_server(server_name text, argname text)
RETURNS pg_catalog.pg_foreign_server
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    srv pg_foreign_server;
    wrapper name;
    opt text;
BEGIN
    PERFORM finalize_internal.require(server_name, argname);
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

-- A finalize_mssql server through which a role may track tables: it
-- exists, and the role may read through it. The worker reads tracked
-- tables with the server's login, so tracking a table through a server is
-- using it (USAGE); and it logs in with the user mapping of the server's
-- owner when there is one (else PUBLIC's, which USAGE lets a role use): a
-- role must not read through a login it could not use itself.
CREATE OR REPLACE FUNCTION finalize_internal.tracking_server(who name, server_name text)
RETURNS pg_catalog.pg_foreign_server
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    srv pg_foreign_server := finalize_internal.mssql_server(server_name, 'server_name');
BEGIN
    IF NOT has_server_privilege(who, srv.oid, 'USAGE') THEN
        RAISE EXCEPTION 'permission denied for server %', server_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Role %s has no USAGE on the server, and the worker reads tracked tables with the server''s login.', who),
                  HINT = format('The server''s owner can run GRANT USAGE ON FOREIGN SERVER %I TO %I.', server_name, who);
    END IF;
    IF EXISTS (SELECT FROM pg_user_mapping m WHERE m.umserver = srv.oid AND m.umuser = srv.srvowner)
       AND NOT pg_has_role(who, srv.srvowner, 'USAGE') THEN
        RAISE EXCEPTION 'permission denied for server %', server_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('The worker reads the tables of server %s with the user mapping of its owner %s, which role %s may not use.',
                                  server_name, srv.srvowner::regrole, who),
                  HINT = format('Track the table as a member of role %s, or let the worker use a PUBLIC user mapping of the server instead.',
                                srv.srvowner::regrole);
    END IF;
    RETURN srv;
END
$$;

-- Checks, when a table is tracked, the SQL Server table its worker will
-- read, as the worker would (worker/source_check.c): a table that does
-- not exist, has no change data capture or that the login may not read
-- is an error, each with its own hint; a source that cannot be reached
-- gets a NOTICE (the table is tracked, the worker retries). Called before
-- the table's row is written and before any of finalize's locks is taken,
-- for at most finalize.source_check_timeout per wait (0: no check).
CREATE OR REPLACE FUNCTION finalize_internal.check_source_table(server oid, source_schema text, source_name text)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_check_source_table'
LANGUAGE C VOLATILE STRICT;

-- The body of finalize.track_table, run as the extension's owner by its C entry
-- point (owner.c) with the caller taken before the switch.
-- The start_from of a new tracked table in its stored form: max_lsn,
-- capture_start, or an LSN in either text form (finalize's, or Debezium's
-- source.commit_lsn), normalized. Whether SQL Server still holds the
-- changes after that LSN, and has reached it, only the worker can tell: it
-- looks before the first range and records nothing while it cannot
-- (condition start_unreadable).
CREATE OR REPLACE FUNCTION finalize_internal.check_start_from(table_name text, value text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(value, 'start_from');
    IF value IN ('max_lsn', 'capture_start') THEN
        RETURN value;
    END IF;
    BEGIN
        RETURN finalize_internal.lsn_normalize(value)::text;
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'invalid value for argument start_from of table "%": "%"', table_name, value
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Tracking starts at SQL Server''s current max LSN (max_lsn, the default), at the '
                           'start of the capture instance (capture_start), or right after the LSN the lake''s '
                           'copy of the table ends at, written as 0x and 20 hexadecimal digits '
                           '(0x0000002D00000E580003) or as Debezium writes it (0000002d:00000e58:0003).',
                  HINT = 'For a copy made by a Debezium snapshot, give the commit_lsn its snapshot records carry.';
    END;
END
$$;

CREATE OR REPLACE FUNCTION finalize_internal.track_table(
    caller name,
    table_name   text,
    server_name  text,
    source_table text,
    granularity  interval DEFAULT interval '1 hour',
    start_from   text DEFAULT 'max_lsn',
    ddl_policy   text DEFAULT 'warn',
    on_data_loss text DEFAULT 'stop',
    event_time_column text DEFAULT NULL,
    event_time_zone   text DEFAULT NULL,
    lateness_policy   text DEFAULT 'exact',
    allowed_lateness  interval DEFAULT interval '0',
    lateness_quantile double precision DEFAULT NULL,
    lateness_window   interval DEFAULT interval '7 days',
    period_zone       text DEFAULT 'UTC',
    check_source      boolean DEFAULT true)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    parts text[];
    new_id bigint;
    srv pg_foreign_server;
    who name := caller;
    zone text;
    start_at text;
BEGIN
    PERFORM finalize_internal.check_table_name(track_table.table_name, 'sales.orders');
    srv := finalize_internal.tracking_server(who, track_table.server_name);
    PERFORM finalize_internal.require(track_table.source_table, 'source_table');
    parts := finalize_internal.split_mssql_name(track_table.source_table, 'source_table');
    PERFORM finalize_internal.check_granularity(track_table.granularity, 'granularity');
    zone := finalize_internal.check_zone(track_table.period_zone, 'period_zone');
    start_at := finalize_internal.check_start_from(track_table.table_name, track_table.start_from);
    PERFORM finalize_internal.check_ddl_policy(track_table.ddl_policy);
    PERFORM finalize_internal.check_on_data_loss(track_table.on_data_loss);
    PERFORM finalize_internal.require(track_table.lateness_policy, 'lateness_policy');
    PERFORM finalize_internal.require(track_table.allowed_lateness, 'allowed_lateness');
    PERFORM finalize_internal.require(track_table.lateness_window, 'lateness_window');
    IF track_table.event_time_column IS NULL
       AND (track_table.event_time_zone IS NOT NULL OR track_table.lateness_policy <> 'exact'
            OR track_table.allowed_lateness <> interval '0' OR track_table.lateness_quantile IS NOT NULL) THEN
        RAISE EXCEPTION 'lateness settings need an event_time_column'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A table without an event column is partitioned by commit time, which is exact: it has no lateness.',
                  HINT = 'Pass event_time_column => ''<captured date/time column>'' too.';
    END IF;
    PERFORM finalize_internal.check_event_time(track_table.event_time_column, track_table.event_time_zone,
                                          track_table.lateness_policy, track_table.allowed_lateness,
                                          track_table.lateness_quantile, track_table.lateness_window,
                                          track_table.granularity);
    -- SQL Server's answer, last: no network wait for a call that is refused anyway.
    IF check_source THEN
        PERFORM finalize_internal.check_source_table(srv.oid, parts[1], parts[2]);
    END IF;

    BEGIN
        -- Lengths of time are kept without days, so that adding them is
        -- the same in every session TimeZone.
        INSERT INTO @extschema@.tracked_table
            (table_name, server_name, source_schema, source_name, granularity, start_from,
             ddl_policy, on_data_loss, created_by, event_time_column, event_time_zone, lateness_policy,
             allowed_lateness, lateness_quantile, lateness_window, period_zone)
        VALUES (track_table.table_name, track_table.server_name, parts[1], parts[2], track_table.granularity,
                start_at, track_table.ddl_policy, track_table.on_data_loss, who,
                track_table.event_time_column, track_table.event_time_zone, track_table.lateness_policy,
                make_interval(secs => extract(epoch FROM track_table.allowed_lateness)),
                track_table.lateness_quantile,
                make_interval(secs => extract(epoch FROM track_table.lateness_window)), zone)
        RETURNING table_id INTO new_id;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'table "%" is already tracked', track_table.table_name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Untrack it first with finalize.untrack_table(), or choose another name.';
    END;
    INSERT INTO @extschema@.watermark (table_id) VALUES (new_id);
    PERFORM finalize_internal.seal_catalog();
    RETURN new_id;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.track_table(
    table_name   text,
    server_name  text,
    source_table text,
    granularity  interval DEFAULT interval '1 hour',
    start_from   text DEFAULT 'max_lsn',
    ddl_policy   text DEFAULT 'warn',
    on_data_loss text DEFAULT 'stop',
    event_time_column text DEFAULT NULL,
    event_time_zone   text DEFAULT NULL,
    lateness_policy   text DEFAULT 'exact',
    allowed_lateness  interval DEFAULT interval '0',
    lateness_quantile double precision DEFAULT NULL,
    lateness_window   interval DEFAULT interval '7 days',
    period_zone       text DEFAULT 'UTC')
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.track_table(text, text, text, interval, text, text, text,
                                            text, text, text, interval, double precision, interval, text) IS
    'Start tracking a logical table fed by a SQL Server table with CDC enabled; event_time_column partitions it by a time in its rows, period_zone cuts its periods in a zone';

-- The names of the tracked derived tables that use a table as an input.
CREATE OR REPLACE FUNCTION finalize_internal.dependents(table_id bigint)
RETURNS text[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT coalesce(array_agg(t.table_name ORDER BY t.table_name), '{}')
      FROM @extschema@.derived_input d
      JOIN @extschema@.tracked_table t ON t.table_id = d.table_id
     WHERE d.input_id = dependents.table_id AND t.untracked_at IS NULL;
END;

-- Stops tracking a table. A derived table that uses it would stop for
-- ever, so that is refused unless cascade, which first untracks those
-- derived tables (and the ones using them) the same way, each once: in a
-- diamond, a derived table that uses two of them is gone with the first.
-- A sharded table's shards are parts of it: they are untracked with it
-- (and so are, with cascade, the derived tables built from one of them);
-- a shard alone leaves its sharded table through finalize.drop_shard. A
-- shard whose sharded table is no longer tracked (left behind when an
-- add_shard raced untrack_table, before the two took the same lock) is
-- untracked on its own.
CREATE OR REPLACE FUNCTION @extschema@.untrack_table(table_name text, keep_facts boolean DEFAULT true,
                                          cascade boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    id bigint;
    tkind text;
    part_of bigint;
    label text;
    sharded text;
    users text[];
    dependent text;
BEGIN
    PERFORM finalize_internal.require(untrack_table.table_name, 'table_name');
    PERFORM finalize_internal.require(keep_facts, 'keep_facts');
    PERFORM finalize_internal.require(untrack_table.cascade, 'cascade');
    SELECT t.table_id, t.kind, t.shard_of, t.shard INTO id, tkind, part_of, label
      FROM @extschema@.tracked_table t
     WHERE t.table_name = untrack_table.table_name AND t.untracked_at IS NULL
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM finalize_internal.not_tracked(untrack_table.table_name);
    END IF;
    IF part_of IS NOT NULL THEN
        SELECT p.table_name INTO sharded FROM @extschema@.tracked_table p
         WHERE p.table_id = part_of AND p.untracked_at IS NULL;
        IF FOUND THEN
            RAISE EXCEPTION 'table "%" is shard "%" of sharded table "%"', untrack_table.table_name, label, sharded
                USING ERRCODE = 'wrong_object_type',
                      DETAIL = 'A shard leaves its sharded table with finalize.drop_shard(), or is untracked with it.',
                      HINT = format('Call finalize.drop_shard(%L, %L).', sharded, label);
        END IF;
        -- Its sharded table is gone: nothing else could ever untrack it.
        RAISE NOTICE 'table "%" is shard "%" of a sharded table that is no longer tracked: it is untracked on its own',
                     untrack_table.table_name, label
            USING DETAIL = 'It was left tracked when its sharded table was untracked while it was being added.';
    END IF;
    -- Its verdict: a transaction that writes it (a worker's cycle, a
    -- pipeline's report) commits before the table is untracked, so that
    -- its NOTIFY never names the table once it is untracked, nor after a
    -- table tracked again under its name. A sharded table's is the lock
    -- add_shard and drop_shard take on it (_lock_sharded), so that a shard
    -- added meanwhile is untracked with it, never left behind, and one
    -- added after it sees it untracked. Its row first, exclusively when it
    -- is deleted below: a delete that waited for such a call's key share
    -- while that call waits for the verdict held here would deadlock.
    IF NOT keep_facts THEN
        PERFORM FROM @extschema@.tracked_table t WHERE t.table_id = id FOR UPDATE;
    END IF;
    PERFORM finalize_internal.lock_tracked(id);
    users := finalize_internal.dependents(id);
    IF tkind = 'sharded' THEN
        users := ARRAY(SELECT DISTINCT x.name
                         FROM unnest(users || ARRAY(
                                  SELECT u.name FROM @extschema@.tracked_table s
                                   CROSS JOIN LATERAL unnest(finalize_internal.dependents(s.table_id)) AS u(name)
                                   WHERE s.shard_of = id AND s.untracked_at IS NULL
                                     AND u.name <> untrack_table.table_name)) AS x(name)
                        ORDER BY x.name);
    END IF;
    IF cardinality(users) > 0 AND NOT untrack_table.cascade THEN
        RAISE EXCEPTION '% is an input of derived %',
                        CASE WHEN tkind = 'sharded'
                             THEN format('sharded table "%s" or one of its shards', untrack_table.table_name)
                             ELSE format('table "%s"', untrack_table.table_name) END,
                        (SELECT CASE WHEN count(*) > 1 THEN 'tables ' ELSE 'table ' END
                                || string_agg(format('"%s"', u), ', ') FROM unnest(users) AS u)
            USING ERRCODE = 'dependent_objects_still_exist',
                  DETAIL = 'A derived table is final only as far as its inputs are: without this input its verdict would stop for ever.',
                  HINT = format('Untrack the derived tables first, or call finalize.untrack_table(%L, cascade => true) to untrack them too.',
                                untrack_table.table_name);
    END IF;
    FOREACH dependent IN ARRAY users LOOP
        CONTINUE WHEN NOT EXISTS (SELECT FROM @extschema@.tracked_table t
                                   WHERE t.table_name = dependent AND t.untracked_at IS NULL);
        PERFORM @extschema@.untrack_table(dependent, keep_facts, true);
        RAISE NOTICE 'derived table "%" is untracked too: it used table "%"%', dependent, untrack_table.table_name,
                     CASE WHEN tkind = 'sharded' THEN ' or one of its shards' ELSE '' END;
    END LOOP;
    -- Nothing is watched for an untracked table: its incidents end here
    -- (a sharded table's shards' too).
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE (a.table_id = id
            OR a.table_id IN (SELECT s.table_id FROM @extschema@.tracked_table s
                               WHERE s.shard_of = id AND s.untracked_at IS NULL))
       AND a.state <> 'resolved';
    -- Its publications end with it (docs/publishing.md).
    PERFORM finalize_internal.drop_table_publications(
        ARRAY(SELECT t.table_id FROM @extschema@.tracked_table t WHERE t.table_id = id OR t.shard_of = id));
    IF keep_facts THEN
        UPDATE @extschema@.tracked_table t SET untracked_at = now()
         WHERE t.table_id = id OR (t.shard_of = id AND t.untracked_at IS NULL);
    ELSE
        -- its shards with it, the ones dropped before too
        DELETE FROM @extschema@.tracked_table t WHERE t.table_id = id OR t.shard_of = id;
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@.untrack_table(text, boolean, boolean) IS
    'Stop tracking a table (a sharded table with its shards); its facts stay until retention removes them unless keep_facts is false; cascade untracks the derived tables that use it';

-- Changes how a tracked table is handled; NULL keeps a setting. The
-- settings of a sharded table are every shard's: they change on each of
-- its shards, then on it; a shard's own are only its max_lag.
CREATE OR REPLACE FUNCTION @extschema@.alter_tracked_table(
    table_name   text,
    granularity  interval DEFAULT NULL,
    ddl_policy   text DEFAULT NULL,
    on_data_loss text DEFAULT NULL,
    event_time_column text DEFAULT NULL,
    event_time_zone   text DEFAULT NULL,
    lateness_policy   text DEFAULT NULL,
    allowed_lateness  interval DEFAULT NULL,
    lateness_quantile double precision DEFAULT NULL,
    lateness_window   interval DEFAULT NULL,
    max_lag           interval DEFAULT NULL,
    period_zone       text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
    zone text;
    part bigint;
BEGIN
    PERFORM finalize_internal.require(alter_tracked_table.table_name, 'table_name');
    IF granularity IS NOT NULL THEN
        PERFORM finalize_internal.check_granularity(granularity, 'granularity');
    END IF;
    IF period_zone IS NOT NULL THEN
        zone := finalize_internal.check_zone(period_zone, 'period_zone');
    END IF;
    IF ddl_policy IS NOT NULL THEN
        PERFORM finalize_internal.check_ddl_policy(ddl_policy);
    END IF;
    IF on_data_loss IS NOT NULL THEN
        PERFORM finalize_internal.check_on_data_loss(on_data_loss);
    END IF;
    IF max_lag IS NOT NULL AND (max_lag < interval '0' OR extract(month FROM max_lag) <> 0
                                OR extract(year FROM max_lag) <> 0) THEN
        RAISE EXCEPTION 'invalid value for argument max_lag: %', max_lag
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The freshness SLA is a length of time without months, such as ''2 hours''; 0 removes it.';
    END IF;
    SELECT t.* INTO tt FROM @extschema@.tracked_table t
     WHERE t.table_name = alter_tracked_table.table_name AND t.untracked_at IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM finalize_internal.not_tracked(alter_tracked_table.table_name);
    END IF;
    IF tt.shard_of IS NOT NULL
       AND (granularity IS NOT NULL OR period_zone IS NOT NULL OR ddl_policy IS NOT NULL OR on_data_loss IS NOT NULL
            OR event_time_column IS NOT NULL OR event_time_zone IS NOT NULL OR lateness_policy IS NOT NULL
            OR allowed_lateness IS NOT NULL OR lateness_quantile IS NOT NULL OR lateness_window IS NOT NULL) THEN
        RAISE EXCEPTION 'table "%" is shard "%" of sharded table "%": only its max_lag can be changed',
                        tt.table_name, tt.shard, (SELECT p.table_name FROM @extschema@.tracked_table p WHERE p.table_id = tt.shard_of)
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'Its periods, its DDL and data-loss policies and its event-time settings are its sharded table''s, the same for every shard.',
                  HINT = format('Change them on the sharded table: finalize.alter_tracked_table(%L, ...).',
                                (SELECT p.table_name FROM @extschema@.tracked_table p WHERE p.table_id = tt.shard_of));
    END IF;
    -- A sharded table first (its verdict before its shards', in the order
    -- add_shard and drop_shard take them), then each of its shards.
    PERFORM finalize_internal.alter_tracked(tt.table_id, granularity, ddl_policy, on_data_loss, event_time_column,
                                       event_time_zone, lateness_policy, allowed_lateness, lateness_quantile,
                                       lateness_window, max_lag, zone);
    IF tt.kind = 'sharded' THEN
        FOR part IN SELECT x.table_id FROM @extschema@.tracked_table x
                     WHERE x.shard_of = tt.table_id AND x.untracked_at IS NULL
                     ORDER BY x.table_id FOR NO KEY UPDATE LOOP
            PERFORM finalize_internal.alter_tracked(part, granularity, ddl_policy, on_data_loss, event_time_column,
                                               event_time_zone, lateness_policy, allowed_lateness,
                                               lateness_quantile, lateness_window, NULL, zone);
        END LOOP;
        -- its verdict under new periods, once its shards have them
        PERFORM finalize_internal.advance(tt.table_id);
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@.alter_tracked_table(text, interval, text, text, text, text, text, interval,
                                                    double precision, interval, interval, text) IS
    'Change the periods (granularity, period_zone), DDL policy, data-loss policy, event-time settings or freshness SLA (max_lag) of a tracked table (only the periods and max_lag of a derived one, only max_lag of a shard; a sharded table''s change on every shard)';

-- The body of alter_tracked_table for one table, whose row the caller
-- holds, with its arguments checked (period_zone as _check_zone spells it).
CREATE OR REPLACE FUNCTION finalize_internal.alter_tracked(
    table_id     bigint,
    granularity  interval,
    ddl_policy   text,
    on_data_loss text,
    event_time_column text,
    event_time_zone   text,
    lateness_policy   text,
    allowed_lateness  interval,
    lateness_quantile double precision,
    lateness_window   interval,
    max_lag           interval,
    period_zone       text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    id bigint := alter_tracked.table_id;
    kind text;
    cur @extschema@.tracked_table;
    has_verdict boolean;
    event_changed boolean;
    zone text := alter_tracked.period_zone;
    periods_changed boolean;
BEGIN
    SELECT t.kind INTO kind FROM @extschema@.tracked_table t
     WHERE t.table_id = id AND t.untracked_at IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tracked table with id % is no longer tracked', id
            USING ERRCODE = 'undefined_object';
    END IF;
    -- Its verdict too, before anything is read to decide on: new periods
    -- may give it a loss to wait for, and a loss recorded meanwhile (which
    -- holds the verdict) must be seen (_refresh_loss_blocked).
    PERFORM finalize_internal.lock_tracked(id);
    SELECT t.* INTO cur FROM @extschema@.tracked_table t WHERE t.table_id = id;
    IF kind = 'derived' AND (ddl_policy IS NOT NULL OR on_data_loss IS NOT NULL OR event_time_column IS NOT NULL
                             OR event_time_zone IS NOT NULL OR lateness_policy IS NOT NULL
                             OR allowed_lateness IS NOT NULL OR lateness_quantile IS NOT NULL
                             OR lateness_window IS NOT NULL) THEN
        RAISE EXCEPTION 'table "%" is a derived table: only its granularity, period_zone and max_lag can be changed', cur.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'ddl_policy, on_data_loss and the event-time settings say how the worker reads a SQL Server table; a derived table has none.';
    END IF;
    SELECT w.finalized_until IS NOT NULL INTO has_verdict FROM @extschema@.watermark w WHERE w.table_id = id;
    event_changed := (event_time_column IS NOT NULL AND event_time_column IS DISTINCT FROM cur.event_time_column)
                     OR (event_time_zone IS NOT NULL AND event_time_zone IS DISTINCT FROM cur.event_time_zone);
    -- Whether the periods change: a new granularity (compared as written:
    -- '7 days' are ISO weeks, '168 hours' a stride from Saturday 2000-01-01,
    -- and the two intervals are equal) or a new zone.
    periods_changed := (granularity IS NOT NULL AND granularity::text IS DISTINCT FROM cur.granularity::text)
                       OR (zone IS NOT NULL AND zone IS DISTINCT FROM cur.period_zone);
    -- Event facts are stored per period they were recorded in: new periods
    -- would split or merge them. (Late rows are kept as spans of instants,
    -- late_period, which any periods read: they never stop a change, and
    -- purge_facts never removes them.)
    IF periods_changed
       AND coalesce(event_time_column, cur.event_time_column) IS NOT NULL
       AND EXISTS (SELECT FROM @extschema@.event_fact e WHERE e.table_id = id) THEN
        RAISE EXCEPTION 'table "%" is partitioned by event time and has event facts, so its periods (granularity and period_zone) cannot change', cur.table_name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'Rows per event period and the release gate count in the periods the facts were recorded in, until finalize.facts_retention removes them.',
                  HINT = 'Track the table again under a new name with the new periods, then untrack this one.';
    END IF;
    -- What the verdict means changes with the partitioning time: a verdict
    -- given in commit time (or another column's time) cannot be kept.
    IF event_changed AND (has_verdict OR EXISTS (SELECT FROM @extschema@.event_fact e WHERE e.table_id = id)
                          OR EXISTS (SELECT FROM @extschema@.lateness_hour h WHERE h.table_id = id)) THEN
        RAISE EXCEPTION 'table "%" already has a verdict or event facts, so its event column cannot change', cur.table_name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('Its periods up to %s were declared final in %s; a verdict never moves back.',
                                  finalize_internal.utc_iso((SELECT w.finalized_until FROM @extschema@.watermark w WHERE w.table_id = id)),
                                  CASE WHEN cur.event_time_column IS NULL THEN 'commit time'
                                       ELSE format('the time of column "%s"', cur.event_time_column) END),
                  HINT = format('Track the table again under a new name with finalize.%s(..., event_time_column => ...), then untrack this one.',
                                CASE WHEN kind = 'sharded' THEN 'track_sharded' ELSE 'track_table' END);
    END IF;
    IF coalesce(event_time_column, cur.event_time_column) IS NULL
       AND (event_time_zone IS NOT NULL OR lateness_policy IS NOT NULL OR allowed_lateness IS NOT NULL
            OR lateness_quantile IS NOT NULL OR lateness_window IS NOT NULL) THEN
        RAISE EXCEPTION 'table "%" has no event_time_column, so it has no lateness settings', cur.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A table partitioned by commit time is exact: it has no lateness.';
    END IF;
    PERFORM finalize_internal.check_event_time(
        coalesce(event_time_column, cur.event_time_column), coalesce(event_time_zone, cur.event_time_zone),
        coalesce(lateness_policy, cur.lateness_policy), coalesce(allowed_lateness, cur.allowed_lateness),
        CASE WHEN coalesce(lateness_policy, cur.lateness_policy) = 'exact' AND lateness_quantile IS NULL THEN NULL
             ELSE coalesce(lateness_quantile, cur.lateness_quantile) END,
        coalesce(lateness_window, cur.lateness_window), coalesce(granularity, cur.granularity));
    -- A stricter lateness policy applies from now on: periods already
    -- final stay final (a verdict never moves back).
    UPDATE @extschema@.tracked_table t
       SET granularity = coalesce(alter_tracked.granularity, t.granularity),
           period_zone = coalesce(zone, t.period_zone),
           ddl_policy = coalesce(alter_tracked.ddl_policy, t.ddl_policy),
           on_data_loss = coalesce(alter_tracked.on_data_loss, t.on_data_loss),
           event_time_column = coalesce(alter_tracked.event_time_column, t.event_time_column),
           event_time_zone = coalesce(alter_tracked.event_time_zone, t.event_time_zone),
           lateness_policy = coalesce(alter_tracked.lateness_policy, t.lateness_policy),
           allowed_lateness = coalesce(make_interval(secs => extract(epoch FROM alter_tracked.allowed_lateness)),
                                       t.allowed_lateness),
           lateness_quantile = CASE WHEN coalesce(alter_tracked.lateness_policy, t.lateness_policy) = 'exact'
                                    THEN NULL
                                    ELSE coalesce(alter_tracked.lateness_quantile, t.lateness_quantile) END,
           lateness_window = coalesce(make_interval(secs => extract(epoch FROM alter_tracked.lateness_window)),
                                      t.lateness_window),
           -- without days, like every length of time here; 0 removes the SLA
           max_lag = CASE WHEN alter_tracked.max_lag IS NULL THEN t.max_lag
                          WHEN alter_tracked.max_lag = interval '0' THEN NULL
                          ELSE make_interval(secs => extract(epoch FROM alter_tracked.max_lag)) END
     WHERE t.table_id = id;
    -- The verdict stays valid under any periods: it is an instant before
    -- which everything is complete, so it is kept as it is, and what reads
    -- it as a boundary (finalized_until(), explain_verdict, the status
    -- view) rounds it down to one of the new periods, never up: every new
    -- period ending at or before it is final, none it only reaches into.
    -- Going back to finer periods loses nothing. Which periods a loss holds
    -- depends on the periods; a derived table's verdict may move at once
    -- under finer ones. A sharded table's verdict is moved and announced
    -- by alter_tracked_table once its shards have the new periods too:
    -- announced before, it could name periods that a shard's loss, whose
    -- acknowledgements no longer cover them, holds when the change commits.
    IF periods_changed THEN
        PERFORM finalize_internal.refresh_loss_blocked(id);
        IF kind <> 'sharded' THEN
            PERFORM finalize_internal.advance(id);
        END IF;
    END IF;
END
$$;

-- Lets a stopped table go on. After a schema change that blocked it, the DDL
-- counts as reviewed and the verdict continues from where it stopped. After
-- a data loss, the table is marked resuming; the worker then records the lost
-- LSN range as a "resumed" event (with who asked) and restarts the table at
-- its capture instance's current min LSN, so the verdict resumes only from
-- there. The lost range stays visible in finalize.facts.
-- The body of finalize.resume_table, run as the extension's owner by its C entry
-- point (owner.c) with the caller taken before the switch.
CREATE OR REPLACE FUNCTION finalize_internal.resume_table(
    caller name,
    table_name text)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
    wm @extschema@.watermark;
    blocked @extschema@.fact;
    ddl_lsn @extschema@.lsn;
    who name := caller;
BEGIN
    tt := finalize_internal.tracked(resume_table.table_name);
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id FOR UPDATE;
    SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = tt.table_id;

    IF tt.state = 'schema_blocked' THEN
        -- The DDL to acknowledge is kept with the verdict while the table is
        -- blocked: its event fact may have expired meanwhile.
        SELECT f.* INTO blocked FROM @extschema@.fact f
         WHERE f.table_id = tt.table_id AND f.event = 'schema_blocked'
         ORDER BY f.fact_id DESC LIMIT 1;
        ddl_lsn := coalesce(wm.blocked_ddl_lsn, (blocked.detail ->> 'ddl_lsn')::@extschema@.lsn);
        IF ddl_lsn IS NULL THEN
            RAISE EXCEPTION 'table "%" is schema_blocked, but the DDL that blocked it is not known', tt.table_name
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'Neither the verdict nor the facts record the LSN of the blocking DDL, so resuming could not acknowledge it and the table would block again.',
                      HINT = 'Untrack the table and track it again.';
        END IF;
        UPDATE @extschema@.watermark w
           SET schema_ack_lsn = GREATEST(w.schema_ack_lsn, ddl_lsn), blocked_ddl_lsn = NULL
         WHERE w.table_id = tt.table_id;
        INSERT INTO @extschema@.fact (table_id, kind, event, start_lsn, end_lsn, capture_instance, detail)
        VALUES (tt.table_id, 'event', 'resumed', blocked.start_lsn, ddl_lsn, blocked.capture_instance,
                jsonb_build_object('after', 'schema_blocked', 'by', who, 'ddl_lsn', ddl_lsn,
                                   'ddl_command', blocked.detail ->> 'ddl_command'));
        UPDATE @extschema@.tracked_table t
           SET state = 'active', state_detail = NULL, state_since = now()
         WHERE t.table_id = tt.table_id;
        PERFORM finalize_internal.resolve_alerts('schema_blocked', tt.table_id, tt.server_name);
        RETURN format('Table "%s" resumes; the DDL at LSN %s counts as reviewed.', tt.table_name, ddl_lsn);
    ELSIF tt.state = 'data_lost' THEN
        INSERT INTO @extschema@.fact (table_id, kind, event, capture_instance, detail)
        VALUES (tt.table_id, 'event', 'resume_requested', tt.capture_instance,
                jsonb_build_object('by', who));
        UPDATE @extschema@.tracked_table t
           SET state = 'resuming',
               state_detail = format('%s asked to resume at %s; the worker restarts the table at its capture instance''s min LSN on its next cycle.', who, now()),
               state_since = now()
         WHERE t.table_id = tt.table_id;
        RETURN format('Table "%s" resumes at its capture instance''s current min LSN on the worker''s next cycle; the lost range is recorded as an event.',
                      tt.table_name);
    ELSIF tt.state IN ('active', 'resuming') THEN
        RETURN format('Table "%s" is %s; nothing to resume.', tt.table_name, tt.state);
    END IF;
    RAISE EXCEPTION 'table "%" cannot be resumed from state %', tt.table_name, tt.state
        USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.resume_table(table_name text)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.resume_table(text) IS
    'Let a table stopped by a data loss or a blocking schema change go on, recording who and what was lost';

-- Lets a source held by a condition that a later cycle cannot disprove
-- (commit_time_ahead) go on, once the cause is fixed on SQL Server. Returns
-- whether it was held. The worker's next cycle checks again.
CREATE OR REPLACE FUNCTION @extschema@.release_source(server_name text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    released boolean;
BEGIN
    PERFORM finalize_internal.require(release_source.server_name, 'server_name');
    UPDATE @extschema@.source_status s
       SET held_by = NULL, held_since = NULL
     WHERE s.server_name = release_source.server_name AND s.held_by IS NOT NULL;
    released := FOUND;
    IF NOT released AND NOT EXISTS (SELECT FROM @extschema@.source_status s
                                     WHERE s.server_name = release_source.server_name) THEN
        RAISE EXCEPTION 'finalize has no status for server "%"', release_source.server_name
            USING ERRCODE = 'undefined_object',
                  HINT = 'The name is that of a foreign server with tracked tables, as in finalize.source_status.';
    END IF;
    RETURN released;
END
$$;
COMMENT ON FUNCTION @extschema@.release_source(text) IS
    'Let a source held by commit_time_ahead go on once SQL Server stamps commits in its clock''s zone';
