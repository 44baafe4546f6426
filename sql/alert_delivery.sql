-- Webhook targets and the delivery queue (docs/design/alerts.md): the
-- finalize_webhook wrapper's options, which transitions reach which
-- targets, the requests each format sends, retries and the circuit
-- breaker as the alerts worker records them, release rejections and
-- freshness SLAs. (No alerts worker runs in this database: the queue
-- stays as the trigger filled it; test_alerts_delivery.py sends it.)
\i sql/include/preamble.sql
DELETE FROM finalize.alert;

-- Targets: https anywhere, plain http only to this machine; secrets only
-- in the user mapping and never echoed.
CREATE SERVER hook_json FOREIGN DATA WRAPPER finalize_webhook
    OPTIONS (url 'http://127.0.0.1:9/hook', format 'json', min_severity 'info', timeout '2 seconds');
CREATE USER MAPPING FOR CURRENT_USER SERVER hook_json OPTIONS (hmac_key 'k3y-s1gning', bearer_token 'tok-12345');
CREATE SERVER hook_slack FOREIGN DATA WRAPPER finalize_webhook OPTIONS (format 'slack');
CREATE USER MAPPING FOR CURRENT_USER SERVER hook_slack OPTIONS (url 'https://hooks.slack.com/services/T0/B0/secretpath');
CREATE SERVER hook_pd FOREIGN DATA WRAPPER finalize_webhook
    OPTIONS (url 'https://events.pagerduty.com/v2/enqueue', format 'pagerduty_v2', min_severity 'critical');
CREATE USER MAPPING FOR CURRENT_USER SERVER hook_pd OPTIONS (routing_key 'R0UTINGKEY');
\set VERBOSITY default
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_webhook OPTIONS (url 'http://hooks.example.com/x');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_webhook OPTIONS (url 'ftp://127.0.0.1/x');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_webhook OPTIONS (url 'https://user:pw@example.com/x');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_webhook OPTIONS (url 'http://127.0.0.1.example.com/x');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_webhook OPTIONS (format 'teams');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_webhook OPTIONS (min_severity 'fatal');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_webhook OPTIONS (timeout '-1 second');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_webhook OPTIONS (routing_key 'R0UTINGKEY');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_webhook OPTIONS (password 'x');
-- (the error names the user; its code alone keeps the output the same for any superuser)
\set VERBOSITY sqlstate
CREATE USER MAPPING FOR CURRENT_USER SERVER hook_slack OPTIONS (format 'json');
\set VERBOSITY default
ALTER USER MAPPING FOR CURRENT_USER SERVER hook_json OPTIONS (SET bearer_token E'tok\r\nX-Evil: 1');
ALTER USER MAPPING FOR CURRENT_USER SERVER hook_json OPTIONS (SET hmac_key 'short');
\set VERBOSITY terse
SELECT target_name, format, min_severity FROM finalize_internal.alert_targets() ORDER BY 1;

-- An incident's opening goes to every target whose min_severity it
-- reaches; its acknowledgement and resolution to those told it opened.
SELECT finalize_internal.raise_alert('freshness', 'warning', NULL, 'erp', '', 'Table "s.orders" is 3 hours behind.') AS warn \gset
SELECT finalize_internal.raise_alert('unreachable', 'critical', NULL, 'erp', '', 'Login failed for user ''cdc''. (18456)') AS crit \gset
SELECT finalize_internal.raise_alert('unreachable', 'critical', NULL, 'erp', '', 'Login failed again.') = :crit AS counted_not_queued;
SELECT finalize.acknowledge_alert(:crit, 'on it, OPS-7');
SELECT finalize_internal.resolve_alerts('unreachable', NULL, 'erp');
SELECT finalize_internal.resolve_alerts('freshness', NULL, 'erp');
SELECT alert_id = :crit AS critical, target, transition, state, attempts
  FROM finalize.alert_deliveries ORDER BY delivery_id;
