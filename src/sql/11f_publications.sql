-- Publications (docs/publishing.md): what a table publishes, the outbox
-- its verdict's rise writes, and the queue the "finalize alerts" worker
-- drains beside the alert webhooks (src/push/).

-- The kind of target a foreign server is, by its wrapper (NULL: none).
CREATE OR REPLACE FUNCTION finalize_internal.publication_kind(wrapper name)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN CASE wrapper WHEN 'finalize_airflow' THEN 'airflow' WHEN 'finalize_dagster' THEN 'dagster'
                    WHEN 'finalize_iceberg' THEN 'iceberg_property' WHEN 'finalize_s3' THEN 'success_marker'
                    WHEN 'finalize_azure' THEN 'success_marker' WHEN 'finalize_webhook' THEN 'webhook' END;

-- The server a caller names as a publication's target: it exists, is of a
-- wrapper that can be a target, and the caller may use it and the user
-- mapping the delivery worker reads (its owner's), as for a lake consumer.
-- NULL names no server: a success marker on file://.
CREATE OR REPLACE FUNCTION finalize_internal.publication_server(caller name, target text, OUT kind text,
                                                                OUT server_name text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    srv pg_foreign_server;
    wrapper name;
    refused text;
BEGIN
    IF target IS NULL THEN
        -- The delivery worker writes the markers on the database server's
        -- file system: only for roles that may write files there.
        IF NOT pg_catalog.pg_has_role(caller, 'pg_write_server_files', 'USAGE') THEN
            RAISE EXCEPTION 'permission denied to publish _SUCCESS markers on the database server''s file system'
                USING ERRCODE = 'insufficient_privilege',
                      DETAIL = format('A publication without a server writes file:// markers as the server''s operating-system user; role %s is not a member of pg_write_server_files.', caller),
                      HINT = 'Publish through a finalize_s3 or finalize_azure server, or have a superuser grant pg_write_server_files.';
        END IF;
        kind := 'success_marker';
        RETURN;
    END IF;
    SELECT s.* INTO srv FROM pg_foreign_server s WHERE s.srvname = target;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'server "%" does not exist', target
            USING ERRCODE = 'undefined_object',
                  HINT = 'Create the target first: a server of finalize_airflow, finalize_azure, finalize_dagster, finalize_iceberg, finalize_s3 or finalize_webhook, and a user mapping for its credentials (docs/publishing.md).';
    END IF;
    SELECT w.fdwname INTO wrapper FROM pg_foreign_data_wrapper w WHERE w.oid = srv.srvfdw;
    kind := finalize_internal.publication_kind(wrapper);
    IF kind IS NULL THEN
        RAISE EXCEPTION 'server "%" cannot be a publication''s target', target
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = format('It uses the foreign-data wrapper "%s".', wrapper),
                  HINT = 'A target is a server of finalize_airflow, finalize_azure, finalize_dagster, finalize_iceberg, finalize_s3 or finalize_webhook.';
    END IF;
    refused := finalize_internal.server_use_refused((SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = caller),
                                                    srv.oid);
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'permission denied for server %', target
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = CASE refused WHEN 'usage'
                               THEN format('Role %s has no USAGE on the server, and the delivery worker sends with its owner''s credentials.', caller)
                               ELSE format('The server''s owner has a user mapping that role %s may not use.', caller) END,
                  HINT = format('The server''s owner can run GRANT USAGE ON FOREIGN SERVER %I TO %I.', target, caller);
    END IF;
    server_name := srv.srvname;
END
$$;

-- A period's partition key (or a marker's location) from a template: the
-- placeholders of finalize.render_location, in the local time of the
-- table's zone, and {start}, the local start as YYYY-MM-DDTHH:MI:SS.
CREATE OR REPLACE FUNCTION finalize_internal.render_partition_key(template text, period_start timestamptz, zone text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN replace(@extschema@.render_location(template, period_start, zone), '{start}',
               to_char(timezone(zone, period_start), 'YYYY-MM-DD"T"HH24:MI:SS'));

-- A template option of a publication (partition_key, location): a
-- non-empty string whose only placeholders are those it renders.
CREATE OR REPLACE FUNCTION finalize_internal.check_publication_template(options jsonb, option text, dflt text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v jsonb := options -> option;
BEGIN
    IF v IS NULL OR v = 'null'::jsonb THEN
        RETURN CASE WHEN dflt IS NULL THEN options - option ELSE jsonb_set(options, ARRAY[option], to_jsonb(dflt)) END;
    END IF;
    IF jsonb_typeof(v) <> 'string' OR v #>> '{}' = ''
       OR regexp_replace(v #>> '{}', '\{(year|month|day|hour|minute|date|start)\}', '', 'g') ~ '[{}]' THEN
        RAISE EXCEPTION 'invalid publication option "%": %', option, v::text
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A template is a non-empty string whose placeholders are {year}, {month}, {day}, {hour}, {minute}, {date} and {start}, in the local time of the table''s period_zone ({start} is YYYY-MM-DDTHH:MI:SS).',
                  HINT = 'For example "{start}" (the default partition key) or "{date}".';
    END IF;
    RETURN options;
END
$$;

-- A partition key template may give several consecutive periods one key
-- ({date} on an hourly table: a day; a local hour that DST repeats): the
-- key is then published once, when the last of them is final
-- (_enqueue_publication). It may not give one key to periods apart
-- ({hour} alone names the same hour of every day): the key would be called
-- final again for periods it had not held. Checked over 1000 periods from
-- a fixed instant (2024-01-01 UTC: the error is the same whenever it is
-- raised), 48 a year later, and the 48 around each DST change of 2024 in
-- the table's zone.
CREATE OR REPLACE FUNCTION finalize_internal.check_partition_key(template text, granularity interval, zone text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    clash record;
BEGIN
    WITH starts(at, span) AS (
        SELECT '2024-01-01 00:00+00'::timestamptz, 500
        UNION ALL
        -- a year later: a key without the year names both
        SELECT '2025-01-01 00:00+00'::timestamptz, 24
        UNION ALL
        SELECT h, 24 FROM pg_catalog.generate_series('2024-01-01 01:00+00'::timestamptz, '2024-12-31 23:00+00',
                                                     '1 hour') h
         WHERE granularity < interval '1 day'
           AND pg_catalog.timezone(zone, h) - pg_catalog.timezone(zone, h - interval '1 hour') <> interval '1 hour'),
    keyed AS (
        SELECT DISTINCT x.period_start, finalize_internal.render_partition_key(template, x.period_start, zone) AS key
          FROM starts s
         CROSS JOIN LATERAL finalize_internal.periods(s.at - granularity * s.span, s.at + granularity * s.span,
                                                       granularity, zone) x),
    runs AS (
        SELECT k.period_start, k.key,
               k.key IS DISTINCT FROM lag(k.key) OVER (ORDER BY k.period_start) AS starts_run
          FROM keyed k)
    SELECT r.key, min(r.period_start) AS first, max(r.period_start) AS last INTO clash
      FROM runs r
     WHERE r.starts_run
     GROUP BY r.key
    HAVING count(*) > 1
     ORDER BY min(r.period_start)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'partition_key "%" gives periods % and % the same key "%", and periods between them another',
                        template, finalize_internal.utc_iso(clash.first), finalize_internal.utc_iso(clash.last), clash.key
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A key names one partition of the lake table: published when its last period is final, it would be published again for other periods.',
                  HINT = 'Name the coarser parts too, such as "{date}T{hour}" rather than "{hour}".';
    END IF;
END
$$;

-- A publication's options, checked and completed for its kind: the
-- options common to every kind (partition_key), then the kind's own
-- (finalize_internal.publication_options_<kind>, src/sql/11g_publish_*.sql).
CREATE OR REPLACE FUNCTION finalize_internal.publication_options(kind text, options jsonb, table_id bigint)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    IF options IS NULL OR jsonb_typeof(options) <> 'object' THEN
        RAISE EXCEPTION 'the options of a publication must be a JSON object, not %', coalesce(options::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'For example ''{"partition_key": "{date}"}''; docs/publishing.md lists each target''s options.';
    END IF;
    IF pg_catalog.octet_length(options::text) > 16384 THEN
        RAISE EXCEPTION 'the options of a publication are longer than 16 kB'
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Options name a target and its templates; keep large values out of them.';
    END IF;
    options := finalize_internal.check_publication_template(options, 'partition_key', '{start}');
    IF kind = 'webhook' THEN
        RETURN finalize_internal.publication_options_webhook(options, table_id);
    ELSIF kind = 'airflow' THEN
        RETURN finalize_internal.publication_options_airflow(options, table_id);
    ELSIF kind = 'dagster' THEN
        RETURN finalize_internal.publication_options_dagster(options, table_id);
    ELSIF kind = 'iceberg_property' THEN
        RETURN finalize_internal.publication_options_iceberg_property(options, table_id);
    ELSE
        RETURN finalize_internal.publication_options_success_marker(options, table_id);
    END IF;
END
$$;

-- A webhook publication's options: contract "finalize" (any 2xx answer
-- delivers) or "paimon" (the answer must also be {"result": "SUCCESS"},
-- Paimon's http-report), and params, Paimon's opaque string.
CREATE OR REPLACE FUNCTION finalize_internal.publication_options_webhook(options jsonb, table_id bigint)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    unknown text := (SELECT string_agg(k, ', ' ORDER BY k) FROM jsonb_object_keys(options) k
                      WHERE k NOT IN ('partition_key', 'contract', 'params'));
BEGIN
    IF unknown IS NOT NULL THEN
        RAISE EXCEPTION 'unknown option(s) of a webhook publication: %', unknown
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A webhook publication takes partition_key, contract ("finalize" or "paimon") and params.';
    END IF;
    IF coalesce(options ->> 'contract', 'finalize') NOT IN ('finalize', 'paimon')
       OR jsonb_typeof(coalesce(options -> 'contract', '""')) <> 'string' THEN
        RAISE EXCEPTION 'invalid publication option "contract": %', options -> 'contract'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'With "finalize" any 2xx answer delivers an event; with "paimon" the answer must also be {"result": "SUCCESS"}, as Paimon''s http-report expects.',
                  HINT = 'Use "finalize" or "paimon".';
    END IF;
    IF options ? 'params' AND jsonb_typeof(options -> 'params') <> 'string' THEN
        RAISE EXCEPTION 'invalid publication option "params": %', options -> 'params'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'params is a string sent as Paimon''s "params" field.';
    END IF;
    RETURN jsonb_build_object('contract', coalesce(options ->> 'contract', 'finalize')) || options;
END
$$;

-- The start of the run of consecutive periods that share a partition key,
-- the last of which starts at last_start: last_start itself unless the
-- period before has the same key (one rendering: the common case), else
-- looked up at most 1000 periods back.
CREATE OR REPLACE FUNCTION finalize_internal.key_run_start(template text, key text, last_start timestamptz,
                                                           granularity interval, zone text)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    before timestamptz := @extschema@.period_start(last_start - interval '1 microsecond', granularity, zone);
BEGIN
    IF finalize_internal.render_partition_key(template, before, zone) IS DISTINCT FROM key THEN
        RETURN last_start;
    END IF;
    RETURN (SELECT coalesce(max(x.period_end), last_start)
              FROM finalize_internal.periods(last_start - granularity * 1000, last_start, granularity, zone) x
             WHERE x.period_start < last_start
               AND finalize_internal.render_partition_key(template, x.period_start, zone) IS DISTINCT FROM key);
END
$$;

-- Records the events of the periods of a publication that end after its
-- cursor and at or before the verdict: the given one (what was announced,
-- under the locks that announce it) and never past what finalized_until()
-- answers now (_sensor_until: a derived table's announced verdict may lag
-- a loss on an input). A period that holds the cursor (its table's periods
-- changed) is final and published whole. At most 1000 a call, in period
-- order, with their partition key and location rendered; the rest follow
-- (_enqueue_publications, each scheduler round). The caller holds the
-- publication's row. Returns how many it recorded.
CREATE OR REPLACE FUNCTION finalize_internal.enqueue_publication(publication_id bigint, verdict timestamptz)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    p @extschema@.publication;
    tt @extschema@.tracked_table;
    w @extschema@.watermark;
    last_end timestamptz;
    n integer;
BEGIN
    SELECT x.* INTO p FROM @extschema@.publication x WHERE x.publication_id = enqueue_publication.publication_id;
    IF NOT FOUND OR verdict IS NULL OR NOT isfinite(verdict) OR verdict <= p.enqueued_until THEN
        RETURN 0;
    END IF;
    SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = p.table_id AND t.untracked_at IS NULL;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    SELECT x.* INTO w FROM @extschema@.watermark x WHERE x.table_id = p.table_id;
    verdict := least(verdict, finalize_internal.sensor_until(tt.table_id, tt.kind, w.finalized_until, tt.granularity,
                                                             tt.period_zone, w.loss_blocked));
    IF verdict IS NULL OR verdict <= p.enqueued_until THEN
        RETURN 0;
    END IF;
    WITH due AS (
        SELECT x.period_start, x.period_end,
               finalize_internal.render_partition_key(p.options ->> 'partition_key', x.period_start, tt.period_zone) AS key
          FROM finalize_internal.periods(p.enqueued_until, least(verdict, p.enqueued_until + tt.granularity * 1000),
                                         tt.granularity, tt.period_zone) x
         WHERE x.period_end > p.enqueued_until AND x.period_end <= verdict
         ORDER BY x.period_start
         LIMIT 1000),
    -- A key that the next period shares is published by the last period
    -- that has it, for the whole run (a day of an hourly table, a local
    -- hour that DST repeats); kinds without a key publish every period.
    last_of_key AS (
        SELECT d.*, (p.target_kind IN ('airflow', 'dagster', 'webhook')
                     AND finalize_internal.render_partition_key(p.options ->> 'partition_key', d.period_end,
                                                                tt.period_zone) = d.key) AS shared
          FROM due d),
    ins AS (
        INSERT INTO @extschema@.publication_event (publication_id, kind, period_start, period_end, partition_key,
                                                   location, finalized_until)
        SELECT p.publication_id, 'final',
               CASE WHEN p.target_kind IN ('airflow', 'dagster', 'webhook')
                    THEN finalize_internal.key_run_start(p.options ->> 'partition_key', d.key, d.period_start,
                                                         tt.granularity, tt.period_zone)
                    ELSE d.period_start END,
               d.period_end, d.key,
               finalize_internal.render_partition_key(p.options ->> 'location', d.period_start, tt.period_zone),
               verdict
          FROM last_of_key d WHERE NOT d.shared ORDER BY d.period_start
        RETURNING period_end)
    SELECT max(d.period_end), (SELECT count(*) FROM ins) INTO last_end, n FROM due d;
    IF last_end IS NOT NULL THEN
        UPDATE @extschema@.publication x
           SET enqueued_until = last_end, head_due = CASE WHEN n > 0 THEN coalesce(x.head_due, now()) ELSE x.head_due END
         WHERE x.publication_id = p.publication_id;
        IF n > 0 THEN
            PERFORM finalize_internal.wake_alert_delivery();
        END IF;
    END IF;
    RETURN n;
END
$$;

-- The outbox's writer: after each statement that updates verdicts, for
-- every table with publications whose announced verdict rose
-- (watermark.announced_until, moved only by _announce and
-- _advance_sources, under the locks that make it what finalized_until()
-- answers), in the transaction that makes the periods final. A statement
-- trigger with transition tables: a worker's cycle moves thousands of
-- verdicts in one statement and pays one call, which returns at once while
-- no publication exists. Never for a fall (a loss): nothing is retracted,
-- and the cursor keeps a period from being published twice.
CREATE OR REPLACE FUNCTION finalize_internal.record_publication_events()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    IF NOT EXISTS (SELECT FROM @extschema@.publication) THEN
        RETURN NULL;
    END IF;
    FOR r IN
        SELECT p.publication_id, n.announced_until
          FROM risen_new n
          JOIN risen_old o ON o.table_id = n.table_id
          JOIN @extschema@.publication p ON p.table_id = n.table_id
         WHERE n.announced_until > coalesce(o.announced_until, '-infinity')
         ORDER BY p.publication_id
           FOR NO KEY UPDATE OF p
    LOOP
        PERFORM finalize_internal.enqueue_publication(r.publication_id, r.announced_until);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER record_publication_events AFTER UPDATE ON @extschema@.watermark
    REFERENCING OLD TABLE AS risen_old NEW TABLE AS risen_new
    FOR EACH STATEMENT EXECUTE FUNCTION finalize_internal.record_publication_events();

-- Late rows landed in an event period already final (event-time tables,
-- _store_event_facts): a late_data event to every publication whose
-- receivers act on events (airflow, dagster, webhook) and that published
-- the partition key of that period (its final event is recorded: a key
-- that later periods share is published only once its last period is
-- final, and the late_data event must not name it before), with that
-- key's span. One pending per key and publication, counting the rows of
-- each range that lands there until its first attempt (rows that land
-- after it are another event: the receiver may have taken the first). A
-- property or a marker never moves back. A shard's late rows are told to
-- its own publications only.
CREATE OR REPLACE FUNCTION finalize_internal.publish_late_data(table_id bigint, event_period timestamptz, late_rows bigint,
                                                               rows_so_far bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    r record;
    fin @extschema@.publication_event;
BEGIN
    FOR r IN
        SELECT p.publication_id, p.options, t.period_zone,
               finalize_internal.render_partition_key(p.options ->> 'partition_key', event_period, t.period_zone) AS key
          FROM @extschema@.publication p
          JOIN @extschema@.tracked_table t ON t.table_id = p.table_id
         WHERE p.table_id = publish_late_data.table_id AND p.target_kind IN ('airflow', 'dagster', 'webhook')
           AND event_period >= p.started_from
         ORDER BY p.publication_id
           FOR NO KEY UPDATE OF p
    LOOP
        SELECT e.* INTO fin FROM @extschema@.publication_event e
         WHERE e.publication_id = r.publication_id AND e.kind = 'final' AND e.partition_key = r.key
           AND e.period_start <= event_period AND e.period_end > event_period
         ORDER BY e.event_seq DESC LIMIT 1;
        CONTINUE WHEN NOT FOUND;
        UPDATE @extschema@.publication_event e
           SET detail = jsonb_build_object('rows', (e.detail ->> 'rows')::bigint + late_rows, 'rows_so_far', rows_so_far)
         WHERE e.publication_id = r.publication_id AND e.kind = 'late_data' AND e.state = 'pending'
           AND e.claimed_at IS NULL AND e.attempts = 0 AND e.partition_key = r.key;
        CONTINUE WHEN FOUND;
        INSERT INTO @extschema@.publication_event (publication_id, kind, period_start, period_end, partition_key,
                                                   finalized_until, detail)
        VALUES (r.publication_id, 'late_data', fin.period_start, fin.period_end, r.key, fin.finalized_until,
                jsonb_build_object('rows', late_rows, 'rows_so_far', rows_so_far,
                                   'event_period', finalize_internal.utc_iso(event_period)));
        UPDATE @extschema@.publication x SET head_due = coalesce(x.head_due, now())
         WHERE x.publication_id = r.publication_id;
        PERFORM finalize_internal.wake_alert_delivery();
    END LOOP;
END
$$;

-- The body of finalize.add_publication: the table publishes each period
-- that becomes final from now on (or from backfill_from) to target. The
-- table's verdict row is locked first, as every writer of the verdict
-- does, so that no rise is missed or recorded twice.
CREATE OR REPLACE FUNCTION finalize_internal.add_publication(caller name, table_name text, name text, target text,
                                                             options jsonb DEFAULT '{}',
                                                             backfill_from timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    srv record;
    verdict timestamptz;
    start_at timestamptz;
    id bigint;
BEGIN
    PERFORM finalize_internal.require(name, 'name');
    IF name !~ '^[A-Za-z0-9_.-]{1,63}$' THEN
        RAISE EXCEPTION 'invalid publication name "%"', name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A publication''s name is 1 to 63 letters, digits, "_", "." or "-".',
                  HINT = 'For example ''orders_to_airflow''.';
    END IF;
    IF backfill_from IS NOT NULL AND NOT isfinite(backfill_from) THEN
        RAISE EXCEPTION 'invalid backfill_from: %', backfill_from
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Name the start of the first period to publish.';
    END IF;
    srv := finalize_internal.publication_server(caller, target);
    IF srv.kind = 'webhook' AND coalesce((SELECT o.option_value FROM pg_catalog.pg_foreign_server f,
                                                 pg_catalog.pg_options_to_table(f.srvoptions) o
                                           WHERE f.srvname = srv.server_name AND o.option_name = 'format'),
                                          'json') <> 'json' THEN
        RAISE EXCEPTION 'webhook target "%" does not take publications', srv.server_name
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A publication sends finalize''s json; the server''s format is for alert channels (Slack, PagerDuty, Opsgenie).',
                  HINT = 'Create a finalize_webhook server with format ''json'' (the default) for publications.';
    END IF;
    options := finalize_internal.publication_options(srv.kind, options, tt.table_id);
    IF srv.kind = 'success_marker' THEN
        PERFORM finalize_internal.check_success_marker_store(options, srv.server_name);
    END IF;
    -- The property says the Iceberg table holds the periods: true when the
    -- pipeline that writes it is a required consumer of the table, read
    -- from that table's main branch (its progress holds the verdict).
    IF srv.kind = 'iceberg_property' AND NOT EXISTS (
           SELECT FROM @extschema@.lake_consumer l
             JOIN @extschema@.consumer c ON c.table_id = l.table_id AND c.consumer = l.consumer
            WHERE l.table_id = tt.table_id AND l.server_name = srv.server_name
              AND l.iceberg_table = options ->> 'iceberg_table' AND l.ref = 'main' AND c.required) THEN
        RAISE WARNING 'the verdict of table "%" does not wait for Iceberg table % to hold its periods', tt.table_name,
                      options ->> 'iceberg_table'
            USING DETAIL = 'The publication moves the table''s properties as the verdict moves; no required consumer of the table reads that Iceberg table''s main branch, so a property may name a period the table does not hold yet.',
                  HINT = format('Declare its writer with finalize.add_consumer(%L, ''<consumer>'', %L, %L), or publish through finalize.release_iceberg, whose commit carries the properties.',
                                tt.table_name, srv.server_name, options ->> 'iceberg_table');
    END IF;
    IF srv.kind IN ('airflow', 'dagster', 'webhook') THEN
        PERFORM finalize_internal.check_partition_key(options ->> 'partition_key', tt.granularity, tt.period_zone);
    END IF;
    SELECT w.announced_until INTO verdict FROM @extschema@.watermark w WHERE w.table_id = tt.table_id FOR UPDATE;
    start_at := CASE WHEN backfill_from IS NOT NULL THEN finalize_internal.round_down(backfill_from, tt.granularity, tt.period_zone)
                     WHEN verdict IS NOT NULL AND isfinite(verdict) THEN verdict
                     ELSE finalize_internal.round_down(now(), tt.granularity, tt.period_zone) END;
    BEGIN
        INSERT INTO @extschema@.publication (table_id, name, target_kind, server_name, options, started_from,
                                            enqueued_until, created_by)
        VALUES (tt.table_id, name, srv.kind, srv.server_name, options, start_at, start_at, caller)
        RETURNING publication_id INTO id;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'table "%" already has a publication "%"', tt.table_name, name
            USING ERRCODE = 'duplicate_object',
                  HINT = format('Drop it first with finalize.drop_publication(%L, %L), or choose another name.', tt.table_name, name);
    END;
    PERFORM finalize_internal.enqueue_publication(id, verdict);
    RETURN id;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.add_publication(table_name text, name text, target text,
                                                       options jsonb DEFAULT '{}',
                                                       backfill_from timestamptz DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.add_publication(text, text, text, jsonb, timestamptz) IS
    'Publish each period of a table that becomes final to a target (a finalize_airflow, finalize_azure, finalize_dagster, finalize_iceberg, finalize_s3 or finalize_webhook server; NULL: a _SUCCESS marker on file://)';

-- The publication of a table by name, or an error that says which exist.
CREATE OR REPLACE FUNCTION finalize_internal.publication(table_name text, name text)
RETURNS @extschema@.publication
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table := finalize_internal.tracked(table_name);
    p @extschema@.publication;
BEGIN
    -- the verdict's row first, as the outbox's writer takes them
    PERFORM FROM @extschema@.watermark w WHERE w.table_id = tt.table_id FOR UPDATE;
    SELECT x.* INTO p FROM @extschema@.publication x WHERE x.table_id = tt.table_id AND x.name = publication.name
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table "%" has no publication "%"', tt.table_name, name
            USING ERRCODE = 'undefined_object',
                  HINT = 'finalize.publications lists the publications of every table.';
    END IF;
    RETURN p;
END
$$;

-- The publications of tables being untracked end with them, with their
-- pending events: nothing is watched for an untracked table, and a table
-- tracked again under its name is another table, whose verdict the old
-- events must never be sent beside.
CREATE OR REPLACE FUNCTION finalize_internal.drop_table_publications(table_ids bigint[])
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    DELETE FROM @extschema@.publication p WHERE p.table_id = ANY (table_ids);
END;

-- The body of finalize.drop_publication: its pending events go with it.
CREATE OR REPLACE FUNCTION finalize_internal.drop_publication(caller name, table_name text, name text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    p @extschema@.publication := finalize_internal.publication(table_name, name);
BEGIN
    DELETE FROM @extschema@.publication x WHERE x.publication_id = p.publication_id;
    PERFORM finalize_internal.resolve_alerts('publication_failing', p.table_id, NULL, p.name);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.drop_publication(table_name text, name text)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.drop_publication(text, text) IS
    'Stop publishing a table to a target; its events not yet delivered are dropped';

-- The body of finalize.retry_publication: its next event is due now, and
-- its target's circuit breaker lets the attempt through.
CREATE OR REPLACE FUNCTION finalize_internal.retry_publication(caller name, table_name text, name text)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    p @extschema@.publication := finalize_internal.publication(table_name, name);
    n integer;
BEGIN
    UPDATE @extschema@.publication_event e SET next_attempt = now()
     WHERE e.publication_id = p.publication_id AND e.state = 'pending';
    GET DIAGNOSTICS n = ROW_COUNT;
    UPDATE @extschema@.publication x SET head_due = now()
     WHERE x.publication_id = p.publication_id AND n > 0
       AND NOT EXISTS (SELECT FROM @extschema@.publication_event e
                        WHERE e.publication_id = p.publication_id AND e.claimed_at IS NOT NULL);
    UPDATE @extschema@.alert_target_state s SET open_until = NULL WHERE s.target_name = p.server_name;
    PERFORM finalize_internal.wake_alert_delivery();
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.retry_publication(table_name text, name text)
RETURNS integer
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.retry_publication(text, text) IS
    'Send the pending events of a publication now, without waiting for their backoff; returns how many are pending';

-- Why the role that declared a publication may no longer have it
-- delivered (NULL: it may), checked before every attempt with the rules
-- add_publication applied: the role exists, may use the server and the
-- user mapping the worker reads (_server_use_refused), or, for file://
-- markers, may write files on the database server.
CREATE OR REPLACE FUNCTION finalize_internal.publication_refused(who name, server_name text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    role oid := (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = who);
    srv oid;
BEGIN
    IF role IS NULL THEN
        RETURN format('role %s, which declared the publication, no longer exists: drop the publication and declare it again', who);
    ELSIF server_name IS NULL THEN
        RETURN CASE WHEN NOT pg_catalog.pg_has_role(role, 'pg_write_server_files', 'USAGE')
                    THEN format('role %s, which declared the publication, may no longer write files on the database server (pg_write_server_files)', who) END;
    END IF;
    srv := (SELECT s.oid FROM pg_catalog.pg_foreign_server s WHERE s.srvname = server_name);
    IF srv IS NULL THEN
        RETURN format('server "%s" was dropped or renamed: create it again, or drop the publication', server_name);
    END IF;
    RETURN CASE finalize_internal.server_use_refused(role, srv)
        WHEN 'usage' THEN format('role %s, which declared the publication, no longer has USAGE on server "%s"', who, server_name)
        WHEN 'owner_mapping' THEN format('role %s, which declared the publication, may not use the user mapping of server "%s"''s owner', who, server_name)
    END;
END
$$;

-- Why an event may not be sent now although its turn came (NULL: it may),
-- checked at the claim: its period is no longer final (a loss took it
-- back after it was recorded: it waits, never dropped, until the period
-- is final again).
CREATE OR REPLACE FUNCTION finalize_internal.event_held(e @extschema@.publication_event, p @extschema@.publication)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tt @extschema@.tracked_table;
    w @extschema@.watermark;
    verdict timestamptz;
BEGIN
    SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = p.table_id;
    SELECT x.* INTO w FROM @extschema@.watermark x WHERE x.table_id = p.table_id;
    verdict := finalize_internal.sensor_until(tt.table_id, tt.kind, w.finalized_until, tt.granularity, tt.period_zone,
                                              w.loss_blocked);
    IF tt.untracked_at IS NOT NULL OR verdict IS NULL OR e.period_end > verdict THEN
        RETURN format('period %s of table "%s" is no longer final (finalized_until() is %s): the event waits until it is final again',
                      finalize_internal.utc_iso(e.period_start), tt.table_name, coalesce(finalize_internal.utc_iso(verdict), 'NULL'));
    END IF;
    RETURN NULL;
END
$$;

-- Claims the next due event for the delivery worker: the head (oldest
-- pending event) of the publication whose head is due first
-- (publication_head_due_idx; one at a time per publication: in order),
-- its target's breaker (shared with alert webhooks, by server name)
-- closed or due for a probe. An event that may not be sent now
-- (_event_held) waits without an attempt counted. Says everything its
-- target needs, with the body (schema finalize.publication/1). The claim
-- commits durably whatever the worker's synchronous_commit: its count of
-- attempts tells a target that an earlier answer may be lost (it then
-- looks for its effect before sending again), which a crash must not
-- forget while the request may have gone out.
CREATE OR REPLACE FUNCTION finalize_internal.claim_publication_event()
RETURNS TABLE (event_seq bigint, event_id text, kind text, publication_id bigint, publication text,
               target_kind text, server_name text, table_name text, period_start timestamptz,
               period_end timestamptz, period_zone text, partition_key text, location text, options jsonb,
               body text, attempts integer, refused text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    pub @extschema@.publication;
    ev @extschema@.publication_event;
    held text;
BEGIN
    IF finalize_internal.catalog_restoring() IS NOT NULL THEN
        RETURN;
    END IF;
    FOR i IN 1..20 LOOP
        SELECT x.* INTO pub
          FROM @extschema@.publication x
          LEFT JOIN @extschema@.alert_target_state s ON s.target_name = x.server_name
         WHERE x.head_due <= now() AND (s.open_until IS NULL OR s.open_until <= now())
         ORDER BY x.head_due
         LIMIT 1
           FOR NO KEY UPDATE OF x SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        SELECT e.* INTO ev FROM @extschema@.publication_event e
         WHERE e.publication_id = pub.publication_id AND e.state = 'pending'
         ORDER BY e.event_seq LIMIT 1;
        IF NOT FOUND OR ev.claimed_at IS NOT NULL THEN
            UPDATE @extschema@.publication x SET head_due = NULL WHERE x.publication_id = pub.publication_id;
            CONTINUE;
        END IF;
        -- The head itself, never waited for: a release carrying its
        -- properties holds it (iceberg_property_for_release) until its
        -- transaction ends; the worker goes on with other publications.
        PERFORM FROM @extschema@.publication_event e WHERE e.event_seq = ev.event_seq FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            UPDATE @extschema@.publication x SET head_due = now() + interval '1 second'
             WHERE x.publication_id = pub.publication_id;
            CONTINUE;
        END IF;
        IF ev.next_attempt > now() THEN
            UPDATE @extschema@.publication x SET head_due = ev.next_attempt WHERE x.publication_id = pub.publication_id;
            CONTINUE;
        END IF;
        held := finalize_internal.event_held(ev, pub);
        IF held IS NOT NULL THEN
            UPDATE @extschema@.publication x
               SET head_due = now() + interval '5 seconds', last_error = held,
                   failing_since = coalesce(x.failing_since, now())
             WHERE x.publication_id = pub.publication_id;
            UPDATE @extschema@.publication_event e SET last_error = held WHERE e.event_seq = ev.event_seq;
            CONTINUE;
        END IF;
        UPDATE @extschema@.publication_event e
           SET attempts = e.attempts + 1, claimed_at = now(), last_attempt_at = now()
         WHERE e.event_seq = ev.event_seq;
        UPDATE @extschema@.publication x SET head_due = NULL WHERE x.publication_id = pub.publication_id;
        -- durable before anything is sent (see above)
        PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
        RETURN QUERY
        SELECT e.event_seq, e.event_id::text, e.kind, p.publication_id, p.name::text, p.target_kind, p.server_name,
               t.table_name, e.period_start, e.period_end, t.period_zone, e.partition_key, e.location, p.options,
               (jsonb_build_object(
                   'schema', 'finalize.publication/1', 'event_id', e.event_id, 'event', e.kind,
                   'publication', p.name, 'table', t.table_name,
                   'period_start', finalize_internal.utc_iso(e.period_start),
                   'period_end', finalize_internal.utc_iso(e.period_end), 'period_zone', t.period_zone,
                   'partition_key', e.partition_key, 'finalized_until', finalize_internal.utc_iso(e.finalized_until),
                   'database', current_database(), 'recorded_at', finalize_internal.utc_iso(e.created_at))
                || CASE WHEN e.kind = 'late_data' THEN jsonb_build_object('late_data', e.detail) ELSE '{}' END
                -- Paimon's http-report fields beside finalize's
                || CASE WHEN p.target_kind = 'webhook'
                        THEN jsonb_build_object('partition', e.partition_key, 'path', NULL, 'params', p.options ->> 'params')
                        ELSE '{}' END)::text,
               e.attempts, finalize_internal.publication_refused(p.created_by, p.server_name)
          FROM @extschema@.publication_event e
          JOIN @extschema@.publication p ON p.publication_id = e.publication_id
          JOIN @extschema@.tracked_table t ON t.table_id = p.table_id
         WHERE e.event_seq = ev.event_seq;
        RETURN;
    END LOOP;
END
$$;

-- When the next publication event falls due (NULL: none).
CREATE OR REPLACE FUNCTION finalize_internal.next_publication_event()
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT min(greatest(p.head_due, coalesce(s.open_until, p.head_due)))
      FROM @extschema@.publication p
      LEFT JOIN @extschema@.alert_target_state s ON s.target_name = p.server_name
     WHERE p.head_due IS NOT NULL;
END;

-- Records the outcome of one attempt (the publication's row locked first,
-- as retry_publication and drop_publication take it). Delivered: the
-- event is done, the publication and its target are well, its incident
-- resolved, the next event due. Else the event waits (never dropped: a
-- later period must not overtake it) with the backoff alert webhooks use;
-- a failure the target itself gave (reached: an answer, or none in time)
-- counts against its breaker, which opens at once after a slow one (a
-- stalled target costs the worker one timeout per breaker period) and then
-- holds every publication to that target; a publication failing for
-- finalize.alert_after (at once when the target refused the credentials)
-- opens a publication_failing incident.
CREATE OR REPLACE FUNCTION finalize_internal.publication_result(event_seq bigint, delivered boolean, already boolean,
                                                                http_status integer, error text,
                                                                retry_after double precision, auth_failed boolean,
                                                                slow boolean DEFAULT false, reached boolean DEFAULT true)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    e @extschema@.publication_event;
    p @extschema@.publication;
    tname text;
    next_try timestamptz;
BEGIN
    SELECT x.* INTO p FROM @extschema@.publication x
     WHERE x.publication_id = (SELECT y.publication_id FROM @extschema@.publication_event y
                                WHERE y.event_seq = publication_result.event_seq)
       FOR NO KEY UPDATE;
    SELECT x.* INTO e FROM @extschema@.publication_event x WHERE x.event_seq = publication_result.event_seq FOR UPDATE;
    IF p.publication_id IS NULL OR e.event_seq IS NULL THEN
        RETURN NULL;        -- its publication was dropped meanwhile
    END IF;
    IF delivered THEN
        UPDATE @extschema@.publication_event x
           SET state = 'delivered', delivered_at = now(), outcome = CASE WHEN already THEN 'already' ELSE 'sent' END,
               last_status = http_status, last_error = NULL, claimed_at = NULL
         WHERE x.event_seq = e.event_seq;
        UPDATE @extschema@.publication x
           SET failing_since = NULL, last_error = NULL, last_delivered_at = now(),
               delivered_until = CASE WHEN e.kind = 'final' THEN greatest(x.delivered_until, e.period_end)
                                      ELSE x.delivered_until END,
               head_due = CASE WHEN EXISTS (SELECT FROM @extschema@.publication_event y
                                             WHERE y.publication_id = p.publication_id AND y.state = 'pending')
                               THEN now() END
         WHERE x.publication_id = p.publication_id;
        IF p.server_name IS NOT NULL THEN
            PERFORM finalize_internal.target_succeeded(p.server_name);
        END IF;
        IF p.failing_since IS NOT NULL THEN
            PERFORM finalize_internal.resolve_alerts('publication_failing', p.table_id, NULL, p.name);
        END IF;
        RETURN 'delivered';
    END IF;
    IF p.server_name IS NOT NULL AND reached THEN
        PERFORM finalize_internal.target_failed(p.server_name, error, slow);
    END IF;
    next_try := now() + finalize_internal.retry_backoff(e.attempts, retry_after);
    UPDATE @extschema@.publication_event x
       SET last_status = http_status, last_error = error, claimed_at = NULL, next_attempt = next_try
     WHERE x.event_seq = e.event_seq;
    UPDATE @extschema@.publication x
       SET failing_since = coalesce(x.failing_since, now()), last_error = error, head_due = next_try
     WHERE x.publication_id = p.publication_id;
    -- An open breaker holds every publication to that target: none is
    -- looked at before it lets a probe through.
    UPDATE @extschema@.publication x SET head_due = s.open_until
      FROM @extschema@.alert_target_state s
     WHERE s.target_name = p.server_name AND s.open_until > now()
       AND x.server_name = p.server_name AND x.head_due < s.open_until;
    IF auth_failed OR now() - coalesce(p.failing_since, now()) >= finalize_internal.alert_after() THEN
        tname := (SELECT t.table_name FROM @extschema@.tracked_table t WHERE t.table_id = p.table_id);
        PERFORM finalize_internal.raise_alert(
            'publication_failing', 'warning', p.table_id, NULL, p.name,
            format('Publication "%s" of table "%s" cannot deliver to %s since %s: %s', p.name, tname,
                   coalesce(format('target "%s"', p.server_name), 'its file:// location'),
                   finalize_internal.utc_iso(coalesce(p.failing_since, now())), coalesce(error, 'no error text')),
            jsonb_build_object('publication', p.name, 'target', p.server_name, 'http_status', http_status,
                               'pending_since', finalize_internal.utc_iso(e.created_at),
                               'period_start', finalize_internal.utc_iso(e.period_start),
                               'auth_failed', auth_failed));
    END IF;
    RETURN 'retry';
END
$$;

-- After a restart of the delivery worker, events it had claimed are due
-- again (their attempt was counted, durably: _claim_publication_event).
CREATE OR REPLACE FUNCTION finalize_internal.release_publication_claims()
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    UPDATE @extschema@.publication_event e SET claimed_at = NULL WHERE e.state = 'pending' AND e.claimed_at IS NOT NULL;
    UPDATE @extschema@.publication p SET head_due = now()
     WHERE p.head_due IS NULL
       AND EXISTS (SELECT FROM @extschema@.publication_event e
                    WHERE e.publication_id = p.publication_id AND e.state = 'pending');
END;

-- Each scheduler round: records the events a publication's cursor still
-- lags its table's announced verdict by (a backfill longer than a batch;
-- a rise whose row another transaction held), never past what
-- finalized_until() answers now (_enqueue_publication), and forgets
-- delivered events older than 30 days (delivered_until keeps how far a
-- publication got). Rows another transaction holds wait a round. Returns
-- how many publications exist: the delivery worker runs while any do.
CREATE OR REPLACE FUNCTION finalize_internal.enqueue_publications()
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT p.publication_id, w.announced_until
          FROM @extschema@.publication p
          JOIN @extschema@.watermark w ON w.table_id = p.table_id
          JOIN @extschema@.tracked_table t ON t.table_id = p.table_id
         WHERE t.untracked_at IS NULL AND w.announced_until > p.enqueued_until
         ORDER BY p.publication_id
           FOR NO KEY UPDATE OF p SKIP LOCKED
    LOOP
        PERFORM finalize_internal.enqueue_publication(r.publication_id, r.announced_until);
    END LOOP;
    DELETE FROM @extschema@.publication_event e
     WHERE e.state = 'delivered' AND e.delivered_at < now() - interval '30 days';
    RETURN (SELECT count(*) FROM @extschema@.publication);
END
$$;

-- The publications, as an admin watches them.
CREATE OR REPLACE VIEW @extschema@.publications AS
SELECT t.table_name, p.name AS publication, p.target_kind, p.server_name AS target, p.options,
       p.started_from, p.enqueued_until AS recorded_until, p.delivered_until, q.pending,
       CASE WHEN p.failing_since IS NOT NULL THEN 'failing' WHEN q.pending > 0 THEN 'delivering'
            ELSE 'up_to_date' END AS state,
       p.failing_since, p.last_error, p.last_delivered_at, p.created_at, p.created_by
  FROM @extschema@.publication p
  JOIN @extschema@.tracked_table t ON t.table_id = p.table_id
 CROSS JOIN LATERAL (SELECT count(*) AS pending FROM @extschema@.publication_event e
                      WHERE e.publication_id = p.publication_id AND e.state = 'pending') q;
COMMENT ON VIEW @extschema@.publications IS
    'Publications: what each table publishes to which target, how far it was recorded and delivered, and whether it is failing';
