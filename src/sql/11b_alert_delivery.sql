-- Alert delivery (docs/design/alerts.md): the incidents of release
-- rejections and freshness SLAs, webhook targets, and the queue the
-- "finalize alerts" background worker drains. After the gate's part, since
-- a release that was refused opens an incident.

-- A release that was refused is an informational incident of its
-- partition; the next released generation resolves it, and the late_data
-- incident of its period. Runs in the gate's transaction, as the
-- extension's owner (who records releases); rows a restore brings back are
-- not attempts of now and change nothing.
CREATE OR REPLACE FUNCTION finalize_internal.release_alert()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    codes text;
BEGIN
    -- A row restored by pg_restore keeps its old time: history, not news.
    IF NEW.requested_at IS DISTINCT FROM now() THEN
        RETURN NULL;
    END IF;
    IF NEW.released THEN
        PERFORM finalize_internal.resolve_alerts('release_rejected', NEW.table_id, NULL, NEW.partition);
        -- The gate released the period only with a build after its late
        -- rows (problem late_data): the correction they called for is out.
        UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
         WHERE a.kind = 'late_data' AND a.table_id = NEW.table_id AND a.state <> 'resolved'
           AND NEW.period_start IS NOT NULL AND a.subject = finalize_internal.utc_iso(NEW.period_start);
        RETURN NULL;
    END IF;
    SELECT string_agg(format('%s %s', c.n, c.code), ', ' ORDER BY c.n DESC, c.code) INTO codes
      FROM (SELECT p->>'code' AS code, count(*) AS n
              FROM jsonb_array_elements(CASE jsonb_typeof(NEW.problems) WHEN 'array' THEN NEW.problems
                                             ELSE '[]'::jsonb END) AS p
             GROUP BY 1) c;
    PERFORM finalize_internal.raise_alert(
        'release_rejected', 'info', NEW.table_id, NULL, NEW.partition,
        format('Generation "%s" of partition "%s" was not released: %s.', NEW.generation, NEW.partition,
               coalesce(codes, 'no problem was recorded')),
        jsonb_build_object('release_id', NEW.release_id, 'generation', NEW.generation,
                           'problems', jsonb_array_length(CASE jsonb_typeof(NEW.problems) WHEN 'array'
                                                               THEN NEW.problems ELSE '[]'::jsonb END),
                           'requested_by', NEW.requested_by));
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER release_alert AFTER INSERT ON @extschema@.release
    FOR EACH ROW EXECUTE FUNCTION finalize_internal.release_alert();