-- An informational incident born resolved opens and resolves at once.
SELECT finalize_internal.raise_alert('schema_change', 'info', NULL, 'erp', 'x', 'ALTER TABLE') AS info \gset
UPDATE finalize.alert SET state = 'resolved', resolved_at = now() WHERE alert_id = :info;
SELECT target, transition FROM finalize.alert_deliveries WHERE alert_id = :info ORDER BY delivery_id;
-- A row pg_restore brings back (with its old times) was news once: it
-- queues nothing, its deliveries come back with the queue's own rows.
INSERT INTO finalize.alert (kind, severity, server_name, message, opened_at, last_seen)
VALUES ('unreachable', 'critical', 'old', 'restored from a dump', now() - interval '1 day', now() - interval '1 day')
RETURNING alert_id AS restored \gset
SELECT count(*) AS queued_for_a_restored_row FROM finalize.alert_delivery WHERE alert_id = :restored;
DELETE FROM finalize.alert WHERE alert_id = :restored;
-- The stored event is the json format's body: the incident at the transition.
SELECT event->>'schema' AS schema, event->>'event' AS event, event->'alert'->>'state' AS state,
       event->>'dedup_key' = (SELECT a.dedup_key FROM finalize.alert a WHERE a.alert_id = :crit) AS dedup_key,
       event->>'idempotency_key' = (SELECT a.dedup_key || '-acknowledge' FROM finalize.alert a WHERE a.alert_id = :crit)
           AS idempotency_key,
       event->>'dedup_key' ~ '^finalize-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' AS random_key,
       event->'alert'->>'acknowledge_note' AS note
  FROM finalize.alert_delivery WHERE alert_id = :crit AND target_name = 'hook_json' AND transition = 'acknowledge';

-- Every incident's key is random (a uuid): the requests below show it masked.
CREATE FUNCTION pg_temp.mask(t text) RETURNS text LANGUAGE sql
RETURN regexp_replace(t, 'finalize-[0-9a-f-]{36}', 'finalize-<uuid>', 'g');

