-- The durable alert log (docs/design/alerts.md): an incident per
-- condition, deduplicated while open, resolved when it clears, acknowledged
-- by a person. The worker's hooks raise them (issue 15); here the internal
-- functions are called as the worker would.
\i sql/include/preamble.sql

-- Earlier tests raised incidents through the worker's functions (data
-- losses, stalled consumers): start from none.
SELECT count(*) > 0 AS earlier_tests_raised_some FROM finalize.alert;
DELETE FROM finalize.alert;
ALTER SEQUENCE finalize.alert_alert_id_seq RESTART;
CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
SELECT finalize.track_table('al.orders', 'erp', 'dbo.orders') > 0 AS tracked;

-- A condition that persists is one incident, counted.
SELECT finalize_internal.raise_alert('unreachable', 'critical', NULL, 'erp', '', 'Could not log in: 18456 Login failed for user ''cdc''.') AS first \gset
SELECT finalize_internal.raise_alert('unreachable', 'critical', NULL, 'erp', '', 'Could not log in: 20009 unreachable.') = :first AS same_incident;
SELECT finalize_internal.raise_alert('read_failed', 'critical', finalize_internal.tracked_id('al.orders'), 'erp', '', 'Msg 229: SELECT denied.') <> :first AS another_incident;
SELECT kind, severity, table_name, server_name, state, count, message FROM finalize.alerts ORDER BY alert_id;

-- Cleared: resolved, with the time; raised again later: a new incident.
SELECT finalize_internal.resolve_alerts('unreachable', NULL, 'erp') AS resolved;
SELECT finalize_internal.resolve_alerts('unreachable', NULL, 'erp') AS resolved_again;
SELECT state, resolved_at IS NOT NULL AS has_resolved_at FROM finalize.alerts WHERE kind = 'unreachable';
SELECT finalize_internal.raise_alert('unreachable', 'critical', NULL, 'erp', '', 'Could not log in again.') > (SELECT min(alert_id) FROM finalize.alert) AS reopened_as_new;
SELECT state, count FROM finalize.alerts WHERE kind = 'unreachable' ORDER BY alert_id;

-- A person acknowledges an open incident; it stays acknowledged while it
-- goes on, and resolves when it clears.
\set VERBOSITY default
SELECT finalize.acknowledge_alert((SELECT alert_id FROM finalize.alerts WHERE kind = 'read_failed'), 'SQL Server grants fixed in OPS-42');
SELECT finalize_internal.raise_alert('read_failed', 'critical', finalize_internal.tracked_id('al.orders'), 'erp', '', 'Msg 229 again.') > 0 AS counted;
SELECT kind, state, count, acknowledged_by IS NOT NULL AS by_whom, acknowledge_note FROM finalize.alerts WHERE kind = 'read_failed';
SELECT finalize.acknowledge_alert((SELECT alert_id FROM finalize.alerts WHERE kind = 'read_failed'), '   ');
SELECT finalize.acknowledge_alert(999, 'no such incident');
\set VERBOSITY terse
SELECT finalize.acknowledge_alert((SELECT min(alert_id) FROM finalize.alerts WHERE kind = 'unreachable'), 'already resolved');
SELECT finalize_internal.resolve_alerts('read_failed', finalize_internal.tracked_id('al.orders'), 'erp') AS resolved;
-- Unknown kinds and severities are refused: the list is the contract.
SELECT finalize_internal.raise_alert('bored', 'critical', NULL, 'erp', '', 'x');

-- Untracking keeps the incident and its table's name.
SELECT finalize.untrack_table('al.orders', keep_facts => false);
SELECT table_name, state FROM finalize.alerts WHERE kind = 'read_failed';
-- A table's condition opens an incident once it lasted
-- finalize.alert_after (5 minutes), and clearing it resolves it; a
-- source's likewise, except conditions that make SQL Server's times
-- untrusted, which open one at once.
SELECT finalize.track_table('al.lines', 'erp', 'dbo.lines') AS lines_id \gset
SELECT finalize_internal.set_condition(:lines_id, 'read_failed', 'Msg 229, Level 14: The SELECT permission was denied.');
SELECT count(*) AS incidents_at_once FROM finalize.alerts WHERE kind = 'read_failed' AND state = 'open';
UPDATE finalize.table_condition SET since = now() - interval '6 minutes' WHERE table_id = :lines_id;
SELECT finalize_internal.set_condition(:lines_id, 'read_failed', 'Msg 229, Level 14: The SELECT permission was denied (again).');
SELECT kind, severity, table_name, state, message FROM finalize.alerts WHERE kind = 'read_failed' AND state = 'open';
SELECT finalize_internal.set_condition(:lines_id, NULL, NULL);
SELECT kind, state FROM finalize.alerts WHERE table_name = 'al.lines';
SELECT finalize_internal.source_failed('erp', NULL, 'clock_skew', 'SQL Server''s clock is ahead.', now());
SELECT kind, severity, server_name, state FROM finalize.alerts WHERE kind = 'clock_skew';
-- A worker that is not running says nothing about SQL Server: the incident stays.
SELECT finalize_internal.source_failed('erp', NULL, 'no_worker', 'The worker is not running.', now());
SELECT kind, state FROM finalize.alerts WHERE kind = 'clock_skew';
SELECT finalize_internal.source_ok('erp', NULL, '0x00000000000000000100', now(), now());
SELECT kind, state FROM finalize.alerts WHERE kind = 'clock_skew';
SELECT finalize.untrack_table('al.lines', keep_facts => false);

-- A schema change the verdict went on across is an informational
-- incident, born resolved.
SELECT finalize.track_table('al.ddl', 'erp', 'dbo.orders') > 0 AS tracked;
SELECT finalize.record_range('al.ddl', NULL, '0x00000000000000000100', '2026-11-29 09:00+00') IS NOT NULL AS baseline_recorded;
SELECT finalize.record_range('al.ddl', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 09:10+00',
                             event => 'schema_change',
                             detail => '{"summary": "ALTER TABLE dbo.orders ADD note nvarchar(10) (capture instance \"dbo_orders\")"}')
       IS NOT NULL AS recorded;
SELECT kind, severity, table_name, state, message FROM finalize.alerts WHERE kind = 'schema_change';
SELECT finalize.untrack_table('al.ddl', keep_facts => false);

-- Retention removes resolved incidents, not open ones.
SELECT finalize_internal.raise_alert('freshness', 'warning', NULL, 'erp', '', 'still behind') > 0 AS opened;
SELECT finalize.purge_facts('0') >= 0 AS purged;
SELECT kind, state FROM finalize.alerts ORDER BY alert_id;
DELETE FROM finalize.alert;
DROP SERVER erp CASCADE;