-- The freshness SLA of every table that has one (tracked_table.max_lag),
-- run by the scheduler each round: a table whose verdict lags now() by more
-- than its max_lag opens one incident (refreshed at most once a minute
-- while it lasts); one back within, untracked, or without an SLA any more
-- is resolved. A table without a verdict yet lags from when it was
-- tracked. The verdict is what finalized_until() answers (_sensor_until:
-- a start of the table's periods, stopped where a loss holds periods), as
-- finalize.status shows its lag. Returns how many tables are over their SLA.
CREATE OR REPLACE FUNCTION finalize_internal.check_freshness()
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    r record;
    n integer := 0;
    msg text;
    detail jsonb;
BEGIN
    -- Rows another session holds (an admin's open transaction) are skipped
    -- this round, never waited for: the scheduler must go on.
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.alert_id IN (
        SELECT x.alert_id FROM @extschema@.alert x
         WHERE x.kind = 'freshness' AND x.state <> 'resolved'
           AND NOT EXISTS (SELECT FROM @extschema@.tracked_table t
                             JOIN @extschema@.watermark w ON w.table_id = t.table_id
                            WHERE t.table_id = x.table_id AND t.untracked_at IS NULL AND t.max_lag IS NOT NULL
                              AND now() - coalesce(finalize_internal.sensor_until(t.table_id, t.kind, w.finalized_until,
                                                                             t.granularity, t.period_zone,
                                                                             w.loss_blocked),
                                                   t.created_at) > t.max_lag)
           FOR UPDATE SKIP LOCKED);
    FOR r IN
        SELECT t.table_id, t.table_name, t.server_name, t.max_lag, v.until AS finalized_until,
               make_interval(secs => floor(extract(epoch FROM now() - coalesce(v.until, t.created_at)))) AS lag,
               (SELECT a.alert_id FROM @extschema@.alert a
                 WHERE a.kind = 'freshness' AND a.table_id = t.table_id AND a.state <> 'resolved') AS open_id,
               (SELECT a.last_seen FROM @extschema@.alert a
                 WHERE a.kind = 'freshness' AND a.table_id = t.table_id AND a.state <> 'resolved') AS seen
          FROM @extschema@.tracked_table t
          JOIN @extschema@.watermark w ON w.table_id = t.table_id
         CROSS JOIN LATERAL (SELECT finalize_internal.sensor_until(t.table_id, t.kind, w.finalized_until, t.granularity,
                                                              t.period_zone, w.loss_blocked) AS until) v
         WHERE t.untracked_at IS NULL AND t.max_lag IS NOT NULL
           AND now() - coalesce(v.until, t.created_at) > t.max_lag
    LOOP
        n := n + 1;
        CONTINUE WHEN r.seen > now() - interval '1 minute';
        msg := CASE WHEN r.finalized_until IS NULL
                 THEN format('Table "%s" has no verdict %s after it was tracked; its freshness SLA (max_lag) is %s.',
                             r.table_name, r.lag, r.max_lag)
                 ELSE format('Table "%s" is final only until %s, %s ago; its freshness SLA (max_lag) is %s.',
                             r.table_name, finalize_internal.utc_iso(r.finalized_until),
                             r.lag, r.max_lag) END;
        detail := jsonb_build_object('finalized_until', finalize_internal.utc_iso(r.finalized_until),
                                     'lag_seconds', floor(extract(epoch FROM r.lag)),
                                     'max_lag_seconds', extract(epoch FROM r.max_lag));
        IF r.open_id IS NULL THEN
            PERFORM finalize_internal.raise_alert('freshness', 'warning', r.table_id, r.server_name, '', msg, detail);
        ELSE
            -- counted again, unless another session holds it just now
            UPDATE @extschema@.alert a SET last_seen = now(), count = a.count + 1, message = msg, detail = detail
             WHERE a.alert_id IN (SELECT x.alert_id FROM @extschema@.alert x WHERE x.alert_id = r.open_id
                                     FOR UPDATE SKIP LOCKED);
        END IF;
    END LOOP;
    RETURN n;
END
$$;

-- Sources whose foreign server was dropped while tables are still
-- tracked through it, run by the scheduler each round: their worker is
-- gone and their verdicts stopped, which no worker can report any more.
-- Opens one server_dropped incident per such source at once (dropping is
-- deliberate; finalize.alert_after rides out blips, not decisions) and
-- shows it in source_status; resolved once a server of that name exists
-- again or its tables are untracked. Sources with no tracked table left
-- (untracked, or dropped with their server) leave source_status, and
-- with them their stopped worker's pid; only a hold (commit_time_ahead)
-- stays while its server exists, without a pid: tracking a table through
-- the server again must not forget that its commit times were not to be
-- trusted. Returns how many sources are dropped under tracked tables.
CREATE OR REPLACE FUNCTION finalize_internal.check_dropped_sources()
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    n integer := 0;
    msg text;
BEGIN
    -- A row its worker holds just now (its last cycle) goes a round later.
    DELETE FROM @extschema@.source_status st
     WHERE st.server_name IN (
        SELECT x.server_name FROM @extschema@.source_status x
         WHERE NOT EXISTS (SELECT FROM @extschema@.tracked_table t
                            WHERE t.server_name = x.server_name AND t.untracked_at IS NULL AND t.kind = 'source')
           AND (x.held_by IS NULL
                OR NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_server s
                                 JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
                                WHERE s.srvname = x.server_name AND w.fdwname = 'finalize_mssql'))
           FOR UPDATE SKIP LOCKED);
    UPDATE @extschema@.source_status st SET worker_pid = NULL
     WHERE st.server_name IN (
        SELECT x.server_name FROM @extschema@.source_status x
         WHERE x.worker_pid IS NOT NULL
           AND NOT EXISTS (SELECT FROM @extschema@.tracked_table t
                            WHERE t.server_name = x.server_name AND t.untracked_at IS NULL AND t.kind = 'source')
           FOR UPDATE SKIP LOCKED);
    UPDATE @extschema@.alert a SET state = 'resolved', resolved_at = now()
     WHERE a.alert_id IN (
        SELECT x.alert_id FROM @extschema@.alert x
         WHERE x.kind = 'server_dropped' AND x.state <> 'resolved'
           AND (EXISTS (SELECT FROM pg_catalog.pg_foreign_server s
                          JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
                         WHERE s.srvname = x.server_name AND w.fdwname = 'finalize_mssql')
                OR NOT EXISTS (SELECT FROM @extschema@.tracked_table t
                                WHERE t.server_name = x.server_name AND t.untracked_at IS NULL))
           FOR UPDATE SKIP LOCKED);
    FOR r IN
        SELECT t.server_name, count(*) AS tables, string_agg(format('"%s"', t.table_name), ', ' ORDER BY t.table_name) AS names,
               EXISTS (SELECT FROM @extschema@.alert a WHERE a.kind = 'server_dropped' AND a.server_name = t.server_name
                          AND a.state <> 'resolved') AS raised
          FROM @extschema@.tracked_table t
         WHERE t.untracked_at IS NULL AND t.kind = 'source'
           AND NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_server s
                             JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
                            WHERE s.srvname = t.server_name AND w.fdwname = 'finalize_mssql')
         GROUP BY t.server_name
    LOOP
        n := n + 1;
        CONTINUE WHEN r.raised;
        msg := format('Server "%s" no longer exists (DROP SERVER) while %s table(s) are tracked through it (%s): their verdicts stopped. Create the server again, or untrack the tables.',
                      r.server_name, r.tables, left(r.names, 1000));
        PERFORM finalize_internal.raise_alert('server_dropped', 'critical', NULL, r.server_name, '', msg,
                                         jsonb_build_object('tables', r.tables));
        UPDATE @extschema@.source_status st
           SET condition = 'server_dropped', condition_since = now(), last_error = msg, last_error_at = now(),
               worker_pid = NULL
         WHERE st.server_name = r.server_name AND st.condition <> 'server_dropped';
    END LOOP;
    RETURN n;