-- The requests: json signed with HMAC-SHA256 of the exact body (checked
-- against pgcrypto-free SQL: sha256 of the padded key, RFC 2104).
CREATE FUNCTION pg_temp.hmac_sha256(key bytea, msg bytea) RETURNS text LANGUAGE sql AS $$
    SELECT encode(sha256((SELECT string_agg(set_byte('\x00'::bytea, 0, get_byte(k, i) # 92), '' ORDER BY i)
                           FROM generate_series(0, 63) i) ||
                          sha256((SELECT string_agg(set_byte('\x00'::bytea, 0, get_byte(k, i) # 54), '' ORDER BY i)
                                    FROM generate_series(0, 63) i) || msg)), 'hex')
      FROM (SELECT key || decode(repeat('00', 64 - length(key)), 'hex') AS k) p
$$;
SELECT d.event AS ev FROM finalize.alert_delivery d WHERE d.alert_id = :crit AND d.target_name = 'hook_json'
   AND d.transition = 'open' \gset
SELECT r.request_url, pg_temp.mask(r.headers[1:4]::text) AS headers,
       r.headers[5] = 'X-Finalize-Signature: sha256=' || pg_temp.hmac_sha256('k3y', convert_to(r.body, 'UTF8')) AS signed,
       r.body::jsonb = :'ev'::jsonb AS body_is_the_event
  FROM finalize_internal.alert_request('json', 'http://127.0.0.1:9/hook', :'ev', '{"hmac_key": "k3y", "bearer_token": "tok-123"}') r;
SELECT r.request_url, pg_temp.mask(r.headers::text) AS headers, r.body::jsonb->>'text' AS text,
       jsonb_array_length(r.body::jsonb->'blocks') AS blocks
  FROM finalize_internal.alert_request('slack', 'https://hooks.slack.com/services/T0/B0/x',
                               jsonb_set(:'ev', '{alert,message}', '"a <b> & c"'), '{}') r;
SELECT pg_temp.mask((r.body::jsonb - 'payload')::text) AS envelope, (r.body::jsonb->'payload') - 'timestamp' AS payload
  FROM finalize_internal.alert_request('pagerduty_v2', 'https://events.pagerduty.com/v2/enqueue', :'ev', '{"routing_key": "R0UTINGKEY"}') r;
SELECT pg_temp.mask(r.body) AS resolve_body
  FROM finalize_internal.alert_request('pagerduty_v2', 'https://events.pagerduty.com/v2/enqueue',
                               jsonb_set(:'ev', '{event}', '"resolve"'), '{"routing_key": "R0UTINGKEY"}') r;
SELECT r.request_url, pg_temp.mask(r.headers::text) AS headers, pg_temp.mask((r.body::jsonb - 'details')::text) AS body
  FROM finalize_internal.alert_request('opsgenie', 'https://api.opsgenie.com/', :'ev', '{"api_key": "g3nie"}') r;
SELECT pg_temp.mask(r.request_url) AS request_url, r.body::jsonb AS body
  FROM finalize_internal.alert_request('opsgenie', 'https://api.eu.opsgenie.com',
                               jsonb_set(:'ev', '{event}', '"acknowledge"'), '{"api_key": "g3nie"}') r;
-- Long messages are cut where each service requires, never mid-character.
SELECT length(r.body::jsonb->'payload'->>'summary') AS pagerduty_summary
  FROM finalize_internal.alert_request('pagerduty_v2', 'https://x.example', jsonb_set(:'ev', '{alert,message}', to_jsonb(repeat('é', 2000))),
                               '{"routing_key": "k"}') r;
SELECT length(r.body::jsonb->>'message') AS opsgenie_message
  FROM finalize_internal.alert_request('opsgenie', 'https://x.example', jsonb_set(:'ev', '{alert,message}', to_jsonb(repeat('é', 2000))),
                               '{"api_key": "k"}') r;
SELECT length(r.body::jsonb->'blocks'->0->'text'->>'text') AS slack_section,
       r.body::jsonb->'blocks'->0->'text'->>'text' ~ '&amp;\.\.\.$|[^&]\.\.\.$' AS cut_whole
  FROM finalize_internal.alert_request('slack', 'https://x.example', jsonb_set(:'ev', '{alert,message}', to_jsonb(repeat('<&>', 3000))),
                               '{}') r;
-- A format's secret missing is an error that names it, not the others' values.
\set VERBOSITY default
SELECT * FROM finalize_internal.alert_request('pagerduty_v2', 'https://x.example', :'ev', '{"hmac_key": "k3y"}');
SELECT * FROM finalize_internal.alert_request('opsgenie', 'https://x.example', :'ev', '{}');
SELECT * FROM finalize_internal.alert_request('json', 'https://x.example', '{"event": "open"}', '{}');
\set VERBOSITY terse

-- Outcomes as the worker records them: a delivered attempt closes the
-- target's breaker; failures back off (at least Retry-After) and fail for
-- good at the retry limit or on a permanent answer; five failures in a
-- row open the breaker, and the queue skips the target while it is open.
UPDATE finalize.alert_delivery SET state = 'delivered' WHERE target_name <> 'hook_json' OR alert_id <> :crit;
SELECT delivery_id AS d1, event->>'event' AS transition FROM finalize_internal.claim_delivery() \gset
\echo :transition
-- Its acknowledgement and resolution wait behind it.
SELECT count(*) AS claimable_behind_it FROM finalize_internal.claim_delivery();
-- In one transaction: now() is the result's, however long the machine paused between statements.
BEGIN;
SELECT finalize_internal.delivery_result(:d1, false, 503, 'HTTP 503', NULL, false, 3) AS outcome;
SELECT attempts, state, last_status, next_attempt - now() BETWEEN interval '0.5 s' AND interval '1.1 s' AS backoff_1s
  FROM finalize.alert_delivery WHERE delivery_id = :d1;
COMMIT;
UPDATE finalize.alert_delivery SET next_attempt = now() WHERE delivery_id = :d1;
SELECT delivery_id = :d1 AS same_delivery FROM finalize_internal.claim_delivery();
-- In one transaction: now() is the result's, however long the machine paused between statements.
BEGIN;
SELECT finalize_internal.delivery_result(:d1, false, 429, 'HTTP 429', 30, false, 3) AS outcome;
SELECT attempts, next_attempt - now() BETWEEN interval '29 s' AND interval '31 s' AS retry_after_honoured
  FROM finalize.alert_delivery WHERE delivery_id = :d1;
COMMIT;
UPDATE finalize.alert_delivery SET next_attempt = now() WHERE delivery_id = :d1;
SELECT delivery_id = :d1 AS same_delivery FROM finalize_internal.claim_delivery();
SELECT finalize_internal.delivery_result(:d1, false, NULL, 'Connection refused', NULL, false, 3) AS outcome;
SELECT attempts, state, last_status, last_error FROM finalize.alert_delivery WHERE delivery_id = :d1;
-- Settled, the acknowledgement goes; an answer no retry can change fails it at once.
SELECT delivery_id AS d2, event->>'event' AS transition FROM finalize_internal.claim_delivery() \gset
\echo :transition
SELECT finalize_internal.delivery_result(:d2, false, 400, 'HTTP 400: invalid event', NULL, true, 3) AS outcome;
SELECT attempts, state, last_error FROM finalize.alert_delivery WHERE delivery_id = :d2;
SELECT consecutive_failures, open_until IS NULL AS breaker_closed FROM finalize.alert_target_state;
-- The fifth failure in a row opens the breaker for 30 s: nothing of the
-- target is claimed while it is open; then one probe closes it.
SELECT finalize_internal.delivery_result(d.delivery_id, false, 500, 'HTTP 500', NULL, false, 10) AS outcome,
       d.event->>'event' AS transition
  FROM finalize_internal.claim_delivery() d;
SELECT consecutive_failures, open_until - now() BETWEEN interval '29 s' AND interval '31 s' AS breaker_open_30s
  FROM finalize.alert_target_state;
UPDATE finalize.alert_delivery SET next_attempt = now() WHERE state = 'pending';
SELECT count(*) AS claimable_while_open FROM finalize_internal.claim_delivery();
SELECT target, transition, breaker_open_until IS NOT NULL AS breaker_open FROM finalize.alert_deliveries WHERE state = 'pending';
UPDATE finalize.alert_target_state SET open_until = now();
SELECT finalize_internal.delivery_result(d.delivery_id, true, 200, NULL, NULL, false, 10) AS outcome FROM finalize_internal.claim_delivery() d;
SELECT consecutive_failures, open_until IS NULL AS breaker_closed, last_success IS NOT NULL AS succeeded
  FROM finalize.alert_target_state;
SELECT transition, state, attempts, last_status FROM finalize.alert_deliveries WHERE alert_id = :crit ORDER BY delivery_id;
SELECT finalize_internal.next_delivery() AS next_due;

-- A release the gate refuses is an informational incident of its
-- partition; the next released generation resolves it.
CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
SELECT finalize.track_table('ad.orders', 'erp', 'dbo.orders') AS orders_id \gset
INSERT INTO finalize.release (table_id, partition, generation, store, prefix, released, problems, report, requested_by)
VALUES (:orders_id, 'dt=2026-11-29', 'g1', 'file:///lake', 'orders/dt=2026-11-29/g1/', false,
        '[{"code": "missing_object", "path": "a"}, {"code": "missing_object", "path": "b"}, {"code": "not_finalized"}]',
        '{}', current_user);
SELECT kind, severity, table_name, subject, state, message, detail->>'generation' AS generation
  FROM finalize.alerts WHERE kind = 'release_rejected';
-- Late rows in that period called for a correction (an event-time table's
-- late_data incident, subject the period): releasing it resolves that too.
SELECT finalize_internal.raise_alert('late_data', 'warning', :orders_id, 'erp', finalize_internal.utc_iso('2026-11-29 00:00+00'),
                             '2 late row(s) landed in event period 2026-11-29T00:00:00Z') > 0 AS late;
SELECT finalize_internal.raise_alert('late_data', 'warning', :orders_id, 'erp', finalize_internal.utc_iso('2026-11-30 00:00+00'),
                             '1 late row(s) landed in event period 2026-11-30T00:00:00Z') > 0 AS late;
INSERT INTO finalize.release (table_id, partition, generation, store, prefix, released, period_start, problems,
                              report, requested_by)
VALUES (:orders_id, 'dt=2026-11-29', 'g2', 'file:///lake', 'orders/dt=2026-11-29/g2/', true, '2026-11-29 00:00+00',
        '[]', '{}', current_user);
SELECT kind, subject, state FROM finalize.alerts WHERE kind IN ('release_rejected', 'late_data') ORDER BY alert_id;

-- Freshness: an SLA per table; a table without a verdict lags from when
-- it was tracked. Incidents open over it and resolve back within it.
\set VERBOSITY default
SELECT finalize.alter_tracked_table('ad.orders', max_lag => '-1 hour');
SELECT finalize.alter_tracked_table('ad.orders', max_lag => '1 mon');
\set VERBOSITY terse
SELECT finalize.alter_tracked_table('ad.orders', max_lag => '1 day 2 hours');
SELECT max_lag FROM finalize.tracked_table WHERE table_id = :orders_id;
SELECT finalize_internal.check_freshness() AS over_sla;
UPDATE finalize.tracked_table SET created_at = now() - interval '30 hours' WHERE table_id = :orders_id;
SELECT finalize_internal.check_freshness() AS over_sla;
SELECT finalize_internal.check_freshness() AS over_sla;
SELECT kind, severity, table_name, state, count,
       message ~ '^Table "ad\.orders" has no verdict 30:00:0\d after it was tracked; its freshness SLA \(max_lag\) is 26:00:00\.$' AS says_why
  FROM finalize.alerts WHERE kind = 'freshness' AND table_name IS NOT NULL;
SELECT finalize.record_range('ad.orders', NULL, '0x00000000000000000100', now() - interval '1 hour') IS NOT NULL AS recorded;
SELECT finalize_internal.check_freshness() AS over_sla;
SELECT kind, state FROM finalize.alerts WHERE kind = 'freshness' AND table_name IS NOT NULL;
SELECT finalize.alter_tracked_table('ad.orders', max_lag => '1 minute');
SELECT finalize_internal.check_freshness() AS over_sla;
SELECT state, message ~ '^Table "ad.orders" is final only until' AS says_until FROM finalize.alerts
 WHERE kind = 'freshness' AND table_name IS NOT NULL ORDER BY alert_id;
SELECT finalize.alter_tracked_table('ad.orders', max_lag => '0');
SELECT finalize_internal.check_freshness() AS over_sla;
SELECT max_lag, (SELECT count(*) FROM finalize.alerts WHERE kind = 'freshness' AND state = 'open') AS open
  FROM finalize.tracked_table WHERE table_id = :orders_id;

-- Readers see deliveries; the queue and the breakers are admins'.
SELECT has_table_privilege('finalize_reader', 'finalize.alert_deliveries', 'SELECT') AS reader_sees_deliveries,
       has_table_privilege('finalize_reader', 'finalize.alert_delivery', 'SELECT') AS reader_reads_queue,
       has_table_privilege('finalize_admin', 'finalize.alert_target_state', 'SELECT') AS admin_reads_breakers,
       has_function_privilege('finalize_admin', 'finalize_internal.alert_request(text, text, jsonb, jsonb)', 'EXECUTE') AS admin_builds_requests,
       has_foreign_data_wrapper_privilege('finalize_admin', 'finalize_webhook', 'USAGE') AS admin_creates_targets;

-- A receiver's answer may quote what it was sent: readers see the status, not the text.
SET ROLE finalize_reader;
SELECT count(*) > 0 AS reader_sees_deliveries, bool_and(last_error IS NULL) AS without_error_texts
  FROM finalize.alert_deliveries;
RESET ROLE;
SELECT count(last_error) > 0 AS admins_see_error_texts FROM finalize.alert_deliveries;
SELECT finalize.untrack_table('ad.orders', keep_facts => false);
DELETE FROM finalize.alert;
DELETE FROM finalize.alert_target_state;
DROP SERVER erp CASCADE;
DROP SERVER hook_json, hook_slack, hook_pd CASCADE;
