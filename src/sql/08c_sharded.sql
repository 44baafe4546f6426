
-- Checks a shard's label: what the lake's partition paths write
-- (shard=<label>), so 1 to 63 characters, not only spaces, no "/" and no
-- control characters.
CREATE OR REPLACE FUNCTION finalize_internal.check_shard_label(table_name text, shard text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(shard, 'shard');
    IF shard !~ '\S' OR length(shard) > 63 OR shard ~ '[/[:cntrl:]]' THEN
        RAISE EXCEPTION 'invalid value for argument shard of sharded table "%": "%"', table_name,
                        regexp_replace(left(shard, 70), '[[:cntrl:]]', '?', 'g')
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A shard label is what the lake''s partition paths write (shard=<label>): 1 to 63 characters, not only spaces, without "/" or control characters.',
                  HINT = 'Name the shard after its database, for example ''db07''.';
    END IF;
END
$$;

-- The sharded table of a name (its row, no lock), or the errors for a name
-- that is not tracked or not a sharded table.
CREATE OR REPLACE FUNCTION finalize_internal.sharded(table_name text)
RETURNS @extschema@.tracked_table
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
BEGIN
    IF tt.kind <> 'sharded' THEN
        RAISE EXCEPTION 'table "%" is not a sharded table', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = CASE WHEN tt.shard_of IS NOT NULL
                                THEN format('It is shard "%s" of sharded table "%s".', tt.shard,
                                            (SELECT p.table_name FROM @extschema@.tracked_table p WHERE p.table_id = tt.shard_of))
                                ELSE format('It is a %s table.', tt.kind) END,
                  HINT = 'A sharded table is tracked with finalize.track_sharded(); its shards are added with finalize.add_shard().';
    END IF;
    RETURN tt;
END
$$;

-- The body of finalize.track_sharded: a lake table fed by many shards, with
-- the policy they all follow. Its verdict waits for its first shard's.
-- Returns its id.
CREATE OR REPLACE FUNCTION finalize_internal.track_sharded(
    caller name,
    table_name   text,
    granularity  interval DEFAULT interval '1 hour',
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
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    zone text;
    new_id bigint;
BEGIN
    PERFORM finalize_internal.check_table_name(table_name, 'sales.orders');
    IF EXISTS (SELECT FROM @extschema@.tracked_table t WHERE t.table_name = track_sharded.table_name
                                                        AND t.untracked_at IS NULL) THEN
        PERFORM finalize_internal.already_tracked(table_name);
    END IF;
    PERFORM finalize_internal.check_granularity(granularity, 'granularity');
    zone := finalize_internal.check_zone(period_zone, 'period_zone');
    PERFORM finalize_internal.check_ddl_policy(ddl_policy);
    PERFORM finalize_internal.check_on_data_loss(on_data_loss);
    PERFORM finalize_internal.require(lateness_policy, 'lateness_policy');
    PERFORM finalize_internal.require(allowed_lateness, 'allowed_lateness');
    PERFORM finalize_internal.require(lateness_window, 'lateness_window');
    IF event_time_column IS NULL
       AND (event_time_zone IS NOT NULL OR lateness_policy <> 'exact' OR allowed_lateness <> interval '0'
            OR lateness_quantile IS NOT NULL) THEN
        RAISE EXCEPTION 'lateness settings need an event_time_column'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A table without an event column is partitioned by commit time, which is exact: it has no lateness.',
                  HINT = 'Pass event_time_column => ''<captured date/time column>'' too.';
    END IF;
    PERFORM finalize_internal.check_event_time(event_time_column, event_time_zone, lateness_policy, allowed_lateness,
                                          lateness_quantile, lateness_window, granularity);
    BEGIN
        -- Lengths of time without days, as track_table keeps them.
        INSERT INTO @extschema@.tracked_table
            (table_name, kind, granularity, period_zone, ddl_policy, on_data_loss, created_by, event_time_column,
             event_time_zone, lateness_policy, allowed_lateness, lateness_quantile, lateness_window)
        VALUES (table_name, 'sharded', granularity, zone, ddl_policy, on_data_loss, caller, event_time_column,
                event_time_zone, lateness_policy, make_interval(secs => extract(epoch FROM allowed_lateness)),
                lateness_quantile, make_interval(secs => extract(epoch FROM lateness_window)))
        RETURNING tracked_table.table_id INTO new_id;
    EXCEPTION WHEN unique_violation THEN
        PERFORM finalize_internal.already_tracked(table_name);
    END;
    INSERT INTO @extschema@.watermark (table_id) VALUES (new_id);
    PERFORM finalize_internal.seal_catalog();
    RETURN new_id;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.track_sharded(
    table_name   text,
    granularity  interval DEFAULT interval '1 hour',
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
COMMENT ON FUNCTION @extschema@.track_sharded(text, interval, text, text, text, text, text, interval,
                                              double precision, interval, text) IS
    'Track a lake table fed by many shards (the same SQL Server table in many databases): final for a period once every shard is; shards are added with finalize.add_shard';

-- Locks a sharded table for a change of its shards: its verdict
-- (_lock_tracked: its row, key share, then its watermark), the lock that
-- add_shard, drop_shard, alter_tracked_table and untrack_table all take on
-- it, so that they run one at a time. Returns its row as it is once
-- locked, never as it was read before: the policy alter_tracked_table
-- committed meanwhile is the one a new shard takes. A table untracked
-- meanwhile is an error naming it (a shard added to it would be left
-- tracked, with nothing that could remove it).
CREATE OR REPLACE FUNCTION finalize_internal.lock_sharded(table_id bigint, table_name text)
RETURNS @extschema@.tracked_table
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tt @extschema@.tracked_table := finalize_internal.lock_tracked(table_id, false);
BEGIN
    IF tt.table_id IS NULL OR tt.untracked_at IS NOT NULL THEN
        RAISE EXCEPTION 'sharded table "%" was untracked meanwhile', table_name
            USING ERRCODE = 'undefined_object',
                  DETAIL = 'Another transaction untracked it while this call waited for it; nothing was changed.',
                  HINT = 'Track it again with finalize.track_sharded() if it is still fed by its shards.';
    END IF;
    RETURN tt;
END
$$;

-- The body of finalize.add_shard: one more shard of a sharded table, the
-- SQL Server table source_table of server server_name, tracked as
-- <table_name>/<shard> with the sharded table's policy (track_table's
-- checks, the caller's USAGE on the server included) and its table-wide
-- consumers. Until the shard has a verdict of its own the sharded table's
-- verdict stands still; what was final stays final. Two shards of a table
-- may share a server (a database holding one schema per tenant, say), not
-- a source table: its changes would count twice. Returns the shard's id.
CREATE OR REPLACE FUNCTION finalize_internal.add_shard(
    caller name,
    table_name   text,
    shard        text,
    server_name  text,
    source_table text,
    start_from   text DEFAULT 'max_lsn')
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.sharded(table_name);
    wm @extschema@.watermark;
    shard_name text;
    parts text[];
    other text;
    new_id bigint;
    part @extschema@.tracked_table;
    c @extschema@.shard_consumer;
BEGIN
    PERFORM finalize_internal.check_shard_label(tt.table_name, shard);
    shard_name := tt.table_name || '/' || shard;
    IF length(shard_name) > 255 THEN
        RAISE EXCEPTION 'the name of shard "%" of sharded table "%" is longer than 255 characters', shard, tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('A shard is tracked as <sharded table>/<shard>, here %s characters.', length(shard_name)),
                  HINT = 'Choose a shorter label.';
    END IF;
    -- SQL Server's answer about the table, before any lock is taken (it may
    -- wait for the network).
    PERFORM finalize_internal.require(source_table, 'source_table');
    parts := finalize_internal.split_mssql_name(source_table, 'source_table');
    PERFORM finalize_internal.check_source_table((finalize_internal.tracking_server(caller, server_name)).oid,
                                            parts[1], parts[2]);
    -- Its verdict, so that shards are added and dropped one at a time, and
    -- its row again once locked: the policy the shard takes is the one
    -- committed last (alter_tracked_table), not the one read before.
    tt := finalize_internal.lock_sharded(tt.table_id, tt.table_name);
    IF EXISTS (SELECT FROM @extschema@.tracked_table t
                WHERE t.shard_of = tt.table_id AND t.shard = add_shard.shard AND t.untracked_at IS NULL) THEN
        RAISE EXCEPTION 'shard "%" of sharded table "%" already exists', shard, tt.table_name
            USING ERRCODE = 'duplicate_object',
                  HINT = format('Choose another label, or drop it first with finalize.drop_shard(%L, %L).', tt.table_name, shard);
    END IF;
    SELECT t.shard INTO other FROM @extschema@.tracked_table t
     WHERE t.shard_of = tt.table_id AND t.untracked_at IS NULL AND t.server_name = add_shard.server_name
       AND t.source_schema = parts[1] AND t.source_name = parts[2];
    IF FOUND THEN
        RAISE EXCEPTION 'shard "%" of sharded table "%" already reads %.% on server "%"', other, tt.table_name,
                        parts[1], parts[2], server_name
            USING ERRCODE = 'duplicate_object',
                  DETAIL = 'Each shard is one SQL Server table: two shards reading the same one would count its changes twice. A server may hold several shards of a table only in different source tables.',
                  HINT = 'Give this shard the server and table of its own database.';
    END IF;
    new_id := finalize_internal.track_table(caller, shard_name, server_name, source_table, tt.granularity, start_from,
                                       tt.ddl_policy, tt.on_data_loss, tt.event_time_column, tt.event_time_zone,
                                       tt.lateness_policy, tt.allowed_lateness, tt.lateness_quantile,
                                       tt.lateness_window, tt.period_zone, false);
    UPDATE @extschema@.tracked_table t SET shard_of = tt.table_id, shard = add_shard.shard WHERE t.table_id = new_id;
    INSERT INTO @extschema@.derived_input (table_id, input_id) VALUES (tt.table_id, new_id);
    -- The consumers of every shard are this one's too, from the start.
    SELECT t.* INTO part FROM @extschema@.tracked_table t WHERE t.table_id = new_id;
    FOR c IN SELECT x.* FROM @extschema@.shard_consumer x WHERE x.table_id = tt.table_id ORDER BY x.consumer LOOP
        PERFORM finalize_internal.insert_consumer(caller, part, c.consumer, c.required, c.reporter, c.reporter_name);
    END LOOP;
    SELECT w.* INTO wm FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    IF wm.finalized_until IS NOT NULL THEN
        RAISE NOTICE 'sharded table "%" is final until %; shard "%" holds it from now on', tt.table_name,
                     wm.finalized_until, shard
            USING DETAIL = 'The verdict waits for the shard''s first verdict, then moves only as far as every shard allows. Periods already final stay final (a verdict never moves back): what the shard committed in them must already be in the lake.';
    END IF;
    RETURN new_id;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.add_shard(
    table_name   text,
    shard        text,
    server_name  text,
    source_table text,
    start_from   text DEFAULT 'max_lsn')
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.add_shard(text, text, text, text, text) IS
    'Add a shard to a sharded table: the SQL Server table source_table of server server_name, tracked as <table_name>/<shard>; returns its id';

-- The body of finalize.drop_shard: the shard no longer feeds the sharded
-- table, whose verdict may then move on (never back). The shard is
-- untracked; its facts stay until retention removes them unless keep_facts
-- is false. Refused while another derived table uses the shard, and while
-- a loss of the shard is not acknowledged: dropping it would release the
-- sharded table's periods the loss holds.
CREATE OR REPLACE FUNCTION finalize_internal.drop_shard(caller name, table_name text, shard text, keep_facts boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.sharded(table_name);
    part @extschema@.tracked_table;
    users text[];
    before timestamptz;
    after timestamptz;
BEGIN
    PERFORM finalize_internal.require(shard, 'shard');
    PERFORM finalize_internal.require(keep_facts, 'keep_facts');
    tt := finalize_internal.lock_sharded(tt.table_id, tt.table_name);
    SELECT t.* INTO part FROM @extschema@.tracked_table t
     WHERE t.shard_of = tt.table_id AND t.shard = drop_shard.shard AND t.untracked_at IS NULL
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'sharded table "%" has no shard "%"', tt.table_name, left(shard, 63)
            USING ERRCODE = 'undefined_object',
                  HINT = format('Its shards are the rows of finalize.status with sharded_table = %L.', tt.table_name);
    END IF;
    users := ARRAY(SELECT u FROM unnest(finalize_internal.dependents(part.table_id)) AS u WHERE u <> tt.table_name);
    IF cardinality(users) > 0 THEN
        RAISE EXCEPTION 'shard "%" of sharded table "%" is an input of derived %', shard, tt.table_name,
                        (SELECT CASE WHEN count(*) > 1 THEN 'tables ' ELSE 'table ' END
                                || string_agg(format('"%s"', u), ', ') FROM unnest(users) AS u)
            USING ERRCODE = 'dependent_objects_still_exist',
                  DETAIL = 'A derived table is final only as far as its inputs are: without this shard its verdict would stop for ever.',
                  HINT = 'Untrack those derived tables first.';
    END IF;
    IF finalize_internal.has_open_loss(part.table_id) THEN
        RAISE EXCEPTION 'shard "%" of sharded table "%" has a loss that is not acknowledged', shard, tt.table_name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'The loss holds periods of the sharded table; dropping the shard would release them while the lake may still miss its changes.',
                  HINT = format('Acknowledge the loss on the shard first (finalize.explain_verdict(%L) names the call), once the lake''s copy was repaired or the loss accepted, then drop it.',
                                part.table_name);
    END IF;
    SELECT w.finalized_until INTO before FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    DELETE FROM @extschema@.derived_input d WHERE d.table_id = tt.table_id AND d.input_id = part.table_id;
    -- Nothing is watched for an untracked table: its incidents end here.
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.table_id = part.table_id AND a.state <> 'resolved';
    PERFORM finalize_internal.drop_table_publications(ARRAY[part.table_id]);
    IF keep_facts THEN
        UPDATE @extschema@.tracked_table t SET untracked_at = now() WHERE t.table_id = part.table_id;
    ELSE
        DELETE FROM @extschema@.tracked_table t WHERE t.table_id = part.table_id;
    END IF;
    PERFORM finalize_internal.refresh_loss_blocked(tt.table_id);
    after := finalize_internal.advance(tt.table_id);
    IF after IS DISTINCT FROM before THEN
        RAISE NOTICE 'sharded table "%" is now final until % (it was until %): shard "%" no longer holds it',
                     tt.table_name, after, coalesce(before::text, 'nothing'), shard;
    END IF;
    IF NOT EXISTS (SELECT FROM @extschema@.tracked_table t WHERE t.shard_of = tt.table_id AND t.untracked_at IS NULL) THEN
        RAISE NOTICE 'sharded table "%" has no shard left', tt.table_name
            USING DETAIL = 'Its verdict stays where it is and moves again once a shard is added and has a verdict.';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.drop_shard(table_name text, shard text, keep_facts boolean DEFAULT true)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.drop_shard(text, text, boolean) IS
    'Remove a shard from a sharded table (its verdict may then move on, never back) and untrack it; refused while a loss of the shard is not acknowledged';

-- The active shards of a sharded table, in id order.
CREATE OR REPLACE FUNCTION finalize_internal.shards(table_id bigint)
RETURNS SETOF @extschema@.tracked_table
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT t.* FROM @extschema@.tracked_table t
     WHERE t.shard_of = shards.table_id AND t.untracked_at IS NULL
     ORDER BY t.table_id;
END;

-- add_consumer on a sharded table: the consumer of every shard, now and
-- when one is added, so that no shard is ever final before the pipeline
-- applied it. A shard that has a consumer of that name already (declared
-- on it alone) is an error naming it.
CREATE OR REPLACE FUNCTION finalize_internal.add_sharded_consumer(caller name, tt @extschema@.tracked_table, consumer text,
                                                  required boolean, reporter regrole, reporter_name name)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    part @extschema@.tracked_table;
    taken text;
BEGIN
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    SELECT t.table_name INTO taken FROM finalize_internal.shards(tt.table_id) AS t
      JOIN @extschema@.consumer c ON c.table_id = t.table_id AND c.consumer = add_sharded_consumer.consumer
     ORDER BY t.table_id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'consumer "%" already exists on shard "%" of sharded table "%"', consumer, taken, tt.table_name
            USING ERRCODE = 'duplicate_object',
                  DETAIL = 'A consumer declared on a sharded table is declared on each of its shards; this one was declared on the shard alone.',
                  HINT = format('Name the consumer otherwise, or drop it from the shard first with finalize.drop_consumer(%L, %L).',
                                taken, consumer);
    END IF;
    BEGIN
        INSERT INTO @extschema@.shard_consumer (table_id, consumer, required, reporter, reporter_name, created_by)
        VALUES (tt.table_id, consumer, required, reporter, reporter_name, caller);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'consumer "%" of sharded table "%" already exists', consumer, tt.table_name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Change it with finalize.alter_consumer() (dropping and adding it again would let the verdict move past what it applied).';
    END;
    FOR part IN SELECT t.* FROM finalize_internal.shards(tt.table_id) AS t LOOP
        PERFORM finalize_internal.insert_consumer(caller, part, consumer, required, reporter, reporter_name);
    END LOOP;
END
$$;

-- alter_consumer on a sharded table: the same change on the consumer of
-- every shard (reset forgets what each reported); made optional, the
-- shards' verdicts and then the sharded table's move at once.
CREATE OR REPLACE FUNCTION finalize_internal.alter_sharded_consumer(tt @extschema@.tracked_table, consumer text, required boolean,
                                                    reporter regrole, reporter_name name, reset boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    part @extschema@.tracked_table;
BEGIN
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    UPDATE @extschema@.shard_consumer c
       SET required = coalesce(alter_sharded_consumer.required, c.required),
           reporter = coalesce(alter_sharded_consumer.reporter, c.reporter),
           reporter_name = coalesce(alter_sharded_consumer.reporter_name, c.reporter_name)
     WHERE c.table_id = tt.table_id AND c.consumer = consumer;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" of sharded table "%" does not exist', consumer, tt.table_name
            USING ERRCODE = 'undefined_object',
                  HINT = format('Declare it with finalize.add_consumer(%L, %L), or name the shard whose consumer it is.',
                                tt.table_name, consumer);
    END IF;
    FOR part IN SELECT t.* FROM finalize_internal.shards(tt.table_id) AS t LOOP
        PERFORM finalize_internal.lock_tracked(part.table_id);
        UPDATE @extschema@.consumer c
           SET required = coalesce(alter_sharded_consumer.required, c.required),
               reporter = coalesce(alter_sharded_consumer.reporter, c.reporter),
               reporter_name = coalesce(alter_sharded_consumer.reporter_name, c.reporter_name)
         WHERE c.table_id = part.table_id AND c.consumer = consumer;
        IF reset THEN
            PERFORM finalize_internal.forget_report(part, consumer);
        END IF;
    END LOOP;
    IF reset THEN
        RAISE NOTICE 'consumer "%" of every shard of sharded table "%" starts again from nothing', consumer, tt.table_name
            USING DETAIL = 'What is final stays final; each shard''s verdict waits for the consumer''s next report for it.';
    END IF;
    IF reporter IS NOT NULL THEN
        PERFORM finalize_internal.reporter_notice(reporter, tt, consumer);
    END IF;
    IF required IS NOT NULL AND NOT required THEN
        FOR part IN SELECT t.* FROM finalize_internal.shards(tt.table_id) AS t LOOP
            PERFORM finalize_internal.advance(part.table_id);
        END LOOP;
        PERFORM finalize_internal.advance(tt.table_id);
    END IF;
END
$$;

-- drop_consumer on a sharded table: forgets the consumer of every shard;
-- the shards' verdicts and then the sharded table's may move at once, and
-- a NOTICE says how far. Returns whether it was declared.
CREATE OR REPLACE FUNCTION finalize_internal.drop_sharded_consumer(tt @extschema@.tracked_table, consumer text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    part @extschema@.tracked_table;
    before timestamptz;
    after timestamptz;
BEGIN
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    SELECT w.finalized_until INTO before FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    DELETE FROM @extschema@.shard_consumer c WHERE c.table_id = tt.table_id AND c.consumer = consumer;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    FOR part IN SELECT t.* FROM finalize_internal.shards(tt.table_id) AS t LOOP
        PERFORM finalize_internal.lock_tracked(part.table_id);
        DELETE FROM @extschema@.consumer c WHERE c.table_id = part.table_id AND c.consumer = consumer;
        UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
         WHERE a.kind IN ('consumer_stalled', 'consumer_locked', 'report_ahead')
           AND a.table_id = part.table_id AND a.subject = consumer AND a.state <> 'resolved';
        PERFORM finalize_internal.advance(part.table_id);
    END LOOP;
    after := finalize_internal.advance(tt.table_id);
    IF after IS DISTINCT FROM before THEN
        RAISE NOTICE 'table "%" is now final until % (it was until %): consumer "%" no longer holds it',
                     tt.table_name, after, coalesce(before::text, 'nothing'), consumer
            USING DETAIL = 'The periods in between are final whether or not the consumer applied them.';
    END IF;
    RETURN true;
END
$$;

-- Refuses to change or drop, on one shard, a consumer declared on its
-- sharded table: it must hold every shard alike (fn names the call that
-- was refused, for the hint).
CREATE OR REPLACE FUNCTION finalize_internal.refuse_shard_consumer(tt @extschema@.tracked_table, consumer text, fn text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    sharded text;
BEGIN
    IF tt.shard_of IS NULL
       OR NOT EXISTS (SELECT FROM @extschema@.shard_consumer c WHERE c.table_id = tt.shard_of AND c.consumer = consumer) THEN
        RETURN;
    END IF;
    SELECT p.table_name INTO sharded FROM @extschema@.tracked_table p WHERE p.table_id = tt.shard_of;
    RAISE EXCEPTION 'consumer "%" of shard "%" is declared on its sharded table "%"', consumer, tt.table_name, sharded
        USING ERRCODE = 'wrong_object_type',
              DETAIL = 'A consumer declared on a sharded table holds every shard alike; on one shard it can only be reset (alter_consumer(..., reset => true)).',
              HINT = format('Call finalize.%s(%L, %L%s) on the sharded table.', fn, sharded, consumer,
                            CASE WHEN fn = 'drop_consumer' THEN '' ELSE ', ...' END);
END
$$;