END
$$;

-- Webhook targets are foreign servers of finalize_webhook; secrets (a
-- bearer token, a routing key, an API key, an HMAC key, or the URL itself
-- when it is the secret, as Slack's are) live in the user mapping of the
-- server's owner, which only its owner and superusers can read.
CREATE OR REPLACE FUNCTION finalize_internal.webhook_validator(options text[], catalog oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_webhook_validator'
LANGUAGE C STRICT;

-- The webhook targets: foreign servers of finalize_webhook with their
-- options (never the user mapping's secrets), in the order they were made
-- (so are an incident's deliveries queued, whatever the catalog's layout).
CREATE OR REPLACE FUNCTION finalize_internal.alert_targets()
RETURNS TABLE (target_name text, format text, min_severity text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT s.srvname::text,
           coalesce((SELECT o.option_value FROM pg_catalog.pg_options_to_table(s.srvoptions) o
                      WHERE o.option_name = 'format'), 'json'),
           coalesce((SELECT o.option_value FROM pg_catalog.pg_options_to_table(s.srvoptions) o
                      WHERE o.option_name = 'min_severity'), 'warning')
      FROM pg_catalog.pg_foreign_server s
      JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
     WHERE w.fdwname = 'finalize_webhook'
     ORDER BY s.oid;
END;

-- The rank of a severity, for min_severity.
CREATE OR REPLACE FUNCTION finalize_internal.severity_rank(severity text)
RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN CASE severity WHEN 'info' THEN 1 WHEN 'warning' THEN 2 WHEN 'critical' THEN 3 END;

-- The documented body of the json format: the incident at one transition.
-- dedup_key names the incident (PagerDuty's dedup_key, Opsgenie's alias);
-- idempotency_key names the transition. The message of a resolution says
-- it resolved (and when), then what the incident was.
CREATE OR REPLACE FUNCTION finalize_internal.alert_event(a @extschema@.alert, transition text)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT jsonb_build_object(
        'schema', 'finalize.alert/1',
        'event', transition,
        'dedup_key', (a).dedup_key,
        'idempotency_key', format('%s-%s', (a).dedup_key, transition),
        'database', current_database(),
        'alert', jsonb_build_object(
            'id', (a).alert_id, 'kind', (a).kind, 'severity', (a).severity, 'state', (a).state,
            'table', (a).table_name, 'source', (a).server_name, 'subject', nullif((a).subject, ''),
            'message', CASE WHEN transition = 'resolve' AND (a).resolved_at IS NOT NULL
                            THEN format('Resolved at %s (open since %s). It was: %s',
                                        finalize_internal.utc_iso((a).resolved_at), finalize_internal.utc_iso((a).opened_at),
                                        (a).message)
                            ELSE (a).message END,
            'detail', (a).detail, 'count', (a).count,
            'opened_at', finalize_internal.utc_iso((a).opened_at), 'last_seen', finalize_internal.utc_iso((a).last_seen),
            'resolved_at', finalize_internal.utc_iso((a).resolved_at),
            'acknowledged_at', finalize_internal.utc_iso((a).acknowledged_at),
            'acknowledged_by', (a).acknowledged_by, 'acknowledge_note', (a).acknowledge_note));
END;

-- Wakes the alerts worker once the transaction that queued deliveries
-- commits (a no-op without one).
CREATE OR REPLACE FUNCTION finalize_internal.wake_alert_delivery()
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_wake_alert_delivery'
LANGUAGE C VOLATILE;

-- Queues the deliveries of an incident's transition: its opening to every
-- target whose min_severity it reaches; its acknowledgement and its
-- resolution to the targets that were told it opened (a target created
-- later hears of the next incident, never of a resolution alone). An
-- incident born resolved (informational) opens and resolves at once.
CREATE OR REPLACE FUNCTION finalize_internal.queue_alert_delivery()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    transitions text[];
    tr text;
    n integer := 0;
    k integer;
BEGIN
    -- A row restored by pg_restore keeps its old opened_at: it was news
    -- once, and its deliveries come back with the queue's own rows.
    IF TG_OP = 'INSERT' AND NEW.opened_at IS DISTINCT FROM now() THEN
        RETURN NULL;
    ELSIF TG_OP = 'INSERT' THEN
        transitions := CASE WHEN NEW.state = 'resolved' THEN ARRAY['open', 'resolve'] ELSE ARRAY['open'] END;
    ELSIF NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('acknowledged', 'resolved') THEN
        transitions := ARRAY[CASE NEW.state WHEN 'acknowledged' THEN 'acknowledge' ELSE 'resolve' END];
    ELSE
        RETURN NULL;
    END IF;
    FOREACH tr IN ARRAY transitions LOOP
        INSERT INTO @extschema@.alert_delivery (alert_id, target_name, transition, idempotency_key, event, priority)
        SELECT NEW.alert_id, t.target_name, tr, e.event->>'idempotency_key', e.event,
               finalize_internal.severity_rank(NEW.severity)
          FROM finalize_internal.alert_targets() t,
               LATERAL (SELECT finalize_internal.alert_event(NEW, tr) AS event) e
         WHERE CASE WHEN tr = 'open'
                    THEN finalize_internal.severity_rank(NEW.severity) >= finalize_internal.severity_rank(t.min_severity)
                    ELSE EXISTS (SELECT FROM @extschema@.alert_delivery d
                                  WHERE d.alert_id = NEW.alert_id AND d.target_name = t.target_name
                                    AND d.transition = 'open') END
        ON CONFLICT (target_name, idempotency_key) DO NOTHING;
        GET DIAGNOSTICS k = ROW_COUNT;
        n := n + k;
    END LOOP;
    IF n > 0 THEN
        PERFORM finalize_internal.wake_alert_delivery();
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER alert_delivery_queue AFTER INSERT OR UPDATE OF state ON @extschema@.alert
    FOR EACH ROW EXECUTE FUNCTION finalize_internal.queue_alert_delivery();

-- The deliveries the alerts worker may send, and from when: pending, not
-- in flight, every earlier transition of the incident to that target
-- settled (a resolution never overtakes its opening), due at their
-- next_attempt or when their target's breaker lets a probe through.
CREATE OR REPLACE FUNCTION finalize_internal.claimable_deliveries()
RETURNS TABLE (delivery_id bigint, due timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT d.delivery_id, greatest(d.next_attempt, coalesce(s.open_until, d.next_attempt))
      FROM @extschema@.alert_delivery d
      LEFT JOIN @extschema@.alert_target_state s ON s.target_name = d.target_name
     WHERE d.state = 'pending' AND d.claimed_at IS NULL
       AND NOT EXISTS (SELECT FROM @extschema@.alert_delivery e
                        WHERE e.alert_id = d.alert_id AND e.target_name = d.target_name
                          AND e.state = 'pending' AND e.delivery_id < d.delivery_id);
END;

-- Claims the next due delivery for the alerts worker (one at a time, so a
-- breaker that opens stops the very next one), critical incidents first:
-- its target's breaker closed or due for a probe, and every earlier
-- transition of its incident to that target settled (a resolution never overtakes its
-- opening), and not already claimed (in flight until its outcome is
-- recorded, or until the worker restarts: _release_claims). Counts the
-- attempt before it is made: a crash mid-request costs an attempt, never
-- a silent retry for ever.
CREATE OR REPLACE FUNCTION finalize_internal.claim_delivery()
RETURNS TABLE (delivery_id bigint, target_name text, event jsonb, attempts integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- Nothing while the catalog is being restored (11d_catalog_seal.sql).
    IF finalize_internal.catalog_restoring() IS NOT NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH due AS (
        SELECT d.delivery_id
          FROM finalize_internal.claimable_deliveries() c
          JOIN @extschema@.alert_delivery d ON d.delivery_id = c.delivery_id
         WHERE c.due <= now()
         ORDER BY d.priority DESC, c.due, d.delivery_id
         LIMIT 1
           FOR UPDATE OF d SKIP LOCKED)
    UPDATE @extschema@.alert_delivery d
       SET attempts = d.attempts + 1, claimed_at = now(), last_attempt_at = now()
      FROM due
     WHERE d.delivery_id = due.delivery_id
    RETURNING d.delivery_id, d.target_name, d.event, d.attempts;
END
$$;

-- When the next pending delivery falls due (NULL: none), so that the
-- alerts worker sleeps until then.
CREATE OR REPLACE FUNCTION finalize_internal.next_delivery()
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT min(c.due) FROM finalize_internal.claimable_deliveries() c;
END;

-- The circuit breaker of a target (alert_target_state, by server name;
-- alert webhooks and publications share it): an answer closes it.
CREATE OR REPLACE FUNCTION finalize_internal.target_succeeded(target_name text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    INSERT INTO @extschema@.alert_target_state AS s (target_name, last_success)
    VALUES (target_succeeded.target_name, now())
    ON CONFLICT ON CONSTRAINT alert_target_state_pkey DO UPDATE
       SET consecutive_failures = 0, open_until = NULL, last_success = now();
END;

-- A failed attempt at a target: after five in a row its breaker opens for
-- 30 s, doubling to 10 minutes while probes fail; at once after a slow
-- failure (one that held the delivery worker for seconds: a target that
-- stalls must not take the worker's time from the other targets). Returns
-- the failures in a row.
CREATE OR REPLACE FUNCTION finalize_internal.target_failed(target_name text, error text, slow boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    failures integer;
BEGIN
    INSERT INTO @extschema@.alert_target_state AS s (target_name, consecutive_failures, last_failure, last_error)
    VALUES (target_name, 1, now(), error)
    ON CONFLICT ON CONSTRAINT alert_target_state_pkey DO UPDATE
       SET consecutive_failures = s.consecutive_failures + 1, last_failure = now(), last_error = EXCLUDED.last_error
    RETURNING s.consecutive_failures INTO failures;
    IF failures >= 5 OR slow THEN
        UPDATE @extschema@.alert_target_state s
           SET open_until = now() + make_interval(secs => least(600, 30 * power(2, least(greatest(failures - 5, 0), 10))))
         WHERE s.target_name = target_failed.target_name;
    END IF;
    RETURN failures;
END
$$;

-- How long a delivery waits after its attempts-th failed attempt:
-- exponential backoff from 1 s doubling to 10 minutes, with full jitter
-- in the upper half (retries of many deliveries spread out), and at least
-- the target's Retry-After (at most an hour).
CREATE OR REPLACE FUNCTION finalize_internal.retry_backoff(attempts integer, retry_after double precision)
RETURNS interval
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
RETURN make_interval(secs => greatest(least(600, power(2, least(greatest(attempts, 1) - 1, 20))) * (0.5 + random() / 2),
                                      least(coalesce(retry_after, 0), 3600)));

-- Records the outcome of one attempt. Delivered: the target's breaker
-- closes. Failed: the breaker counts it; the delivery is retried after
-- an exponential backoff with jitter (1 s doubling to 10 minutes, at
-- least the target's Retry-After), or fails for good when the answer
-- cannot change (permanent) or retry_limit attempts were made; one that
-- never reached its target (target_answered false: dropped, renamed, or
-- no request could be built) fails at once without touching the breaker.
CREATE OR REPLACE FUNCTION finalize_internal.delivery_result(delivery_id bigint, delivered boolean, http_status integer,
                                             error text, retry_after double precision, permanent boolean,
                                             retry_limit integer, target_answered boolean DEFAULT true)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    d @extschema@.alert_delivery;
BEGIN
    SELECT x.* INTO d FROM @extschema@.alert_delivery x WHERE x.delivery_id = delivery_result.delivery_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;        -- its incident was purged meanwhile
    END IF;
    IF delivered THEN
        UPDATE @extschema@.alert_delivery x
           SET state = 'delivered', delivered_at = now(), last_status = http_status, last_error = NULL,
               claimed_at = NULL
         WHERE x.delivery_id = d.delivery_id;
        PERFORM finalize_internal.target_succeeded(d.target_name);
        RETURN 'delivered';
    END IF;
    -- A target that is gone (or a request that could not be built) fails
    -- the delivery, not the target: its breaker is left alone, and the
    -- state of a target no longer there is forgotten.
    IF NOT target_answered THEN
        UPDATE @extschema@.alert_delivery x
           SET state = 'failed', last_status = NULL, last_error = error, claimed_at = NULL
         WHERE x.delivery_id = d.delivery_id;
        DELETE FROM @extschema@.alert_target_state s
         WHERE s.target_name = d.target_name
           AND NOT EXISTS (SELECT FROM pg_catalog.pg_foreign_server f WHERE f.srvname = d.target_name);
        RETURN 'failed';
    END IF;
    PERFORM finalize_internal.target_failed(d.target_name, error);
    IF permanent OR d.attempts >= retry_limit THEN
        UPDATE @extschema@.alert_delivery x
           SET state = 'failed', last_status = http_status, last_error = error, claimed_at = NULL
         WHERE x.delivery_id = d.delivery_id;
        RETURN 'failed';
    END IF;
    UPDATE @extschema@.alert_delivery x
       SET last_status = http_status, last_error = error, claimed_at = NULL,
           next_attempt = now() + finalize_internal.retry_backoff(d.attempts, retry_after)
     WHERE x.delivery_id = d.delivery_id;
    RETURN 'retry';
END
$$;

-- After a restart of the alerts worker, deliveries it had claimed are
-- due again (their attempt was counted).
CREATE OR REPLACE FUNCTION finalize_internal.release_claims()
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    UPDATE @extschema@.alert_delivery d SET claimed_at = NULL WHERE d.state = 'pending' AND d.claimed_at IS NOT NULL;
END;

-- The request a delivery sends (format, URL, event, secrets as jsonb):
-- what the alerts worker builds, for tests. Not granted: its headers hold
-- the secrets.
CREATE OR REPLACE FUNCTION finalize_internal.alert_request(format text, url text, event jsonb, secrets jsonb,
                                           OUT request_url text, OUT headers text[], OUT body text)
RETURNS record
AS 'MODULE_PATHNAME', 'finalize_alert_request'
LANGUAGE C STABLE STRICT;

-- Deliveries per incident and target, for people: attempts, the last HTTP
-- status and error, and the target's breaker.
CREATE OR REPLACE VIEW @extschema@.alert_deliveries AS
SELECT d.delivery_id, d.alert_id, a.kind, a.severity, d.target_name AS target, d.transition, d.state,
       d.attempts, CASE WHEN d.state = 'pending' THEN d.next_attempt END AS next_attempt,
       d.last_attempt_at, d.last_status,
       -- a receiver's answer may quote what it was sent: admins only
       -- (by name; a renamed role shows nobody the texts, never everybody)
       CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_roles r
                          WHERE r.rolname = 'finalize_admin' AND pg_catalog.pg_has_role(r.oid, 'MEMBER'))
            THEN d.last_error END AS last_error,
       d.delivered_at, d.created_at,
       CASE WHEN s.open_until > now() THEN s.open_until END AS breaker_open_until
  FROM @extschema@.alert_delivery d
  JOIN @extschema@.alert a ON a.alert_id = d.alert_id
  LEFT JOIN @extschema@.alert_target_state s ON s.target_name = d.target_name
 ORDER BY d.delivery_id DESC;
COMMENT ON VIEW @extschema@.alert_deliveries IS
    'Webhook deliveries of incidents: per target and transition, attempts, last HTTP status and error';
