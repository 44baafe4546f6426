
-- Opens an incident, or when one of the same kind, table, source and
-- subject is not resolved, counts it again (an acknowledged one stays
-- acknowledged: a person already knows). Returns its id. Runs in the
-- caller's transaction, so the incident commits with what raised it. In a
-- background worker an open incident another transaction holds (an
-- acknowledge_alert left uncommitted) is not waited for when its
-- condition is looked at again every cycle: it is counted again next time.
-- The others (a loss, a schema block, late rows, a refused release, a
-- clock stepped back) are raised once, and their holder may be resolving them (release_gate does
-- late_data's): they wait, at most finalize.lock_timeout, and the worker
-- records them again next cycle if that was not enough.
CREATE OR REPLACE FUNCTION finalize_internal.raise_alert(kind text, severity text, table_id bigint, server_name text,
                                         subject text, message text, detail jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    id bigint;
    tname text := (SELECT t.table_name FROM @extschema@.tracked_table t WHERE t.table_id = raise_alert.table_id);
BEGIN
    IF finalize_internal.in_background()
       AND raise_alert.kind NOT IN ('data_loss', 'schema_blocked', 'schema_change', 'late_data', 'release_rejected',
                                     'clock_stepped_back') THEN
        SELECT a.alert_id INTO id FROM @extschema@.alert a
         WHERE a.kind = raise_alert.kind AND coalesce(a.table_name, '') = coalesce(tname, '')
           AND coalesce(a.server_name, '') = coalesce(raise_alert.server_name, '')
           AND a.subject = coalesce(raise_alert.subject, '') AND a.state <> 'resolved';
        IF FOUND THEN
            PERFORM FROM @extschema@.alert a WHERE a.alert_id = id FOR NO KEY UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                RETURN id;
            END IF;
        END IF;
    END IF;
    INSERT INTO @extschema@.alert AS a (kind, severity, table_id, table_name, server_name, subject, message, detail)
    VALUES (raise_alert.kind, raise_alert.severity, raise_alert.table_id, tname,
            raise_alert.server_name, coalesce(raise_alert.subject, ''), raise_alert.message, raise_alert.detail)
    ON CONFLICT (kind, coalesce(table_name, ''), coalesce(server_name, ''), subject) WHERE state <> 'resolved'
    DO UPDATE SET last_seen = now(), count = a.count + 1, message = EXCLUDED.message, detail = EXCLUDED.detail,
                  severity = EXCLUDED.severity
    RETURNING a.alert_id INTO id;
    RETURN id;
END
$$;

-- Resolves the incident of a condition that cleared (none: nothing).
-- Returns how many it resolved. In a background worker one that another
-- transaction holds is left for a later call: every caller there looks
-- again each cycle (_source_alerts, _table_alerts, _check_consumers).
CREATE OR REPLACE FUNCTION finalize_internal.resolve_alerts(kind text, table_id bigint, server_name text, subject text DEFAULT '')
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    n integer;
BEGIN
    IF finalize_internal.in_background() THEN
        UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
         WHERE a.alert_id IN (
            SELECT x.alert_id FROM @extschema@.alert x
             WHERE x.kind = resolve_alerts.kind AND x.state <> 'resolved'
               AND coalesce(x.table_id, 0) = coalesce(resolve_alerts.table_id, 0)
               AND coalesce(x.server_name, '') = coalesce(resolve_alerts.server_name, '')
               AND x.subject = coalesce(resolve_alerts.subject, '')
               FOR NO KEY UPDATE SKIP LOCKED);
    ELSE
        UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
         WHERE a.kind = resolve_alerts.kind AND a.state <> 'resolved'
           AND coalesce(a.table_id, 0) = coalesce(resolve_alerts.table_id, 0)
           AND coalesce(a.server_name, '') = coalesce(resolve_alerts.server_name, '')
           AND a.subject = coalesce(resolve_alerts.subject, '');
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- The body of finalize.acknowledge_alert, run as the extension's owner by
-- its C entry point (owner.c) with the caller taken before the switch.
CREATE OR REPLACE FUNCTION finalize_internal.acknowledge_alert(caller name, alert_id bigint, note text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    a @extschema@.alert;
BEGIN
    PERFORM finalize_internal.require(alert_id, 'alert_id');
    PERFORM finalize_internal.require(note, 'note');
    IF note !~ '\S' THEN
        RAISE EXCEPTION 'invalid value for argument note: it must say what is being done'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The note is kept with the incident, for example ''SQL Server login fixed, ticket OPS-42''.';
    END IF;
    SELECT x.* INTO a FROM @extschema@.alert x WHERE x.alert_id = acknowledge_alert.alert_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'alert % does not exist', alert_id
            USING ERRCODE = 'undefined_object',
                  HINT = 'See the open incidents in finalize.alerts.';
    ELSIF a.state = 'resolved' THEN
        RAISE EXCEPTION 'alert % is already resolved', alert_id
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('Its condition cleared at %s; a new incident opens if it comes back.', a.resolved_at);
    END IF;
    UPDATE @extschema@.alert x
       SET state = 'acknowledged', acknowledged_at = now(), acknowledged_by = caller, acknowledge_note = note
     WHERE x.alert_id = a.alert_id;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.acknowledge_alert(alert_id bigint, note text)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_as_owner'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION @extschema@.acknowledge_alert(bigint, text) IS
    'Say that a person handles an open incident; it stays acknowledged until its condition clears';

-- The incidents, newest first, for people and dashboards.
CREATE OR REPLACE VIEW @extschema@.alerts AS
SELECT a.alert_id, a.kind, a.severity, coalesce(t.table_name, a.table_name) AS table_name, a.server_name,
       a.subject, a.state, a.opened_at, a.last_seen, a.count, a.message, a.detail, a.resolved_at,
       a.acknowledged_at, a.acknowledged_by, a.acknowledge_note, a.dedup_key
  FROM @extschema@.alert a
  LEFT JOIN @extschema@.tracked_table t ON t.table_id = a.table_id
 ORDER BY a.alert_id DESC;
COMMENT ON VIEW @extschema@.alerts IS
    'Incidents: what froze or endangered a verdict, since when, how often, and whether it was resolved or acknowledged';

-- finalize.alert_after as an interval without days.
CREATE OR REPLACE FUNCTION finalize_internal.alert_after()
RETURNS interval
AS 'MODULE_PATHNAME', 'finalize_alert_after'
LANGUAGE C STABLE;

-- The incidents of a source's condition, as its worker records it each
-- cycle (_source_ok, _source_failed): a condition that stops the source
-- opens one once it has lasted finalize.alert_after (at once for those
-- that make SQL Server's times untrusted, and for a stalled capture);
-- every other source condition's incident is resolved. A condition that
-- says nothing about SQL Server (a worker starting, cancelled, or not
-- running) changes no incident.
CREATE OR REPLACE FUNCTION finalize_internal.source_alerts(server_name text, condition text, message text, since timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    kinds text[] := ARRAY['unreachable', 'timeout', 'tls_failed', 'configuration', 'sql_error', 'no_max_lsn',
                          'internal_error', 'server_dropped', 'timezone_mismatch', 'clock_skew',
                          'commit_time_ahead', 'capture_stalled', 'kerberos_failed'];
BEGIN
    IF condition NOT IN ('ok', 'capture_stalled') AND NOT (condition = ANY (kinds)) THEN
        RETURN;
    END IF;
    -- one statement, through the index of open incidents: it runs every
    -- cycle, so one another transaction holds (an acknowledge_alert left
    -- uncommitted) is skipped, never waited for, and resolved later
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.alert_id IN (
        SELECT x.alert_id FROM @extschema@.alert x
         WHERE x.kind = ANY (kinds) AND x.kind IS DISTINCT FROM condition AND x.state <> 'resolved'
           AND coalesce(x.table_id, 0) = 0 AND coalesce(x.server_name, '') = coalesce(source_alerts.server_name, '')
           AND x.subject = ''
           FOR NO KEY UPDATE SKIP LOCKED);
    IF condition = ANY (kinds)
       AND (condition IN ('timezone_mismatch', 'clock_skew', 'commit_time_ahead', 'capture_stalled')
            OR since <= now() - finalize_internal.alert_after()) THEN
        PERFORM finalize_internal.raise_alert(condition,
                                         CASE WHEN condition = 'capture_stalled' THEN 'warning' ELSE 'critical' END,
                                         NULL, server_name, '',
                                         coalesce(message, format('Source "%s": %s.', server_name, condition)),
                                         jsonb_build_object('since', finalize_internal.utc_iso(since)));
    END IF;
END
$$;

-- The incident kinds of a table's conditions: what _set_condition opens
-- and resolves (the other table incidents, such as freshness, late_data or
-- release_rejected, have their own lives).
CREATE OR REPLACE FUNCTION finalize_internal.condition_alert_kinds()
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN ARRAY['no_access', 'read_failed', 'record_failed', 'lock_timeout', 'lsn_regressed',
             'no_capture_instance', 'source_replaced', 'event_column_invalid', 'start_unreadable'];

-- Of some tables, those with a condition or an open incident of one: the
-- worker clears the condition of every table it read (_set_condition), and
-- a cycle over thousands of idle tables needs no write for the others.
CREATE OR REPLACE FUNCTION finalize_internal.held_conditions(table_ids bigint[])
RETURNS SETOF bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT c.table_id FROM @extschema@.table_condition c WHERE c.table_id = ANY (held_conditions.table_ids)
    UNION
    SELECT a.table_id FROM @extschema@.alert a
     WHERE a.table_id = ANY (held_conditions.table_ids) AND a.state <> 'resolved' AND a.subject = ''
       AND a.kind = ANY (finalize_internal.condition_alert_kinds());
END;

-- The incidents of a table's condition (_set_condition): one opens once
-- the condition has lasted finalize.alert_after; a cleared or changed
-- condition resolves the others.
CREATE OR REPLACE FUNCTION finalize_internal.table_alerts(table_id bigint, condition text, message text, since timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    kinds text[] := finalize_internal.condition_alert_kinds();
    server text := (SELECT t.server_name FROM @extschema@.tracked_table t WHERE t.table_id = table_alerts.table_id);
BEGIN
    -- one statement, through the index of open incidents: it runs every
    -- cycle while the table has a condition or an open incident
    -- (_held_conditions), so one another transaction holds is skipped
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.alert_id IN (
        SELECT x.alert_id FROM @extschema@.alert x
         WHERE x.kind = ANY (kinds) AND x.kind IS DISTINCT FROM condition AND x.state <> 'resolved'
           AND coalesce(x.table_id, 0) = coalesce(table_alerts.table_id, 0)
           AND coalesce(x.server_name, '') = coalesce(server, '') AND x.subject = ''
           FOR NO KEY UPDATE SKIP LOCKED);
    IF condition = ANY (kinds) AND since <= now() - finalize_internal.alert_after() THEN
        PERFORM finalize_internal.raise_alert(condition, CASE WHEN condition = 'lock_timeout' THEN 'warning' ELSE 'critical' END,
                                         table_id, server, '', coalesce(message, condition),
                                         jsonb_build_object('since', finalize_internal.utc_iso(since)));
    END IF;
END
$$;
