-- Consumers that are Iceberg tables (docs/design/lake.md): a pipeline's
-- progress read from the snapshots its writes committed, through an Iceberg
-- REST catalog (a foreign server of finalize_iceberg), so that the
-- pipeline never calls finalize. The lake worker of each catalog loads the
-- table's metadata every poll interval and records the LSN property of the
-- newest snapshot on the ref's ancestry through the same rule as
-- report_progress (_advance_report); the source worker resolves it to a
-- commit time as it resolves every report. A rollback of the ref records a
-- loss.

-- Iceberg REST catalogs are foreign servers of finalize_iceberg; their
-- credentials (a bearer token, OAuth2 client credentials, AWS keys) live in
-- user mappings only.
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_validator(text[], oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_iceberg_validator'
LANGUAGE C STRICT;

-- The one rule of a report (report_progress and the lake worker): a
-- consumer's LSN only moves forward; a lower or equal one changes nothing.
-- The caller holds the consumer's row. Returns whether it moved.
CREATE OR REPLACE FUNCTION finalize_internal.advance_report(table_id bigint, consumer text, reported @extschema@.lsn)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    UPDATE @extschema@.consumer x SET reported_lsn = reported, reported_at = now()
     WHERE x.table_id = advance_report.table_id AND x.consumer = consumer
       AND (x.reported_lsn IS NULL OR x.reported_lsn < reported);
    RETURN FOUND;
END
$$;

-- Why a role may not read through a server, or NULL when it may: 'usage'
-- without USAGE on it; 'owner_mapping' when the server's owner has a user
-- mapping of its own (the one the worker reads with) that the role may not
-- use. A role that no longer exists may not. The one rule add_consumer
-- checks and the lake worker checks again every poll.
CREATE OR REPLACE FUNCTION finalize_internal.server_use_refused(who oid, server oid)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT CASE
        WHEN NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid = who) THEN 'usage'
        WHEN NOT pg_catalog.has_server_privilege(who, server, 'USAGE') THEN 'usage'
        WHEN EXISTS (SELECT FROM pg_catalog.pg_foreign_server s
                       JOIN pg_catalog.pg_user_mapping m ON m.umserver = s.oid AND m.umuser = s.srvowner
                      WHERE s.oid = server)
             AND NOT pg_catalog.pg_has_role(who, (SELECT s.srvowner FROM pg_catalog.pg_foreign_server s
                                                   WHERE s.oid = server), 'USAGE') THEN 'owner_mapping'
    END;
END;

