-- Helpers the later parts share: argument checks and the errors they
-- raise, LSN arguments, looking up and locking tracked tables, and the
-- payloads of notifications. None is granted to a role.

-- Raises the error every function uses for a missing argument.
CREATE OR REPLACE FUNCTION finalize_internal.require(value anyelement, argname text)
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

-- Checks that an argument is one of a few words; the error lists them.
CREATE OR REPLACE FUNCTION finalize_internal.check_choice(value text, argname text, allowed text[], meaning text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(value, argname);
    IF NOT value = ANY (allowed) THEN
        RAISE EXCEPTION 'invalid value for argument %: "%"', argname, value
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = meaning,
                  HINT = format('Use one of: %s.', array_to_string(allowed, ', '));
    END IF;
END
$$;

-- Normalizes LSN text to the stored form (upper case); the error names the
-- argument and shows the expected shape.
CREATE OR REPLACE FUNCTION finalize_internal.lsn_arg(value text, argname text)
RETURNS @extschema@.lsn
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL THEN
        RETURN NULL;
    END IF;
    IF value !~ '^0[xX][0-9A-Fa-f]{20}$' THEN
        RAISE EXCEPTION 'invalid value for argument %: "%" is not an LSN', argname, value
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'An LSN is written as 0x followed by 20 hexadecimal digits, for example 0x0000002D00000E580003.';
    END IF;
    RETURN ('0x' || upper(substr(value, 3)))::@extschema@.lsn;
END
$$;

-- A reported LSN in the stored form: 0x and 20 hex digits, or Debezium's
-- source.commit_lsn (0000002d:00000f2a:0002), which is the same 10 bytes;
-- anything else is an error (22023), never a guess (core/lsn_sql.c).
CREATE OR REPLACE FUNCTION finalize_internal.lsn_normalize(lsn text)
RETURNS @extschema@.lsn
AS 'MODULE_PATHNAME', 'finalize_lsn_normalize'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- Checks the name of a new tracked or derived table: the name consumers
-- use, 1 to 255 characters, not only spaces, no control characters (a
-- newline in a name would forge lines in logs and explanations).
CREATE OR REPLACE FUNCTION finalize_internal.check_table_name(table_name text, example text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM finalize_internal.require(table_name, 'table_name');
    IF table_name !~ '\S' OR length(table_name) > 255 OR table_name ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'invalid value for argument table_name: "%"',
                        pg_catalog.regexp_replace(pg_catalog.left(table_name, 255), '[[:cntrl:]]', '?', 'g')
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('A tracked table name is the name consumers use (for example %s): 1 to 255 characters, not only spaces, no control characters.', example);
    END IF;
END
$$;

-- The one error for a table name that is not tracked.
CREATE OR REPLACE FUNCTION finalize_internal.not_tracked(table_name text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'table "%" is not tracked by finalize',
                    pg_catalog.left(table_name, 255) || CASE WHEN length(table_name) > 255 THEN '...' ELSE '' END
        USING ERRCODE = 'undefined_object',
              HINT = 'Check the name in finalize.status, or start tracking it with finalize.track_table().';
END
$$;

-- The tracked table of a name (its row as it is now, no lock), or the
-- not-tracked error: the one lookup of a name among the tracked tables.
CREATE OR REPLACE FUNCTION finalize_internal.tracked(table_name text)
RETURNS @extschema@.tracked_table
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tt @extschema@.tracked_table;
BEGIN
    PERFORM finalize_internal.require(table_name, 'table_name');
    SELECT t.* INTO tt FROM @extschema@.tracked_table t
     WHERE t.table_name = tracked.table_name AND t.untracked_at IS NULL;
    IF NOT FOUND THEN
        PERFORM finalize_internal.not_tracked(table_name);
    END IF;
    RETURN tt;
END
$$;

-- The id of a tracked table, or the not-tracked error.
CREATE OR REPLACE FUNCTION finalize_internal.tracked_id(table_name text)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (finalize_internal.tracked(table_name)).table_id;

-- Whether this process is one of finalize's background workers, whose
-- transactions end within milliseconds (src/core/background.c).
CREATE OR REPLACE FUNCTION finalize_internal.in_background()
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_in_background'
LANGUAGE C STABLE PARALLEL RESTRICTED;

-- Locks the verdict row of a table for a write and returns the table, which
-- must still be tracked: every write of the worker names its table by id, so
-- a name untracked and tracked again meanwhile (a new table_id, maybe on
-- another server) never receives what was read for the old one.
-- With must_exist false, a table no longer tracked is NULL, not an error.
-- A session waits for a lock another transaction holds; finalize's
-- background workers never do (NOWAIT: lock_not_available at once): a
-- session may keep a table's rows for as long as it likes, and waiting
-- would cost every table of the source its cycle time. The worker records
-- that table's condition lock_timeout and tries again next cycle.
CREATE OR REPLACE FUNCTION finalize_internal.lock_tracked(table_id bigint, must_exist boolean DEFAULT true)
RETURNS @extschema@.tracked_table
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    tt @extschema@.tracked_table;
BEGIN
    -- The table's row first (a key-share lock, which no admin function's
    -- update conflicts with), then its verdict: the order every path that
    -- takes both uses, so untrack_table's delete cannot deadlock with it.
    IF finalize_internal.in_background() THEN
        SELECT t.* INTO tt FROM @extschema@.tracked_table t
         WHERE t.table_id = lock_tracked.table_id AND t.untracked_at IS NULL FOR KEY SHARE NOWAIT;
        IF FOUND THEN
            PERFORM FROM @extschema@.watermark w WHERE w.table_id = lock_tracked.table_id FOR UPDATE NOWAIT;
        END IF;
    ELSE
        SELECT t.* INTO tt FROM @extschema@.tracked_table t
         WHERE t.table_id = lock_tracked.table_id AND t.untracked_at IS NULL FOR KEY SHARE;
        IF FOUND THEN
            PERFORM FROM @extschema@.watermark w WHERE w.table_id = lock_tracked.table_id FOR UPDATE;
        END IF;
    END IF;
    IF FOUND THEN
        SELECT t.* INTO tt FROM @extschema@.tracked_table t WHERE t.table_id = lock_tracked.table_id;
    END IF;
    IF NOT FOUND AND NOT must_exist THEN
        RETURN NULL;
    ELSIF NOT FOUND THEN
        RAISE EXCEPTION 'tracked table with id % is no longer tracked', table_id
            USING ERRCODE = 'undefined_object',
                  DETAIL = 'It was untracked (and perhaps tracked again under a new id) after its source was read; nothing read for it is recorded.';
    END IF;
    RETURN tt;
END
$$;

-- Before the worker changes a tracked table's own row (its state, its
-- capture instance): takes the row without waiting in a background worker
-- (lock_not_available at once, the table's condition lock_timeout; an
-- admin's open track_derived holds the rows of its inputs FOR SHARE). A
-- session's UPDATE waits as usual.
CREATE OR REPLACE FUNCTION finalize_internal.lock_tracked_row(table_id bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF finalize_internal.in_background() THEN
        PERFORM FROM @extschema@.tracked_table t WHERE t.table_id = lock_tracked_row.table_id
           FOR NO KEY UPDATE NOWAIT;
    END IF;
END
$$;

-- ISO 8601 in UTC for JSON payloads, independent of the session's TimeZone.
CREATE OR REPLACE FUNCTION finalize_internal.utc_iso(ts timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN date_trunc('second', ts AT TIME ZONE 'UTC') = ts AT TIME ZONE 'UTC'
            THEN to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
            ELSE to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') END;

-- pg_notify that never stops a write from committing (src/core/notify.c):
-- the notification is kept with the transaction and sent at its commit
-- only while the cluster's shared NOTIFY queue is less than half full,
-- else dropped and counted (finalize.dropped_notifications(), the log).
-- Nothing of finalize waits for a notification.
CREATE OR REPLACE FUNCTION finalize_internal.notify(channel text, payload text)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_notify'
LANGUAGE C VOLATILE;

CREATE OR REPLACE FUNCTION @extschema@.dropped_notifications()
RETURNS bigint
AS 'MODULE_PATHNAME', 'finalize_dropped_notifications'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION @extschema@.dropped_notifications() IS
    'Notifications on channels finalize and finalize_alert not sent since the server started, because the NOTIFY queue was half full';

-- Sends an alert on channel finalize_alert. A NOTIFY payload must be shorter
-- than 8000 bytes, and an alert must never fail (and take the event it
-- reports with it) for its size: long values are cut, names and LSNs are
-- kept, and "truncated" says so. The full text stays in the facts.
CREATE OR REPLACE FUNCTION finalize_internal.alert(payload jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    body text := payload::text;
BEGIN
    IF octet_length(body) >= 7900 THEN
        -- What names the alert is never changed (a table name is at most
        -- 255 characters); other values longer than 500 characters are cut.
        SELECT jsonb_object_agg(e.key,
                   CASE WHEN e.key IN ('alert', 'table', 'server') THEN e.value
                        WHEN jsonb_typeof(e.value) = 'string' AND length(e.value #>> '{}') > 500
                        THEN to_jsonb(left(e.value #>> '{}', 500) || '...')
                        WHEN jsonb_typeof(e.value) IN ('object', 'array') AND length(e.value::text) > 500
                        THEN to_jsonb(left(e.value::text, 500) || '...')
                        ELSE e.value END)
               || jsonb_build_object('truncated', true)
          INTO payload
          FROM jsonb_each(payload) AS e;
        body := payload::text;
    END IF;
    IF octet_length(body) >= 7900 THEN
        -- Many long values: keep only what identifies the alert.
        SELECT jsonb_object_agg(e.key, e.value) INTO payload
          FROM jsonb_each(payload) AS e
         WHERE e.key IN ('alert', 'table', 'server', 'truncated') OR octet_length(e.value::text) <= 200;
        body := payload::text;
    END IF;
    PERFORM finalize_internal.notify('finalize_alert', body);
END
$$;
