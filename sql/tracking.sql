-- Registering tracked tables: every argument is validated and named.
\i sql/include/preamble.sql

CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
CREATE SERVER erp_nodb FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1');
CREATE FOREIGN DATA WRAPPER other_wrapper;
CREATE SERVER not_mssql FOREIGN DATA WRAPPER other_wrapper;

SELECT finalize.track_table('sales.orders', 'erp', 'dbo.orders') AS table_id;
SELECT finalize.track_table('sales.order_lines', 'erp', '[sales data].[order]]lines]', '15 minutes') > 0 AS tracked;
SELECT table_name, server_name, source_schema, source_name, granularity, state, untracked_at
  FROM finalize.tracked_table ORDER BY table_id;
-- Each tracked table starts with an empty verdict.
SELECT t.table_name, w.finalized_until, w.offset_lsn
  FROM finalize.tracked_table t JOIN finalize.watermark w USING (table_id) ORDER BY table_id;

-- Names are unique among tracked tables.
SELECT finalize.track_table('sales.orders', 'erp', 'dbo.orders');

-- Missing and empty arguments.
SELECT finalize.track_table(NULL, 'erp', 'dbo.orders');
SELECT finalize.track_table('  ', 'erp', 'dbo.orders');
SELECT finalize.track_table(repeat('x', 256), 'erp', 'dbo.orders');
SELECT finalize.track_table('t', NULL, 'dbo.orders');
SELECT finalize.track_table('t', 'erp', NULL);
SELECT finalize.track_table('t', 'erp', 'dbo.orders', NULL);

-- Servers: unknown, of another wrapper, or incomplete.
SELECT finalize.track_table('t', 'nosuch', 'dbo.orders');
SELECT finalize.track_table('t', 'not_mssql', 'dbo.orders');
SELECT finalize.track_table('t', 'erp_nodb', 'dbo.orders');

-- Source tables are schema.table, with brackets or double quotes for awkward names.
SELECT finalize.track_table('t', 'erp', 'orders');
SELECT finalize.track_table('t', 'erp', 'demo.dbo.orders');
SELECT finalize.track_table('t', 'erp', 'dbo.order lines');
SELECT finalize.track_table('t', 'erp', '[dbo.orders');
SELECT finalize.track_table('t', 'erp', 'dbo.[]');
SELECT finalize.track_table('t', 'erp', 'dbo.');
SELECT finalize.track_table('t', 'erp', '.orders');
SELECT finalize.track_table('t', 'erp', 'dbo.' || repeat('x', 129));
SELECT finalize_internal.split_mssql_name(n, 'source_table')
  FROM unnest(ARRAY['dbo.orders', '[dbo].[orders]', '"dbo"."or""ders"', '[a.b]]c].[ ü ]',
                    'Sales.Bestellungen_2026', 'dbo.' || repeat('y', 128)]) AS n;

-- Identifiers are quoted for T-SQL with brackets, ] doubled.
SELECT finalize.quote_mssql_ident(i)
  FROM unnest(ARRAY['orders', 'order lines', 'a]b', ']]', 'x''; DROP TABLE t; --']) AS i;

-- Granularity: a positive length, or calendar months that tile a year
-- (alone: a month and a day is no period).
SELECT finalize.track_table('t', 'erp', 'dbo.orders', '5 months');
SELECT finalize.track_table('t', 'erp', 'dbo.orders', '1 month 1 day');
SELECT finalize.track_table('t', 'erp', 'dbo.orders', '-1 month');
SELECT finalize.track_table('t', 'erp', 'dbo.orders', '0');
SELECT finalize.track_table('t', 'erp', 'dbo.orders', '-1 hour');
SELECT finalize.track_table('t', 'erp', 'dbo.orders', '1 day -25 hours');
-- Lengths whose microseconds overflow 64 bits define no periods.
SELECT finalize.track_table('t', 'erp', 'dbo.orders', '1000000000 days');
SELECT finalize.track_table('t', 'erp', 'dbo.orders', '2147483647 days 23:59:59');
SELECT finalize.track_table('t_daily', 'erp', 'dbo.orders', '1 day') > 0 AS tracked;
-- The table checks the same C rule (_granularity_valid, its CHECK): both
-- answer alike, including lengths that overflow.
CREATE FUNCTION pg_temp.accepted(g interval) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM finalize_internal.check_granularity(g, 'granularity');
    RETURN true;
EXCEPTION WHEN invalid_parameter_value OR datetime_field_overflow THEN
    RETURN false;
END
$$;
SELECT g AS granularity, finalize_internal.granularity_valid(g) AS table_check, pg_temp.accepted(g) AS functions
  FROM unnest(ARRAY['15 minutes', '1 day', '1 day -23 hours', '00:00:00.000001', '106751991 days',
                    '0', '-1 hour', '1 day -24 hours', '1 mon', '3 mons', '1 year', '2 years', '5 mons',
                    '1 mon 1 day', '1 year -365 days', '1000000000 days',
                    '2147483647 days 23:59:59']::interval[]) AS g;
SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'tracked_table_granularity_check';
\set VERBOSITY terse
UPDATE finalize.tracked_table SET granularity = '1000000000 days' WHERE table_name = 't_daily';
UPDATE finalize.tracked_table SET granularity = '7 mons' WHERE table_name = 't_daily';
\set VERBOSITY default
SELECT granularity FROM finalize.tracked_table WHERE table_name = 't_daily';