-- A finalize_iceberg server a caller may name for a consumer: it exists, is
-- an Iceberg catalog, and the caller has USAGE on it and may use the user
-- mapping the lake worker reads (its owner's), as for track_table.
CREATE OR REPLACE FUNCTION finalize_internal.iceberg_server(caller name, server_name text)
RETURNS pg_foreign_server
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    srv pg_foreign_server;
    wrapper name;
    refused text;
BEGIN
    PERFORM finalize_internal.require(server_name, 'iceberg_server');
    SELECT s.* INTO srv FROM pg_foreign_server s WHERE s.srvname = server_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'server "%" does not exist', server_name
            USING ERRCODE = 'undefined_object',
                  HINT = 'Create it with CREATE SERVER ... FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri ''https://...''), then a user mapping for its credentials.';
    END IF;
    SELECT w.fdwname INTO wrapper FROM pg_foreign_data_wrapper w WHERE w.oid = srv.srvfdw;
    IF wrapper <> 'finalize_iceberg' THEN
        RAISE EXCEPTION 'server "%" is not an Iceberg catalog', server_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = format('It uses the foreign-data wrapper "%s"; a lake consumer needs a server of finalize_iceberg.', wrapper),
                  HINT = 'Create one with CREATE SERVER ... FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri ''https://...'').';
    END IF;
    refused := finalize_internal.server_use_refused((SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = caller),
                                               srv.oid);
    IF refused = 'usage' THEN
        RAISE EXCEPTION 'permission denied for server %', server_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Role %s has no USAGE on the server, and the lake worker reads the table with its credentials.', caller),
                  HINT = format('The server''s owner can run GRANT USAGE ON FOREIGN SERVER %I TO %I.', server_name, caller);
    END IF;
    IF refused = 'owner_mapping' THEN
        RAISE EXCEPTION 'permission denied for server %', server_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('The lake worker reads through the user mapping of the server''s owner %s, which role %s may not use.',
                                  srv.srvowner::regrole, caller);
    END IF;
    RETURN srv;
END
$$;

-- Checks an Iceberg table name: namespace levels and the table, joined by
-- dots (ns.orders, lake.sales.orders); each part non-empty, no control
-- characters.
CREATE OR REPLACE FUNCTION finalize_internal.check_iceberg_table(iceberg_table text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(iceberg_table, 'iceberg_table');
    IF iceberg_table !~ '^[^.[:cntrl:]]+(\.[^.[:cntrl:]]+)+$' OR length(iceberg_table) > 1024 THEN
        RAISE EXCEPTION 'invalid value for argument iceberg_table: "%"', iceberg_table
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'An Iceberg table is named by its namespace and its name joined by dots, such as sales.orders (a nested namespace: lake.sales.orders); no part may be empty or hold a dot.';
    END IF;
END
$$;

-- Checks a ref or a property name: 1 to 255 characters without control
-- characters.
CREATE OR REPLACE FUNCTION finalize_internal.check_lake_word(value text, argname text, example text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(value, argname);
    IF value !~ '^[^[:cntrl:]]{1,255}$' OR value !~ '\S' THEN
        RAISE EXCEPTION 'invalid value for argument %: "%"', argname, value
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('It has 1 to 255 characters without control characters, such as %s.', example);
    END IF;
END
$$;

-- Refuses a lake table as the consumer of a table that is not a source
-- table: a sharded table's shards each have their own LSNs, a derived table
-- has none. what names the lake table ('an Iceberg table'), kind_name the
-- consumer kind for the hint, and shard_args the rest of the hint's call.
CREATE OR REPLACE FUNCTION finalize_internal.check_lake_source(
    tt @extschema@.tracked_table, consumer text, what text, kind_name text, shard_args text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tt.kind = 'sharded' THEN
        RAISE EXCEPTION 'table "%" is a sharded table, so % cannot report LSNs for it as a whole', tt.table_name, what
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'Each shard is read from its own SQL Server database, whose LSNs are its own.',
                  HINT = format('Declare the %s consumer on each shard, such as finalize.add_consumer(%L, %L, %s',
                                kind_name, tt.table_name || '/<shard>', consumer, shard_args);
    ELSIF tt.kind <> 'source' THEN
        RAISE EXCEPTION 'table "%" is a derived table, so % cannot report LSNs for it', tt.table_name, what
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A derived table has no SQL Server LSNs: its consumers report the input watermark their job has processed.',
                  HINT = format('Declare the consumer with finalize.add_consumer(%L, %L) and report with finalize.report_processed().',
                                tt.table_name, consumer);
    END IF;
END
$$;

-- The body of finalize.add_consumer(table, consumer, iceberg_server, ...):
-- declares a pipeline whose progress is the LSN property (lsn_property) of
-- the snapshots of an Iceberg table's ref. Nobody reports for it: the lake
-- worker reads it. Like every new required consumer, it holds the verdict
-- from now on until its table proves a period (what was final stays final).
CREATE OR REPLACE FUNCTION finalize_internal.add_consumer(
    caller name,
    table_name text,
    consumer text,
    iceberg_server text,
    iceberg_table text,
    ref text DEFAULT 'main',
    lsn_property text DEFAULT 'finalize.lsn',
    required boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    srv pg_foreign_server;
BEGIN
    PERFORM finalize_internal.check_lake_source(tt, consumer, 'an Iceberg table', 'Iceberg',
        '...), with the snapshot property that carries that shard''s LSN (lsn_property).');
    srv := finalize_internal.iceberg_server(caller, iceberg_server);
    PERFORM finalize_internal.check_iceberg_table(iceberg_table);
    PERFORM finalize_internal.check_lake_word(ref, 'ref', 'main or audit');
    PERFORM finalize_internal.check_lake_word(lsn_property, 'lsn_property', 'finalize.lsn');
    PERFORM finalize_internal.check_consumer_name(consumer);
    PERFORM finalize_internal.require(required, 'required');
    PERFORM finalize_internal.insert_consumer(caller, tt, consumer, required, NULL, NULL);
    INSERT INTO @extschema@.lake_consumer (table_id, consumer, server_name, iceberg_table, ref, lsn_property)
    VALUES (tt.table_id, consumer, srv.srvname, iceberg_table, ref, lsn_property);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.add_consumer(
    table_name text,
    consumer text,
    iceberg_server text,
    iceberg_table text,
    ref text DEFAULT 'main',
    lsn_property text DEFAULT 'finalize.lsn',
    required boolean DEFAULT true)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.add_consumer(text, text, text, text, text, text, boolean) IS
    'Declare a pipeline whose progress is the LSN property of an Iceberg table''s snapshots on a ref, read through a finalize_iceberg catalog; nobody reports for it';

-- Delta Lake consumers (docs/delta.md). The store a Delta table lives in
-- (a server of a store's foreign-data wrapper, or a file:///directory/),
-- opened for a role as the lake worker opens it (store/store.c: USAGE on
-- the server and a user mapping, or pg_read_server_files), raising the
-- store's own error when it may not; and the key of the table's location
-- in it, raising when the location is not in that store. Returns the
-- store's name as the worker opens it.
CREATE OR REPLACE FUNCTION finalize_internal.delta_store(store text, who oid, delta_table text)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_delta_store'
LANGUAGE C STABLE STRICT;

-- Checks a Delta table's location: a URL of a store (s3://, s3a://,
-- abfss://, abfs://, wasbs://, https://, file:///) naming the table's
-- directory (the one holding _delta_log/), without control characters or
-- . and .. parts. Returns it without a trailing /.
CREATE OR REPLACE FUNCTION finalize_internal.check_delta_location(delta_table text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(delta_table, 'delta_table');
    IF delta_table !~ '^(s3a?|abfss?|wasbs?|https|file)://[^[:cntrl:]]+$' OR delta_table ~ '/\.\.?(/|$)'
       OR delta_table ~ '_delta_log/?$' OR length(delta_table) > 1024 THEN
        RAISE EXCEPTION 'invalid value for argument delta_table: "%"', delta_table
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A Delta table is named by the URL of its directory (the one that holds _delta_log/), such as s3://lake/sales/orders, abfss://lake@account.dfs.core.windows.net/sales/orders or file:///data/lake/orders, without . or .. parts.';
    END IF;
    RETURN rtrim(delta_table, '/');
END
$$;

-- The body of finalize.add_consumer(table, consumer, delta_table => ...,
-- store => ...): declares a pipeline whose progress is the LSN its commits
-- to a Delta Lake table carry (lsn_from: userMetadata, userMetadata.<key>,
-- or a top-level key of commitInfo). Nobody reports for it: the lake
-- worker of its store reads the table's _delta_log/. Like every new
-- required consumer, it holds the verdict from now on until its table
-- proves a period.
CREATE OR REPLACE FUNCTION finalize_internal.add_consumer(
    caller name,
    table_name text,
    consumer text,
    delta_table @extschema@.delta_location,
    store text,
    lsn_from text DEFAULT 'finalize.lsn',
    required boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    store_name text;
    location text;
BEGIN
    PERFORM finalize_internal.check_lake_source(tt, consumer, 'a Delta table', 'Delta',
        'delta_table => ..., store => ...), with the key that carries that shard''s LSN (lsn_from).');
    PERFORM finalize_internal.require(store, 'store');
    location := finalize_internal.check_delta_location(delta_table);
    store_name := finalize_internal.delta_store(store, (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = caller),
                                                location);
    PERFORM finalize_internal.check_lake_word(lsn_from, 'lsn_from', 'finalize.lsn, userMetadata or userMetadata.lsn');
    IF lsn_from = 'userMetadata.' THEN
        RAISE EXCEPTION 'invalid value for argument lsn_from: "%"', lsn_from
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'userMetadata.<key> names a key of the JSON object in commitInfo.userMetadata; the key is missing.';
    END IF;
    PERFORM finalize_internal.check_consumer_name(consumer);
    PERFORM finalize_internal.require(required, 'required');
    PERFORM finalize_internal.insert_consumer(caller, tt, consumer, required, NULL, NULL);
    INSERT INTO @extschema@.lake_consumer (table_id, consumer, server_name, delta_table, lsn_from)
    VALUES (tt.table_id, consumer, store_name, location, lsn_from);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.add_consumer(
    table_name text,
    consumer text,
    delta_table @extschema@.delta_location,
    store text,
    lsn_from text DEFAULT 'finalize.lsn',
    required boolean DEFAULT true)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.add_consumer(text, text, @extschema@.delta_location, text, text, boolean) IS
    'Declare a pipeline whose progress is the LSN its commits to a Delta Lake table carry (lsn_from), read from the table''s log in a store; nobody reports for it';

-- The catalogs and stores the lake workers serve: finalize_iceberg servers
-- with a consumer of a tracked table, and the stores of Delta consumers
-- (server 0 for those on file://); the scheduler keeps one worker per row.
CREATE OR REPLACE FUNCTION finalize_internal.wanted_catalogs()
RETURNS TABLE (serverid oid, server_name text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT DISTINCT s.oid, s.srvname::text
      FROM @extschema@.lake_consumer l
      JOIN @extschema@.tracked_table t ON t.table_id = l.table_id
      JOIN pg_foreign_server s ON s.srvname = l.server_name
      JOIN pg_foreign_data_wrapper w ON w.oid = s.srvfdw
     WHERE t.untracked_at IS NULL AND w.fdwname = 'finalize_iceberg' AND l.delta_table IS NULL
    UNION
    -- The stores of Delta consumers: a worker per server, one for file://.
    SELECT DISTINCT coalesce(s.oid, 0), coalesce(s.srvname::text, 'file://')
      FROM @extschema@.lake_consumer l
      JOIN @extschema@.tracked_table t ON t.table_id = l.table_id
      LEFT JOIN pg_foreign_server s ON s.srvname = l.server_name
     WHERE t.untracked_at IS NULL AND l.delta_table IS NOT NULL
       AND (s.oid IS NOT NULL OR l.server_name ~ '^file:');
END;

-- The consumers a lake worker polls, those looked at longest ago first,
-- with the source server whose worker resolves their reports; whether a
-- poll that finds nothing new has anything to write (quiet: no condition to
-- clear, polled_at younger than 50 seconds; _lake_observe writes it at most
-- once a minute); and whether the role that declared it may still read
-- through the server (allowed: USAGE on it, and the right to use its
-- owner's user mapping when there is one, as add_consumer checked: a
-- server dropped and created again under its name by another role, or
-- handed to another owner, does not inherit the consumer).
CREATE OR REPLACE FUNCTION finalize_internal.lake_consumers(server_name text)
RETURNS TABLE (table_id bigint, table_name text, consumer text, iceberg_table text, ref text,
               lsn_property text, seen_head_id bigint, seen_head_sequence bigint, seen_lsn text,
               seen_table_uuid text, source_serverid oid, quiet boolean, lake_id bigint, allowed boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT l.table_id, t.table_name, l.consumer, l.iceberg_table, l.ref, l.lsn_property, l.seen_head_id,
           l.seen_head_sequence, l.seen_lsn::text, l.seen_table_uuid, s.oid,
           l.condition IS NULL AND l.polled_at >= now() - interval '50 seconds', l.lake_id,
           r.oid IS NOT NULL AND cs.oid IS NOT NULL AND finalize_internal.server_use_refused(r.oid, cs.oid) IS NULL
      FROM @extschema@.lake_consumer l
      JOIN @extschema@.tracked_table t ON t.table_id = l.table_id
      JOIN @extschema@.consumer c ON c.table_id = l.table_id AND c.consumer = l.consumer
      LEFT JOIN pg_foreign_server s ON s.srvname = t.server_name
      LEFT JOIN pg_foreign_server cs ON cs.srvname = l.server_name
      LEFT JOIN pg_roles r ON r.rolname = c.created_by
     WHERE l.server_name = lake_consumers.server_name AND t.untracked_at IS NULL AND l.delta_table IS NULL
     ORDER BY l.polled_at NULLS FIRST, l.table_id, l.consumer;
END;

-- The Delta consumers a lake worker of a store polls (server NULL: those
-- on file://), as lake_consumers lists the Iceberg ones: longest ago
-- first, quiet, and the role that declared it, as which the worker opens
-- the store (allowed: the role still exists; whether it may still read
-- the store is the store's own rule, which the worker's opening applies).
CREATE OR REPLACE FUNCTION finalize_internal.delta_consumers(server_name text)
RETURNS TABLE (table_id bigint, table_name text, consumer text, delta_table text, lsn_from text, store text,
               seen_head_id bigint, seen_head_sequence bigint, seen_lsn text, seen_table_uuid text,
               source_serverid oid, quiet boolean, lake_id bigint, allowed boolean, declarer oid,
               seen_identity text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT l.table_id, t.table_name, l.consumer, l.delta_table, l.lsn_from, l.server_name, l.seen_head_id,
           l.seen_head_sequence, l.seen_lsn::text, l.seen_table_uuid, s.oid,
           l.condition IS NULL AND l.polled_at >= now() - interval '50 seconds', l.lake_id,
           r.oid IS NOT NULL, r.oid, l.seen_identity
      FROM @extschema@.lake_consumer l
      JOIN @extschema@.tracked_table t ON t.table_id = l.table_id
      JOIN @extschema@.consumer c ON c.table_id = l.table_id AND c.consumer = l.consumer
      LEFT JOIN pg_foreign_server s ON s.srvname = t.server_name
      LEFT JOIN pg_roles r ON r.rolname = c.created_by
     WHERE l.delta_table IS NOT NULL AND t.untracked_at IS NULL
       AND CASE WHEN delta_consumers.server_name IS NULL THEN l.server_name ~ '^file:'
                ELSE l.server_name = delta_consumers.server_name END
     ORDER BY l.polled_at NULLS FIRST, l.table_id, l.consumer;
END;

-- What a lake consumer reads, for the details of its facts and incidents:
-- an Iceberg table, its ref and catalog; a Delta table and its store.
CREATE OR REPLACE FUNCTION finalize_internal.lake_detail(l @extschema@.lake_consumer)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN l.delta_table IS NULL
            THEN jsonb_build_object('iceberg_table', l.iceberg_table, 'ref', l.ref, 'catalog', l.server_name)
            ELSE jsonb_build_object('delta_table', l.delta_table, 'store', l.server_name) END;

-- What a lake consumer reads, for messages: "Iceberg table ns.t (ref main,
-- catalog c)" or "Delta table s3://... (store s)".
CREATE OR REPLACE FUNCTION finalize_internal.lake_label(l @extschema@.lake_consumer)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN l.delta_table IS NULL
            THEN format('Iceberg table %s (ref %s, catalog %s)', l.iceberg_table, l.ref, l.server_name)
            ELSE format('Delta table %s (store %s)', l.delta_table, l.server_name) END;

-- The earliest commit time a change the worker has not read yet (above a
-- table's offset) may carry: the offset's commit time less the source's
-- clock_tolerance, since SQL Server's clock may have been stepped back by
-- up to that much after it stamped the offset (a tolerance unknown: the
-- largest, 1 hour). Where every loss of such changes starts
-- (_resume_after_loss, _lake_lost_from); NULL for no offset.
CREATE OR REPLACE FUNCTION finalize_internal.unread_from(offset_commit_time timestamptz, clock_tolerance interval)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN offset_commit_time - coalesce(clock_tolerance, interval '1 hour');

-- Where a rollback's loss starts: the earliest commit time a change with an
-- LSN above held (up to proved) may have. One the worker has read lies in
-- a range fact that ends above held, no earlier than its first commit (the
-- least commit time of its rows), or its end when it has none; one it has
-- not read yet (proved above the table's offset, or a table read no
-- further than held) no earlier than _unread_from, the offset's commit time
-- less the source's clock_tolerance: SQL Server's clock may have been
-- stepped back since. held NULL (the ref holds nothing provable), or facts
-- that no longer reach back to held (retention): -infinity.
CREATE OR REPLACE FUNCTION finalize_internal.lake_lost_from(table_id bigint, held @extschema@.lsn, proved @extschema@.lsn,
                                            clock_tolerance interval)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT CASE
        WHEN held IS NULL THEN '-infinity'::timestamptz
        WHEN NOT EXISTS (SELECT FROM @extschema@.fact f
                          WHERE f.table_id = lake_lost_from.table_id AND f.kind = 'range' AND f.start_lsn <= held)
             AND EXISTS (SELECT FROM @extschema@.fact f
                          WHERE f.table_id = lake_lost_from.table_id AND f.kind = 'range')
            THEN '-infinity'::timestamptz
        ELSE coalesce(LEAST((SELECT min(coalesce(f.first_commit_time, f.end_commit_time)) FROM @extschema@.fact f
                              WHERE f.table_id = lake_lost_from.table_id AND f.kind = 'range' AND f.end_lsn > held),
                            (SELECT finalize_internal.unread_from(w.offset_commit_time, lake_lost_from.clock_tolerance)
                               FROM @extschema@.watermark w
                              WHERE w.table_id = lake_lost_from.table_id
                                AND (proved IS NULL OR w.offset_lsn IS NULL OR proved > w.offset_lsn))),
                      (SELECT finalize_internal.unread_from(w.offset_commit_time, lake_lost_from.clock_tolerance)
                         FROM @extschema@.watermark w
                        WHERE w.table_id = lake_lost_from.table_id),
                      '-infinity'::timestamptz)
    END;
END;

-- A rollback of a lake consumer's ref: data the verdict covered left the
-- Iceberg table. Records a loss from the earliest commit time a change
-- above held may have (_lake_lost_from; reaching back by the lateness
-- allowance on an event-time table) to infinity, so that those periods are
-- not final until finalize.acknowledge_loss(); the consumer's report goes
-- down to what the ref still claims (new_lsn, NULL for nothing) and waits
-- for its resolution again; an incident (data_loss) and a NOTIFY on
-- finalize_alert say so. The caller holds the table's verdict and the
-- consumer's row.
CREATE OR REPLACE FUNCTION finalize_internal.lake_rollback(tt @extschema@.tracked_table, l @extschema@.lake_consumer,
                                           new_lsn @extschema@.lsn, held @extschema@.lsn, reason text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    wm @extschema@.watermark;
    -- A shared carrier above what was proven (LSNs that went up and down)
    -- holds no more than what was proven.
    -- (LEAST skips a NULL: nothing held must stay nothing held.)
    held_capped @extschema@.lsn := CASE WHEN held IS NOT NULL THEN LEAST(held, l.seen_lsn) END;
    lost_from timestamptz := finalize_internal.lake_lost_from(tt.table_id, held_capped, l.seen_lsn,
                                                         finalize_internal.clock_tolerance(tt.server_name));
    commit_from timestamptz;
    fact bigint;
    message text;
BEGIN
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    IF tt.event_time_column IS NOT NULL THEN
        commit_from := lost_from;
        lost_from := coalesce(finalize_internal.instant_minus(lost_from, GREATEST(tt.allowed_lateness, wm.event_allowance)),
                              '-infinity');
    END IF;
    message := format('%s no longer holds what consumer "%s" of table "%s" had committed: %s. It proved LSN %s; it now holds %s. The periods from %s on are not final until finalize.acknowledge_loss().',
                      finalize_internal.lake_label(l), l.consumer, tt.table_name, reason, l.seen_lsn,
                      coalesce('LSN ' || held::text, 'nothing provable'),
                      CASE WHEN isfinite(lost_from) THEN finalize_internal.utc_iso(lost_from) ELSE 'the start' END);
    INSERT INTO @extschema@.fact (table_id, kind, event, detail)
    VALUES (tt.table_id, 'event', 'data_loss',
            finalize_internal.lake_detail(l) || jsonb_build_object('cause', 'lake_rollback', 'consumer', l.consumer,
                               'reason', reason,
                               'proved_lsn', l.seen_lsn, 'held_lsn', held, 'new_lsn', new_lsn,
                               'lost_from', CASE WHEN isfinite(lost_from) THEN finalize_internal.utc_iso(lost_from)
                                                 ELSE lost_from::text END))
    RETURNING fact_id INTO fact;
    INSERT INTO @extschema@.loss (table_id, fact_id, lost_from, lost_to, from_lsn, to_lsn, created_at, commit_from)
    VALUES (tt.table_id, fact, lost_from, 'infinity', held_capped, l.seen_lsn, clock_timestamp(), commit_from);
    PERFORM finalize_internal.refresh_loss_blocked(tt.table_id);
    UPDATE @extschema@.consumer c
       SET reported_lsn = new_lsn, reported_at = now(), resolved_for_lsn = NULL, mapped_lsn = NULL,
           commit_time = NULL, resolved_at = NULL, resolve_error = NULL
     WHERE c.table_id = tt.table_id AND c.consumer = l.consumer;
    PERFORM finalize_internal.alert(jsonb_build_object('alert', 'data_loss', 'table', tt.table_name,
                                                  'consumer', l.consumer, 'iceberg_table', l.iceberg_table,
                                                  'detail', message)
                                    || (finalize_internal.lake_detail(l) - 'ref' - 'catalog'));
    PERFORM finalize_internal.raise_alert('data_loss', 'critical', tt.table_id, l.server_name, l.consumer, message,
                                     (finalize_internal.lake_detail(l) - 'catalog')
                                     || jsonb_build_object('cause', 'lake_rollback', 'proved_lsn', l.seen_lsn, 'held_lsn', held));
END
$$;

-- What a lake worker saw of one consumer's table this poll, recorded in
-- its write transaction, for the declaration it polled (lake_id) as it
-- was when judged (the head and LSN seen then; changed since, nothing is
-- recorded and the next poll judges again): the
-- condition (NULL when the metadata was read) and its sentence; when read,
-- the ref's head (recorded when it moved, so the next walk meets it), the
-- newest carrier's snapshot and LSN (NULL: none new), the table-uuid (and a Delta
-- consumer's identity: its store and the listing of the version read), or a
-- rollback (with the LSN the ref still provably holds). A condition that
-- has lasted finalize.alert_after opens an incident of its name; one that
-- clears resolves it. A consumer or verdict row another transaction holds
-- is skipped (the next poll sees the same again). Returns whether the
-- consumer's report moved, so that its source's worker resolves it now.
CREATE OR REPLACE FUNCTION finalize_internal.lake_observe(
    lake_id bigint,
    judged_head_id bigint,
    judged_lsn text,
    condition text,
    detail text,
    head_id bigint,
    head_sequence bigint,
    carrier_id bigint,
    lsn text,
    table_uuid text,
    rolled_back boolean,
    held_lsn text,
    reason text,
    identity text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
    l @extschema@.lake_consumer;
    new_lsn @extschema@.lsn := finalize_internal.lsn_arg(lsn, 'lsn');
    moved boolean := false;
    since timestamptz;
BEGIN
    SELECT x.* INTO l FROM @extschema@.lake_consumer x WHERE x.lake_id = lake_observe.lake_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    tt := finalize_internal.try_lock_tracked(l.table_id);
    IF tt.table_id IS NULL OR NOT finalize_internal.lock_consumer(tt.table_id, l.consumer) THEN
        RETURN false;
    END IF;
    -- A rollback lowers a verdict already final: the table's row too, so
    -- that no announcement of a table built from it, read before this
    -- commits, is sent after it (_hold_inputs).
    IF rolled_back THEN
        PERFORM FROM @extschema@.tracked_table t WHERE t.table_id = tt.table_id FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
    END IF;
    -- Again under the lock: the row may have changed since it was read, and
    -- an observation judged against another state (a reset meanwhile) is
    -- not this row's.
    SELECT x.* INTO l FROM @extschema@.lake_consumer x WHERE x.lake_id = lake_observe.lake_id;
    IF NOT FOUND OR l.seen_head_id IS DISTINCT FROM judged_head_id
       OR l.seen_lsn IS DISTINCT FROM finalize_internal.lsn_arg(judged_lsn, 'judged_lsn') THEN
        RETURN false;
    END IF;
    since := CASE WHEN condition IS NULL THEN NULL
                  WHEN l.condition IS NOT DISTINCT FROM condition THEN l.condition_since ELSE now() END;
    UPDATE @extschema@.lake_consumer x
       SET polled_at = now(),
           loaded_at = CASE WHEN condition IS NULL THEN now() ELSE x.loaded_at END,
           condition = lake_observe.condition,
           condition_since = since,
           last_error = CASE WHEN condition IS NULL THEN x.last_error ELSE detail END
     WHERE x.lake_id = l.lake_id
       AND ((x.condition, x.last_error) IS DISTINCT FROM (lake_observe.condition, coalesce(detail, x.last_error))
            OR rolled_back OR new_lsn IS DISTINCT FROM x.seen_lsn OR head_id IS DISTINCT FROM x.seen_head_id
            OR x.polled_at IS NULL OR x.polled_at < now() - interval '1 minute');
    -- An incident is opened only while its condition lasts: leaving the
    -- condition resolves it.
    IF l.condition IS NOT NULL AND l.condition IS DISTINCT FROM condition THEN
        PERFORM finalize_internal.resolve_alerts(l.condition, tt.table_id, l.server_name, l.consumer);
    END IF;
    IF condition IS NOT NULL AND since <= now() - finalize_internal.alert_after() THEN
        PERFORM finalize_internal.raise_alert(condition, 'warning', tt.table_id, l.server_name, l.consumer,
            format('Consumer "%s" of table "%s" reads %s, which has failed since %s: %s The verdict waits for it.',
                   l.consumer, tt.table_name, finalize_internal.lake_label(l), since, detail));
    END IF;
    IF condition IS NOT NULL THEN
        -- A malformed property on a ref shown to descend from the head seen
        -- last: that head moves on, so the next walk meets it.
        IF condition = 'property_malformed' AND head_id IS NOT NULL AND l.seen_lsn IS NOT NULL THEN
            UPDATE @extschema@.lake_consumer x SET seen_head_id = head_id, seen_head_sequence = head_sequence
             WHERE x.lake_id = l.lake_id AND x.seen_head_id IS DISTINCT FROM head_id;
        END IF;
        RETURN false;
    END IF;
    IF rolled_back THEN
        PERFORM finalize_internal.lake_rollback(tt, l, new_lsn, finalize_internal.lsn_arg(held_lsn, 'held_lsn'), reason);
        moved := true;
    ELSIF new_lsn IS NOT NULL THEN
        moved := finalize_internal.advance_report(tt.table_id, l.consumer, new_lsn);
    END IF;
    IF rolled_back OR new_lsn IS NOT NULL THEN
        -- What the ref holds now: the head, its newest carrier and LSN (after
        -- a rollback to nothing provable, nothing: the next carrier starts
        -- again).
        UPDATE @extschema@.lake_consumer x
           SET seen_snapshot_id = CASE WHEN new_lsn IS NULL THEN NULL ELSE coalesce(carrier_id, x.seen_snapshot_id) END,
               seen_head_id = CASE WHEN new_lsn IS NULL THEN NULL ELSE head_id END,
               seen_head_sequence = CASE WHEN new_lsn IS NULL THEN NULL ELSE head_sequence END,
               seen_lsn = new_lsn,
               seen_table_uuid = CASE WHEN new_lsn IS NULL THEN NULL ELSE table_uuid END,
               seen_identity = CASE WHEN new_lsn IS NULL THEN NULL ELSE identity END,
               seen_at = now()
         WHERE x.lake_id = l.lake_id
           -- Without a rollback, what was proven only moves forward.
           AND (rolled_back OR x.seen_lsn IS NULL OR new_lsn >= x.seen_lsn)
           AND (x.seen_head_id, x.seen_lsn, x.seen_table_uuid, x.seen_snapshot_id, x.seen_identity)
               IS DISTINCT FROM (head_id, new_lsn, table_uuid, coalesce(carrier_id, x.seen_snapshot_id), identity);
    END IF;
    RETURN moved;
END
$$;
