-- Pipelines and derived tables (docs/design/pipelines.md): the consumers
-- that write a table and report how far they got, tables derived from
-- tracked tables, and acknowledgements of lost data. The functions a role
-- calls are C entry points (finalize_as_owner, owner.c) that run the body
-- _<name>(caller, ...) as the extension's owner with the caller taken first.

-- Checks the name of a new consumer: the pipeline's name, 1 to 255
-- characters, not only spaces.
CREATE OR REPLACE FUNCTION finalize_internal.check_consumer_name(consumer text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(consumer, 'consumer');
    IF consumer !~ '\S' OR length(consumer) > 255 THEN
        RAISE EXCEPTION 'invalid value for argument consumer: "%"', consumer
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A consumer is named after the pipeline that writes the table (for example spark-orders): 1 to 255 characters, not only spaces.';
    END IF;
END
$$;

-- The reporter role a consumer is declared with, checked: it must exist
-- (a bare OID such as '-' or '4000000000' names no role).
CREATE OR REPLACE FUNCTION finalize_internal.check_reporter(reporter regrole)
RETURNS name
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    role_name name;
BEGIN
    SELECT r.rolname INTO role_name FROM pg_catalog.pg_roles r WHERE r.oid = reporter::oid;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'invalid value for argument reporter: role with OID % does not exist', reporter::oid
            USING ERRCODE = 'undefined_object',
                  DETAIL = 'The reporter is the role whose members may report for the consumer.',
                  HINT = 'Name an existing role, for example reporter => ''spark_orders''.';
    END IF;
    RETURN role_name;
END
$$;

-- Warns when a reporter role cannot call the report functions yet.
CREATE OR REPLACE FUNCTION finalize_internal.reporter_notice(reporter regrole, tt @extschema@.tracked_table, consumer text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF reporter IS NULL THEN
        RAISE NOTICE 'only members of finalize_admin may report for consumer "%" of table "%"', consumer, (tt).table_name
            USING DETAIL = 'The consumer has no reporter role, so no pipeline role may report for it.',
                  HINT = format('Let the pipeline''s role report with SELECT finalize.alter_consumer(%L, %L, reporter => ''<role>'');',
                                (tt).table_name, consumer);
    ELSIF NOT pg_catalog.pg_has_role(reporter::oid, 'finalize_pipeline'::name, 'MEMBER') THEN
        RAISE NOTICE 'role % cannot report for consumer "%" of table "%" yet', reporter, consumer, (tt).table_name
            USING DETAIL = 'Reporting takes EXECUTE on finalize.report_progress() or finalize.report_processed(), which role finalize_pipeline has.',
                  HINT = format('GRANT finalize_pipeline TO %s;', reporter);
    END IF;
END
$$;

-- Inserts a new consumer of a table (add_consumer's, for a pipeline that
-- reports and for an Iceberg table), under the table's lock; the error
-- names a consumer that already exists.
CREATE OR REPLACE FUNCTION finalize_internal.insert_consumer(caller name, tt @extschema@.tracked_table, consumer text,
                                             required boolean, reporter regrole, reporter_name name)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    BEGIN
        INSERT INTO @extschema@.consumer (table_id, consumer, required, reporter, reporter_name, created_by)
        VALUES (tt.table_id, consumer, required, reporter, reporter_name, caller);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'consumer "%" of table "%" already exists', consumer, tt.table_name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Change it with finalize.alter_consumer() (dropping and adding it again would let the verdict move past what it applied).';
    END;
END
$$;

-- The body of finalize.add_consumer: declares a pipeline that writes the
-- table. A required one holds the verdict from now on (what was final
-- stays final). Only members of reporter (and of finalize_admin) may
-- report for it; without one, only admins may: a pipeline must never be
-- able to release another pipeline's table. On a sharded table it is
-- declared on each shard, now and when one is added (_add_sharded_consumer).
CREATE OR REPLACE FUNCTION finalize_internal.add_consumer(
    caller name,
    table_name text,
    consumer text,
    required boolean DEFAULT true,
    reporter regrole DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    reporter_name name;
BEGIN
    PERFORM finalize_internal.check_consumer_name(consumer);
    PERFORM finalize_internal.require(required, 'required');
    IF reporter IS NOT NULL THEN
        reporter_name := finalize_internal.check_reporter(reporter);
    END IF;
    -- On a sharded table: on every shard, and on every shard added later.
    IF tt.kind = 'sharded' THEN
        PERFORM finalize_internal.add_sharded_consumer(caller, tt, consumer, required, reporter, reporter_name);
    ELSE
        PERFORM finalize_internal.insert_consumer(caller, tt, consumer, required, reporter, reporter_name);
    END IF;
    PERFORM finalize_internal.reporter_notice(reporter, tt, consumer);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.add_consumer(
    table_name text,
    consumer text,
    required boolean DEFAULT true,
    reporter regrole DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.add_consumer(text, text, boolean, regrole) IS
    'Declare a pipeline that writes a table; a required one holds the verdict until it reports that it applied a period; only members of reporter (and admins) may report for it';

-- Forgets what a consumer of a table reported (alter_consumer's reset):
-- its report and what the worker resolved it to, and a report beyond max
-- LSN that was pending (condition report_ahead, and its incident). The
-- caller holds the table's lock. What is final stays final.
CREATE OR REPLACE FUNCTION finalize_internal.forget_report(tt @extschema@.tracked_table, consumer text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    UPDATE @extschema@.consumer c
       SET reported_lsn = NULL, reported_at = NULL, processed_until = NULL, resolved_for_lsn = NULL,
           mapped_lsn = NULL, commit_time = NULL, resolved_at = NULL, resolve_error = NULL,
           condition = CASE WHEN c.condition = 'report_ahead' THEN NULL ELSE c.condition END,
           condition_since = CASE WHEN c.condition = 'report_ahead' THEN NULL ELSE c.condition_since END
     WHERE c.table_id = tt.table_id AND c.consumer = consumer;
    PERFORM finalize_internal.resolve_alerts('report_ahead', tt.table_id, tt.server_name, consumer);
END
$$;

-- The body of finalize.alter_consumer: changes a consumer in place, so the
-- verdict never moves past what it applied meanwhile (dropping and adding
-- it again would let it). NULL keeps a setting. reset forgets what it
-- reported (a wrong LSN, a report from another database): the verdict
-- stays where it is (verdicts never move back) and waits for its next
-- report. Making it optional lets the verdict move at once. On a sharded
-- table it changes the consumer of every shard; on a shard, a consumer
-- declared on its sharded table may only be reset.
CREATE OR REPLACE FUNCTION finalize_internal.alter_consumer(
    caller name,
    table_name text,
    consumer text,
    required boolean DEFAULT NULL,
    reporter regrole DEFAULT NULL,
    reset boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    reporter_name name;
BEGIN
    PERFORM finalize_internal.require(consumer, 'consumer');
    PERFORM finalize_internal.require(reset, 'reset');
    IF reporter IS NOT NULL THEN
        reporter_name := finalize_internal.check_reporter(reporter);
    END IF;
    IF tt.kind = 'sharded' THEN
        PERFORM finalize_internal.alter_sharded_consumer(tt, consumer, required, reporter, reporter_name, reset);
        RETURN;
    ELSIF required IS NOT NULL OR reporter IS NOT NULL THEN
        -- a shard's consumer declared on its sharded table changes there
        PERFORM finalize_internal.refuse_shard_consumer(tt, consumer, 'alter_consumer');
    END IF;
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    UPDATE @extschema@.consumer c
       SET required = coalesce(alter_consumer.required, c.required),
           reporter = coalesce(alter_consumer.reporter, c.reporter),
           reporter_name = coalesce(reporter_name, c.reporter_name)
     WHERE c.table_id = tt.table_id AND c.consumer = consumer;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" of table "%" does not exist', consumer, tt.table_name
            USING ERRCODE = 'undefined_object',
                  HINT = format('Declare it with finalize.add_consumer(%L, %L).', tt.table_name, consumer);
    END IF;
    IF reset THEN
        PERFORM finalize_internal.forget_report(tt, consumer);
        -- An Iceberg consumer reads its table again as if for the first time.
        UPDATE @extschema@.lake_consumer l
           SET seen_snapshot_id = NULL, seen_head_id = NULL, seen_head_sequence = NULL, seen_lsn = NULL,
               seen_table_uuid = NULL, seen_at = NULL
         WHERE l.table_id = tt.table_id AND l.consumer = consumer;
        RAISE NOTICE 'consumer "%" of table "%" starts again from nothing', consumer, tt.table_name
            USING DETAIL = 'What is final stays final; the verdict waits for the consumer''s next report.';
    END IF;
    IF reporter IS NOT NULL THEN
        PERFORM finalize_internal.reporter_notice(reporter, tt, consumer);
    END IF;
    IF required IS NOT NULL AND NOT required THEN
        PERFORM finalize_internal.advance(tt.table_id);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.alter_consumer(
    table_name text,
    consumer text,
    required boolean DEFAULT NULL,
    reporter regrole DEFAULT NULL,
    reset boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.alter_consumer(text, text, boolean, regrole, boolean) IS
    'Change a pipeline of a table in place (required, reporter; reset forgets what it reported); NULL keeps a setting';

-- The body of finalize.drop_consumer: forgets a consumer; the verdict may
-- then move at once, and a NOTICE says how far. Returns whether it existed.
-- On a sharded table it forgets the consumer of every shard; a shard's
-- consumer declared on its sharded table is dropped there.
CREATE OR REPLACE FUNCTION finalize_internal.drop_consumer(caller name, table_name text, consumer text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    before timestamptz;
    after timestamptz;
BEGIN
    PERFORM finalize_internal.require(consumer, 'consumer');
    IF tt.kind = 'sharded' THEN
        RETURN finalize_internal.drop_sharded_consumer(tt, consumer);
    END IF;
    PERFORM finalize_internal.refuse_shard_consumer(tt, consumer, 'drop_consumer');
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    SELECT w.finalized_until INTO before FROM @extschema@.watermark w WHERE w.table_id = tt.table_id;
    DELETE FROM @extschema@.consumer c WHERE c.table_id = tt.table_id AND c.consumer = consumer;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- A consumer that is gone stalls nothing any more, nor is it held (the
    -- worker forgets its hold, _check_consumers).
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.kind IN ('consumer_stalled', 'consumer_locked', 'catalog_unreachable', 'catalog_auth_failed',
                      'table_not_found', 'property_malformed', 'metadata_malformed', 'report_ahead')
       AND a.table_id = tt.table_id AND a.subject = consumer AND a.state <> 'resolved';
    after := finalize_internal.advance(tt.table_id);
    IF after IS DISTINCT FROM before THEN
        RAISE NOTICE 'table "%" is now final until % (it was until %): consumer "%" no longer holds it',
                     tt.table_name, after, coalesce(before::text, 'nothing'), consumer
            USING DETAIL = 'The periods in between are final whether or not the consumer applied them.';
    END IF;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.drop_consumer(table_name text, consumer text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.drop_consumer(text, text) IS
    'Forget a pipeline of a table (the verdict no longer waits for it); returns whether it existed';

-- The consumer of a table a caller reports for (locked when lock is
-- true): it must exist, and the caller must be a member of finalize_admin
-- or of its reporter role, which must still be the role it was declared
-- with (a dropped role's OID may one day name another role). The errors
-- name both.
CREATE OR REPLACE FUNCTION finalize_internal.reporting_consumer(caller name, tt @extschema@.tracked_table, consumer text,
                                                lock boolean)
RETURNS @extschema@.consumer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    c @extschema@.consumer;
    current_name name;
BEGIN
    PERFORM finalize_internal.require(consumer, 'consumer');
    IF lock THEN
        SELECT x.* INTO c FROM @extschema@.consumer x
         WHERE x.table_id = tt.table_id AND x.consumer = consumer FOR UPDATE;
    ELSE
        SELECT x.* INTO c FROM @extschema@.consumer x
         WHERE x.table_id = tt.table_id AND x.consumer = consumer;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" of table "%" does not exist', pg_catalog.left(consumer, 255), tt.table_name
            USING ERRCODE = 'undefined_object',
                  HINT = format('An admin declares it with finalize.add_consumer(%L, %L).', tt.table_name,
                                pg_catalog.left(consumer, 255));
    END IF;
    IF pg_catalog.pg_has_role(caller, 'finalize_admin'::name, 'MEMBER') THEN
        RETURN c;
    END IF;
    IF c.reporter IS NULL THEN
        RAISE EXCEPTION 'permission denied to report for consumer "%" of table "%"', consumer, tt.table_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('The consumer has no reporter role, so only members of finalize_admin may report for it; role %s is not one.', caller),
                  HINT = format('An admin lets the pipeline''s role report with SELECT finalize.alter_consumer(%L, %L, reporter => %L);',
                                tt.table_name, consumer, caller);
    END IF;
    SELECT r.rolname INTO current_name FROM pg_catalog.pg_roles r WHERE r.oid = c.reporter::oid;
    IF current_name IS DISTINCT FROM c.reporter_name THEN
        RAISE EXCEPTION 'permission denied to report for consumer "%" of table "%"', consumer, tt.table_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Its reporter role %s was dropped or renamed (its OID now names %s), so only members of finalize_admin may report for it.',
                                  c.reporter_name, coalesce('role ' || current_name, 'no role')),
                  HINT = format('An admin names the reporter again with SELECT finalize.alter_consumer(%L, %L, reporter => ''<role>'');',
                                tt.table_name, consumer);
    END IF;
    IF NOT pg_catalog.pg_has_role(caller, c.reporter::oid, 'MEMBER') THEN
        RAISE EXCEPTION 'permission denied to report for consumer "%" of table "%"', consumer, tt.table_name
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Only members of role %s, the consumer''s reporter, and of finalize_admin may report for it; role %s is neither.',
                                  c.reporter_name, caller),
                  HINT = format('If %s runs this pipeline, an admin can run GRANT %s TO %s;', caller, c.reporter_name, caller);
    END IF;
    RETURN c;
END
$$;

-- A reported LSN in the stored form (the C parser accepts finalize's form
-- and Debezium's); the error names the argument, the consumer and the table.
CREATE OR REPLACE FUNCTION finalize_internal.reported_lsn(lsn text, tt @extschema@.tracked_table, consumer text)
RETURNS @extschema@.lsn
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    message text;
    detail text;
BEGIN
    PERFORM finalize_internal.require(lsn, 'lsn');
    RETURN finalize_internal.lsn_normalize(lsn);
EXCEPTION WHEN invalid_parameter_value THEN
    GET STACKED DIAGNOSTICS message = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL;
    RAISE EXCEPTION 'invalid value for argument lsn of consumer "%" of table "%": %', consumer, tt.table_name, message
        USING ERRCODE = 'invalid_parameter_value', DETAIL = detail;
END
$$;

-- Refuses a reported LSN that SQL Server cannot have reached yet, so that a
-- placeholder (ffffffff:ffffffff:ffff) or a value that is no LSN of the
-- source never sticks as the consumer's report (later, honest reports
-- would all be lower, hence ignored). An LSN is [VLF sequence number : log
-- block : slot] (Microsoft, SQL Server Transaction Log Architecture); the
-- first moves by one per virtual log file the log enters. The rule: the
-- reported VLF sequence number may lie at most a million VLFs per second
-- beyond that of the max LSN the source's worker last read, counted from
-- that read, plus a minute. No SQL Server fills VLFs that fast (a million
-- of even 16 kB, the smallest a 64 kB log growth makes, is 16 GB of log a
-- second), so a refused LSN cannot have been captured when it was
-- reported. Before the worker has read a max LSN, nothing is refused; an
-- LSN beyond max LSN that the rule admits is accepted and stays pending
-- (report_ahead, _consumer_ahead).
CREATE OR REPLACE FUNCTION finalize_internal.refuse_unreachable_report(tt @extschema@.tracked_table, consumer text,
                                                       reported @extschema@.lsn)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    s record;
    vlf bigint := ('x' || substr(reported::text, 3, 8))::bit(32)::bigint;
    max_vlf bigint;
    age numeric;
BEGIN
    SELECT st.max_lsn, st.last_success - coalesce(st.cycle_time, interval '0') AS read_at INTO s
      FROM @extschema@.source_status st
     WHERE st.server_name = tt.server_name AND st.max_lsn IS NOT NULL AND st.last_success IS NOT NULL;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    max_vlf := ('x' || substr(s.max_lsn::text, 3, 8))::bit(32)::bigint;
    age := greatest(extract(epoch FROM now() - s.read_at), 0);
    IF vlf - max_vlf <= 1000000 * (age + 60) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'LSN % reported for consumer "%" of table "%" lies beyond anything SQL Server can have written',
                    reported, consumer, tt.table_name
        USING ERRCODE = 'invalid_parameter_value',
              DETAIL = format('The max LSN of server %s was %s when its worker read it %s s ago. An LSN''s first 8 hex digits are the sequence number of its virtual log file: this one''s, %s, lies %s files beyond, more than SQL Server can have filled since (a million a second at most).',
                              tt.server_name, s.max_lsn, round(age), upper(substr(reported::text, 3, 8)),
                              vlf - max_vlf),
              HINT = 'Report the commit LSN of the last change the pipeline has durably applied (Debezium: source.commit_lsn of the last record written); nothing changed.';
END
$$;

-- Refuses a report for a consumer whose progress is an Iceberg or Delta
-- table's: only what its snapshots or commits prove may move it.
CREATE OR REPLACE FUNCTION finalize_internal.refuse_lake_report(tt @extschema@.tracked_table, consumer text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    l record;
BEGIN
    SELECT x.iceberg_table, x.delta_table, x.server_name INTO l FROM @extschema@.lake_consumer x
     WHERE x.table_id = tt.table_id AND x.consumer = consumer;
    IF FOUND AND l.delta_table IS NOT NULL THEN
        RAISE EXCEPTION 'consumer "%" of table "%" reads its progress from Delta table %', consumer, tt.table_name,
                        l.delta_table
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = format('The lake worker records the LSN its commits carry (store %s); a report could release periods the table does not hold.',
                                  l.server_name),
                  HINT = 'Commit the LSN with the data (commit metadata), or declare another consumer for this pipeline.';
    ELSIF FOUND THEN
        RAISE EXCEPTION 'consumer "%" of table "%" reads its progress from Iceberg table %', consumer, tt.table_name,
                        l.iceberg_table
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = format('The lake worker records the LSN property of its snapshots (catalog %s); a report could release periods the table does not hold.',
                                  l.server_name),
                  HINT = 'Commit the LSN with the data (snapshot property), or declare another consumer for this pipeline.';
    END IF;
END
$$;

-- The body of finalize.report_progress: a consumer of a tracked table has
-- durably applied every change with commit LSN at or below lsn. A lower or
-- equal LSN (a replay) changes nothing, takes no lock and says so; one SQL
-- Server cannot have reached is refused (_refuse_unreachable_report); the
-- worker resolves a new one to a commit time on its next cycle, which may
-- advance the verdict (one beyond max LSN stays pending, report_ahead).
-- Returns whether the report moved.
CREATE OR REPLACE FUNCTION finalize_internal.report_progress(caller name, table_name text, consumer text, lsn text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    reported @extschema@.lsn;
    c @extschema@.consumer;
BEGIN
    IF tt.kind = 'sharded' THEN
        RAISE EXCEPTION 'table "%" is a sharded table, so its consumers report per shard', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'Each shard is read from its own SQL Server database, whose LSNs are its own: a report names the shard whose changes the pipeline applied (a Debezium record names it in source.db).',
                  HINT = format('Call finalize.report_progress(%L, %L, <lsn>) for each shard.', tt.table_name || '/<shard>',
                                pg_catalog.left(consumer, 255));
    ELSIF tt.kind <> 'source' THEN
        RAISE EXCEPTION 'table "%" is a derived table, so its consumers report with finalize.report_processed()', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A derived table has no SQL Server LSNs: its consumers report the input watermark their job has fully processed.',
                  HINT = format('Call finalize.report_processed(%L, %L, <processed_until>).', tt.table_name,
                                pg_catalog.left(consumer, 255));
    END IF;
    reported := finalize_internal.reported_lsn(lsn, tt, consumer);
    PERFORM finalize_internal.refuse_lake_report(tt, consumer);
    -- A replay is answered without a lock; a move is checked again under one.
    FOR i IN 1..2 LOOP
        c := finalize_internal.reporting_consumer(caller, tt, consumer, i = 2);
        IF reported <= c.reported_lsn THEN
            RAISE NOTICE 'consumer "%" of table "%" already reported LSN %; LSN % is ignored', consumer, tt.table_name,
                         c.reported_lsn, reported
                USING DETAIL = 'Reports only move forward (a replay sends older positions again), so nothing changed.';
            RETURN false;
        END IF;
        IF i = 1 THEN
            PERFORM finalize_internal.refuse_unreachable_report(tt, consumer, reported);
        END IF;
    END LOOP;
    RETURN finalize_internal.advance_report(tt.table_id, consumer, reported);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.report_progress(table_name text, consumer text, lsn text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.report_progress(text, text, text) IS
    'A pipeline has durably applied every change with commit LSN at or below lsn (0x and 20 hex digits, or Debezium''s commit_lsn); returns whether it moved';

-- Says that a report_processed changed nothing (a rerun reports an older
-- watermark again).
CREATE OR REPLACE FUNCTION finalize_internal.processed_replay(tt @extschema@.tracked_table, c @extschema@.consumer,
                                              processed_until timestamptz)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE NOTICE 'consumer "%" of table "%" already reported it processed its inputs until %; % is ignored',
                 (c).consumer, (tt).table_name, (c).processed_until, processed_until
        USING DETAIL = 'Reports only move forward (a rerun may report an older watermark again), so nothing changed.';
END
$$;

-- The body of finalize.report_processed: a consumer of a derived table has
-- fully processed its inputs up to processed_until. A time beyond what the
-- inputs are final until counts only up to that (the rest was processed
-- from input that may still change); an earlier or equal time changes
-- nothing, takes no lock and says so; a later one advances the verdict in
-- this transaction as far as the inputs allow. Returns whether it moved.
CREATE OR REPLACE FUNCTION finalize_internal.report_processed(caller name, table_name text, consumer text,
                                              processed_until timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    c @extschema@.consumer;
    inputs_until timestamptz;
    upto timestamptz := processed_until;
BEGIN
    IF tt.kind = 'sharded' THEN
        RAISE EXCEPTION 'table "%" is a sharded table, so its consumers report per shard with finalize.report_progress()', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A consumer of a sharded table is a consumer of each of its shards, which reports the commit LSN it has applied in that shard''s database.',
                  HINT = format('Call finalize.report_progress(%L, %L, <lsn>) for each shard.', tt.table_name || '/<shard>',
                                pg_catalog.left(consumer, 255));
    ELSIF tt.kind <> 'derived' THEN
        RAISE EXCEPTION 'table "%" is fed by SQL Server, so its consumers report with finalize.report_progress()', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A consumer of a tracked table reports the commit LSN it has applied; report_processed takes the input watermark of a derived table''s job, and a time is never read as an LSN.',
                  HINT = format('Call finalize.report_progress(%L, %L, <lsn>).', tt.table_name,
                                pg_catalog.left(consumer, 255));
    END IF;
    PERFORM finalize_internal.require(processed_until, 'processed_until');
    IF NOT isfinite(processed_until) THEN
        RAISE EXCEPTION 'invalid value for argument processed_until: "%"', processed_until
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A consumer reports the input watermark its job has fully processed: a finite time.';
    END IF;
    c := finalize_internal.reporting_consumer(caller, tt, consumer, false);
    IF processed_until <= c.processed_until THEN
        PERFORM finalize_internal.processed_replay(tt, c, processed_until);
        RETURN false;
    END IF;
    inputs_until := finalize_internal.inputs_final_until(tt.table_id);
    IF inputs_until IS NULL OR upto > inputs_until THEN
        upto := inputs_until;
        RAISE NOTICE 'the inputs of table "%" are final only until %; consumer "%" counts as having processed them until then',
                     tt.table_name, coalesce(inputs_until::text, '(nothing yet)'), consumer
            USING DETAIL = format('It reported %s, but input beyond what is final may still change, so what the job made of it is not final either.',
                                  processed_until),
                  HINT = 'Report the least finalized_until of the inputs the job read before it ran (finalize.finalized_until(ARRAY[...])).';
        IF upto IS NULL OR upto <= c.processed_until THEN
            RETURN false;
        END IF;
    END IF;
    -- Checked again under the lock: another report may have moved meanwhile.
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    c := finalize_internal.reporting_consumer(caller, tt, consumer, true);
    IF upto <= c.processed_until THEN
        PERFORM finalize_internal.processed_replay(tt, c, processed_until);
        RETURN false;
    END IF;
    UPDATE @extschema@.consumer x SET processed_until = upto, reported_at = now()
     WHERE x.table_id = tt.table_id AND x.consumer = consumer;
    PERFORM finalize_internal.advance(tt.table_id);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.report_processed(table_name text, consumer text, processed_until timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.report_processed(text, text, timestamptz) IS
    'A derived table''s job has fully processed its inputs up to processed_until; returns whether it moved';

-- The ids of a derived table's inputs, in the order given, each an active
-- tracked or derived table locked against untracking (FOR SHARE, which
-- untrack_table's lock waits for); the errors name the input.
CREATE OR REPLACE FUNCTION finalize_internal.derived_inputs(table_name text, inputs text[])
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    ids bigint[] := '{}';
    input text;
    id bigint;
BEGIN
    PERFORM finalize_internal.require(inputs, 'inputs');
    IF cardinality(inputs) = 0 OR array_position(inputs, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'invalid value for argument inputs: %', inputs
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A derived table needs at least one input, each the name of a tracked or derived table.';
    END IF;
    FOREACH input IN ARRAY inputs LOOP
        IF input = table_name THEN
            RAISE EXCEPTION 'derived table "%" cannot be its own input', table_name
                USING ERRCODE = 'invalid_object_definition',
                      DETAIL = 'A derived table is computed from other tables: its verdict follows theirs.',
                      HINT = 'Remove it from inputs.';
        END IF;
        SELECT t.table_id INTO id FROM @extschema@.tracked_table t
         WHERE t.table_name = input AND t.untracked_at IS NULL FOR SHARE;
        IF NOT FOUND THEN
            PERFORM finalize_internal.not_tracked(input);
        ELSIF id = ANY (ids) THEN
            RAISE EXCEPTION 'input "%" is listed twice', input
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('Derived table "%s" lists each of its inputs once.', table_name),
                      HINT = 'Remove the repetition from inputs.';
        END IF;
        ids := ids || id;
    END LOOP;
    RETURN ids;
END
$$;

-- Refuses inputs that use a table of this name (transitively): the
-- derived table would depend on itself. Inputs are fixed when a derived
-- table is created and must exist, and its name must be new, so no cycle
-- can be built today; this check keeps the DAG the recursions rely on
-- should inputs ever become changeable.
CREATE OR REPLACE FUNCTION finalize_internal.check_no_cycle(table_name text, input_ids bigint[])
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    via text;
BEGIN
    WITH RECURSIVE up(id, via) AS (
        SELECT t.table_id, t.table_name FROM @extschema@.tracked_table t WHERE t.table_id = ANY (input_ids)
        UNION
        SELECT d.input_id, up.via FROM @extschema@.derived_input d JOIN up ON d.table_id = up.id)
    SELECT min(up.via) INTO via FROM up JOIN @extschema@.tracked_table t ON t.table_id = up.id
     WHERE t.table_name = table_name AND t.untracked_at IS NULL;
    IF via IS NOT NULL THEN
        RAISE EXCEPTION 'derived table "%" would depend on itself through its input "%"', table_name, via
            USING ERRCODE = 'invalid_object_definition',
                  DETAIL = format('Table "%s" is derived (directly or through other derived tables) from "%s": the inputs of derived tables must not form a cycle.',
                                  via, table_name),
                  HINT = 'Choose other inputs, or another name for the new table.';
    END IF;
END
$$;

-- The error for a derived table whose name is tracked already.
CREATE OR REPLACE FUNCTION finalize_internal.already_tracked(table_name text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'table "%" is already tracked', table_name
        USING ERRCODE = 'duplicate_object',
              HINT = 'Untrack it first with finalize.untrack_table(), or choose another name.';
END
$$;

-- The body of finalize.track_derived: a lake table computed from tracked
-- or derived tables. Its granularity defaults to the coarsest input's, its
-- period_zone to the inputs' zone (which must then be one); its verdict
-- (its inputs' least verdict rounded down to a start of its own periods,
-- capped by its required consumers) is computed at once and follows every
-- input advance in the same transaction. Returns its id.
CREATE OR REPLACE FUNCTION finalize_internal.track_derived(
    caller name,
    table_name text,
    inputs text[],
    granularity interval DEFAULT NULL,
    period_zone text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    ids bigint[];
    g interval;
    z text;
    zones text[];
    new_id bigint;
BEGIN
    PERFORM finalize_internal.check_table_name(table_name, 'sales.daily_revenue');
    IF EXISTS (SELECT FROM @extschema@.tracked_table t WHERE t.table_name = track_derived.table_name
                                                        AND t.untracked_at IS NULL) THEN
        PERFORM finalize_internal.already_tracked(table_name);
    END IF;
    ids := finalize_internal.derived_inputs(table_name, inputs);
    PERFORM finalize_internal.check_no_cycle(table_name, ids);
    g := coalesce(granularity, (SELECT max(t.granularity) FROM @extschema@.tracked_table t WHERE t.table_id = ANY (ids)));
    PERFORM finalize_internal.check_granularity(g, 'granularity');
    IF period_zone IS NOT NULL THEN
        z := finalize_internal.check_zone(period_zone, 'period_zone');
    ELSE
        SELECT array_agg(DISTINCT t.period_zone ORDER BY t.period_zone) INTO zones
          FROM @extschema@.tracked_table t WHERE t.table_id = ANY (ids);
        IF cardinality(zones) > 1 THEN
            RAISE EXCEPTION 'the inputs of derived table "%" cut their periods in different zones (%)', table_name,
                            array_to_string(zones, ', ')
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'A derived table''s periods are cut in one zone, and its inputs'' verdicts are rounded down to them.',
                      HINT = format('Pass period_zone => %L (or another zone) to finalize.track_derived.', zones[1]);
        END IF;
        z := zones[1];
    END IF;
    BEGIN
        INSERT INTO @extschema@.tracked_table (table_name, kind, granularity, period_zone, created_by)
        VALUES (table_name, 'derived', g, z, caller)
        RETURNING tracked_table.table_id INTO new_id;
    EXCEPTION WHEN unique_violation THEN
        PERFORM finalize_internal.already_tracked(table_name);
    END;
    INSERT INTO @extschema@.watermark (table_id) VALUES (new_id);
    PERFORM finalize_internal.seal_catalog();
    INSERT INTO @extschema@.derived_input (table_id, input_id) SELECT new_id, i FROM unnest(ids) AS i;
    PERFORM finalize_internal.refresh_loss_blocked(new_id);
    PERFORM finalize_internal.advance(new_id);
    RETURN new_id;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.track_derived(table_name text, inputs text[], granularity interval DEFAULT NULL,
                                          period_zone text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.track_derived(text, text[], interval, text) IS
    'Track a lake table derived from tracked or derived tables: final for a period once its inputs and its required consumers are';

-- Checks a bound of an acknowledged range: a period boundary of the table
-- (or infinite), so that it names whole periods.
CREATE OR REPLACE FUNCTION finalize_internal.check_period_bound(tt @extschema@.tracked_table, bound timestamptz, argname text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(bound, argname);
    IF isfinite(bound) AND @extschema@.period_start(bound, tt.granularity, tt.period_zone) <> bound THEN
        RAISE EXCEPTION 'invalid value for argument %: % is not a period boundary of table "%"', argname, bound, tt.table_name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('Its periods are %s long in zone %s; an acknowledgement covers whole periods.',
                                  tt.granularity, tt.period_zone),
                  HINT = format('Use %s or %s.', @extschema@.period_start(bound, tt.granularity, tt.period_zone),
                                @extschema@.period_end(bound, tt.granularity, tt.period_zone));
    END IF;
END
$$;

-- The body of finalize.acknowledge_loss: an admin says the periods of
-- [period_from, period_to) were repaired after the losses recorded so far:
-- on the table that lost the data (for example, the lake table was
-- re-snapshotted), or on a derived table with a required consumer whose job
-- has rebuilt them from the repaired input (the input's acknowledgement
-- alone does not release such a table: see _loss_ackers). A loss no longer
-- holds those periods, here and in the derived tables that use the table,
-- once every table it needs an acknowledgement on has one. A loss recorded
-- later needs an acknowledgement of its own. Recorded with who, when and
-- the note, also as an event fact. Returns how many losses the range
-- (partly) covers.
CREATE OR REPLACE FUNCTION finalize_internal.acknowledge_loss(
    caller name,
    table_name text,
    period_from timestamptz,
    period_to timestamptz,
    note text)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    covered integer;
BEGIN
    IF tt.kind = 'sharded' THEN
        RAISE EXCEPTION 'table "%" is a sharded table: a loss is acknowledged on the shard that lost the data', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A sharded table holds the periods its shards lost; each shard''s loss is released by an acknowledgement on that shard, once the lake''s copy of its data was repaired.',
                  HINT = 'finalize.explain_verdict() on the sharded table names the shard and the call to make.';
    END IF;
    IF tt.kind = 'derived' AND NOT EXISTS (SELECT FROM finalize_internal.loss_ackers(tt.table_id) AS a
                                            WHERE a.acker_id = tt.table_id) THEN
        RAISE EXCEPTION 'table "%" is a derived table with no loss to acknowledge', tt.table_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A derived table holds the periods its inputs lost. It needs an acknowledgement of its own only when it has a required consumer, whose job must rebuild them; otherwise it is released when the loss is acknowledged on the input that lost the data.',
                  HINT = 'finalize.explain_verdict() on the derived table names the table to acknowledge the loss on.';
    END IF;
    PERFORM finalize_internal.check_period_bound(tt, period_from, 'period_from');
    PERFORM finalize_internal.check_period_bound(tt, period_to, 'period_to');
    IF period_to <= period_from THEN
        RAISE EXCEPTION 'invalid range of periods from % to %', period_from, period_to
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'period_to must be after period_from.';
    END IF;
    PERFORM finalize_internal.require(note, 'note');
    IF note !~ '\S' THEN
        RAISE EXCEPTION 'invalid value for argument note: it must say how the loss was repaired'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The note is kept with the acknowledgement, for example ''orders re-snapshotted from SQL Server on 2026-12-01, ticket DATA-123''.';
    END IF;
    PERFORM finalize_internal.lock_tracked(tt.table_id);
    -- Its own losses, or for a derived table the ones it must acknowledge.
    SELECT count(*) INTO covered FROM @extschema@.loss l
     WHERE l.loss_id IN (SELECT a.loss_id FROM finalize_internal.loss_ackers(tt.table_id) AS a
                          WHERE a.acker_id = tt.table_id)
       AND l.lost_from < period_to AND l.lost_to >= period_from;
    -- clock_timestamp(): a loss recorded after this (under the same lock)
    -- is never covered by it, even one whose transaction began earlier.
    INSERT INTO @extschema@.loss_ack (table_id, period_from, period_to, note, acknowledged_by, acknowledged_at)
    VALUES (tt.table_id, period_from, period_to, note, caller, clock_timestamp());
    INSERT INTO @extschema@.fact (table_id, kind, event, detail)
    VALUES (tt.table_id, 'event', 'loss_acknowledged',
            jsonb_build_object('by', caller, 'note', note, 'losses', covered,
                               'period_from', CASE WHEN isfinite(period_from) THEN finalize_internal.utc_iso(period_from) ELSE period_from::text END,
                               'period_to', CASE WHEN isfinite(period_to) THEN finalize_internal.utc_iso(period_to) ELSE period_to::text END));
    PERFORM finalize_internal.refresh_loss_blocked(tt.table_id);
    -- An event-time verdict was held back by the loss itself (_advance): it
    -- moves now, and the derived tables that use it with it. Any other
    -- verdict stays, but finalized_until() may have moved past the periods
    -- acknowledged: that is announced (the derived tables that use this
    -- one are, within a round of the scheduler).
    IF tt.event_time_column IS NOT NULL THEN
        PERFORM finalize_internal.advance(tt.table_id);
    ELSE
        PERFORM finalize_internal.announce(ARRAY[tt.table_id]);
    END IF;
    -- The data_loss incident of the table that lost the data is resolved
    -- once that table has acknowledged all its losses; a derived table
    -- that inherited one acknowledges it on its own (its verdict waits).
    IF tt.kind = 'source' AND NOT finalize_internal.has_open_loss(tt.table_id) THEN
        PERFORM finalize_internal.resolve_alerts('data_loss', tt.table_id, tt.server_name);
    END IF;
    IF covered = 0 THEN
        RAISE NOTICE 'no loss % table "%" recorded so far intersects the periods from % to %',
                     CASE WHEN tt.kind = 'derived' THEN 'inherited by' ELSE 'of' END, tt.table_name,
                     period_from, period_to
            USING DETAIL = 'The acknowledgement is kept, but it covers no loss recorded after it.';
    END IF;
    RETURN covered;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.acknowledge_loss(table_name text, period_from timestamptz, period_to timestamptz,
                                             note text)
RETURNS integer
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.acknowledge_loss(text, timestamptz, timestamptz, text) IS
    'Say that the periods of [period_from, period_to) were repaired after the losses recorded so far (re-snapshotted, or rebuilt by a derived table''s job); returns how many losses it covers';