-- Nothing half-done was left by the failures.
SELECT count(*) AS tracked_tables, (SELECT count(*) FROM finalize.watermark) AS verdict_rows
  FROM finalize.tracked_table;

-- Untracking keeps the row (and facts) until retention; the name is free again.
SELECT finalize.untrack_table('t_daily');
SELECT table_name, untracked_at IS NOT NULL AS untracked FROM finalize.tracked_table WHERE table_name = 't_daily';
SELECT finalize.finalized_until('t_daily');
SELECT finalize.untrack_table('t_daily');
SELECT finalize.track_table('t_daily', 'erp', 'dbo.orders', '1 day') > 0 AS tracked_again;
SELECT table_name, count(*) AS rows, count(*) FILTER (WHERE untracked_at IS NULL) AS active
  FROM finalize.tracked_table WHERE table_name = 't_daily' GROUP BY table_name;
-- keep_facts => false removes the table at once.
SELECT finalize.untrack_table('t_daily', keep_facts => false);
SELECT count(*) FILTER (WHERE untracked_at IS NULL) AS active, count(*) AS rows
  FROM finalize.tracked_table WHERE table_name = 't_daily';
SELECT finalize.untrack_table(NULL);
SELECT finalize.untrack_table('never_tracked');

-- Policies: DDL warns or blocks; a data loss stops or resumes by itself.
SELECT finalize.track_table('t_pol', 'erp', 'dbo.orders', ddl_policy => 'block', on_data_loss => 'resume') > 0 AS tracked;
SELECT finalize.track_table('t_bad', 'erp', 'dbo.orders', ddl_policy => 'ignore');
SELECT finalize.track_table('t_bad', 'erp', 'dbo.orders', on_data_loss => 'skip');
SELECT finalize.track_table('t_bad', 'erp', 'dbo.orders', start_from => 'yesterday');
SELECT finalize.track_table('t_bad', 'erp', 'dbo.orders', start_from => '0x0000002D00000E58');
-- An LSN in Debezium's form is stored in finalize's.
SELECT finalize.track_table('t_lsn', 'erp', 'dbo.orders', start_from => '0000002d:00000e58:0003') > 0 AS tracked;
SELECT start_from FROM finalize.tracked_table WHERE table_name = 't_lsn';
SELECT finalize.untrack_table('t_lsn', keep_facts => false);
SELECT table_name, ddl_policy, on_data_loss, start_from FROM finalize.tracked_table
 WHERE table_name IN ('t_pol', 'sales.orders') ORDER BY table_name;
SELECT finalize.alter_tracked_table('t_pol', ddl_policy => 'warn');
SELECT finalize.alter_tracked_table('t_pol', granularity => '1 day', on_data_loss => 'stop');
SELECT finalize.alter_tracked_table('t_pol', granularity => '1 mon 2 hours');
SELECT finalize.alter_tracked_table('t_pol', granularity => '2147483647 days 23:59:59');
SELECT finalize.alter_tracked_table('t_nosuch', ddl_policy => 'warn');
SELECT table_name, granularity, ddl_policy, on_data_loss FROM finalize.tracked_table WHERE table_name = 't_pol';

-- resume_table: an active table has nothing to resume.
SELECT finalize.resume_table('t_pol');
-- After a data loss the worker restarts the table; resume only asks it to.
UPDATE finalize.tracked_table SET state = 'data_lost', state_detail = 'lost' WHERE table_name = 't_pol';
SELECT finalize.resume_table('t_pol');
SELECT state, state_detail LIKE current_user || ' asked to resume at %' AS explained FROM finalize.tracked_table WHERE table_name = 't_pol';
SELECT event, detail - 'by' AS detail, detail ->> 'by' = current_user AS by_current_user
  FROM finalize.facts WHERE table_name = 't_pol' ORDER BY fact_id;
-- After a blocking schema change, the DDL counts as reviewed.
UPDATE finalize.tracked_table SET state = 'schema_blocked' WHERE table_name = 't_pol';
INSERT INTO finalize.fact (table_id, kind, event, start_lsn, end_lsn, capture_instance, detail)
SELECT table_id, 'event', 'schema_blocked', '0x00000000000000000100', '0x00000000000000000180', 'dbo_orders',
       '{"ddl_lsn": "0x00000000000000000180", "ddl_command": "ALTER TABLE dbo.orders ADD note int"}'
  FROM finalize.tracked_table WHERE table_name = 't_pol';
SELECT finalize.resume_table('t_pol');
SELECT t.state, w.schema_ack_lsn FROM finalize.tracked_table t JOIN finalize.watermark w USING (table_id)
 WHERE t.table_name = 't_pol';
SELECT event, detail - 'by' AS detail, detail ->> 'by' = current_user AS by_current_user
  FROM finalize.facts WHERE table_name = 't_pol' AND event = 'resumed';
UPDATE finalize.tracked_table SET state = 'paused' WHERE table_name = 't_pol';
SELECT finalize.resume_table('t_pol');
SELECT finalize.resume_table('t_nosuch');
SELECT finalize.untrack_table('t_pol', false);

SELECT finalize.untrack_table('sales.orders', false);
SELECT finalize.untrack_table('sales.order_lines', false);
DROP SERVER erp, erp_nodb, not_mssql;
DROP FOREIGN DATA WRAPPER other_wrapper;
