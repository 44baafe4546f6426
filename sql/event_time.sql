-- Event-time partitions (docs/design/event_time.md): the settings of a
-- table partitioned by a time in its rows, its verdict drawn from the
-- commit-time verdict and a lateness allowance, and late data counted
-- exactly per event period. The worker's facts are given by hand here
-- (record_range with event_periods); test_event_time.py drives the worker.
\i sql/include/preamble.sql

CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');

-- Settings are checked, with errors that say what to pass.
\set VERBOSITY default
SELECT finalize.track_table('ev.bad', 'erp', 'dbo.orders', allowed_lateness => '5 minutes');
SELECT finalize.track_table('ev.bad', 'erp', 'dbo.orders', event_time_column => 'created_at',
                            event_time_zone => 'Mars/Olympus');
SELECT finalize.track_table('ev.bad', 'erp', 'dbo.orders', event_time_column => 'created_at',
                            lateness_policy => 'quantile');
SELECT finalize.track_table('ev.bad', 'erp', 'dbo.orders', event_time_column => 'created_at',
                            lateness_quantile => 0.99);
SELECT finalize.track_table('ev.bad', 'erp', 'dbo.orders', event_time_column => 'created_at',
                            lateness_policy => 'quantile', lateness_quantile => 1.5);
SELECT finalize.track_table('ev.bad', 'erp', 'dbo.orders', event_time_column => 'created_at',
                            allowed_lateness => '1 month');
SELECT finalize.track_table('ev.bad', 'erp', 'dbo.orders', event_time_column => 'created_at',
                            granularity => '7 hours');
SELECT finalize.track_table('ev.bad', 'erp', 'dbo.orders', event_time_column => E'created\nat');
\set VERBOSITY terse

-- An event-time table with 10 minutes of allowed lateness, next to a
-- commit-time one. Days are kept as hours, so sums are the same in any zone.
SELECT finalize.track_table('ev.orders', 'erp', 'dbo.orders', event_time_column => 'created_at',
                            allowed_lateness => '10 minutes', lateness_window => '2 days') > 0 AS tracked;
SELECT event_time_column, event_time_zone, lateness_policy, allowed_lateness, lateness_quantile, lateness_window
  FROM finalize.tracked_table WHERE table_name = 'ev.orders';

-- The verdict is in any session zone the same: set an odd one.
SET TimeZone = 'America/St_Johns';
SELECT finalize.record_range('ev.orders', NULL, '0x00000000000000000100', '2026-11-29 09:00+00');
-- Commits up to 12:05 with events in hours 10 and 11: the commit-time
-- verdict is 12:00, minus 10 minutes of lateness is 11:50, so event hour 10
-- is final and 11 is not.
SELECT finalize.record_range('ev.orders', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 12:05+00',
                             5, 1, 0, '2026-11-29 10:10+00', '2026-11-29 12:01+00',
                             event_periods => '[{"period": "2026-11-29T10:00:00Z", "inserts": 3},
                                                {"period": "2026-11-29T11:00:00Z", "inserts": 2, "updates": 1}]',
                             first_event_time => '2026-11-29 10:05+00', last_event_time => '2026-11-29 11:59+00');
SELECT finalized_until AT TIME ZONE 'UTC' AS event_until, commit_until AT TIME ZONE 'UTC' AS commit_until,
       event_allowance
  FROM finalize.watermark w JOIN finalize.tracked_table t USING (table_id) WHERE t.table_name = 'ev.orders';
SELECT finalize.is_final('ev.orders', '2026-11-29 10:00+00') AS h10, finalize.is_final('ev.orders', '2026-11-29 11:00+00') AS h11;
SELECT reason FROM finalize.explain_verdict('ev.orders', '2026-11-29 11:00+00');
SELECT reason FROM finalize.explain_verdict('ev.orders', '2026-11-29 10:00+00');

-- A row with an event in hour 10, committed after hour 10 was final, is
-- late: counted per period, recorded as an event, alerted once per
-- finalize.late_data_alert_interval. A row for hour 11 is not late yet.
SELECT finalize.record_range('ev.orders', '0x00000000000000000200', '0x00000000000000000300', '2026-11-29 13:10+00',
                             2, 0, 1, '2026-11-29 13:01+00', '2026-11-29 13:02+00',
                             event_periods => '[{"period": "2026-11-29T10:30:00Z", "inserts": 1, "deletes": 1},
                                                {"period": "2026-11-29T11:00:00Z", "inserts": 1}]',
                             first_event_time => '2026-11-29 10:30+00', last_event_time => '2026-11-29 11:58+00');
SELECT table_name, event_period AT TIME ZONE 'UTC' AS event_period, period_end AT TIME ZONE 'UTC' AS period_end,
       rows, verdict_at_arrival AT TIME ZONE 'UTC' AS verdict_at_arrival, alerted_at IS NOT NULL AS alerted
  FROM finalize.late_data;
SELECT event, detail - 'range_fact_id' AS detail FROM finalize.fact WHERE event = 'late_data';
SELECT late_rows FROM finalize.fact WHERE table_id = (SELECT table_id FROM finalize.tracked_table WHERE table_name = 'ev.orders')
   AND kind = 'range' ORDER BY fact_id;
-- Hour 10 again later: counted, not alerted again within the interval.
SELECT finalize.record_range('ev.orders', '0x00000000000000000300', '0x00000000000000000400', '2026-11-29 13:20+00',
                             1, 0, 0, '2026-11-29 13:15+00', '2026-11-29 13:15+00',
                             event_periods => '[{"period": "2026-11-29T10:59:59Z", "inserts": 1}]',
                             first_event_time => '2026-11-29 10:59:59+00', last_event_time => '2026-11-29 10:59:59+00');
SELECT event_period AT TIME ZONE 'UTC' AS event_period, rows FROM finalize.late_data ORDER BY 1;
SELECT period_start AT TIME ZONE 'UTC' AS period_start, is_final, covered, inserts, updates, deletes, late_rows, exact
  FROM finalize.changes_by_event_period('ev.orders', '2026-11-29 10:00+00', '2026-11-29 13:00+00');
SELECT late_rows FROM finalize.status WHERE table_name = 'ev.orders';

-- Facts with event data only for event-time tables; spans in order.
SELECT finalize.track_table('ct.orders', 'erp', 'dbo.orders') > 0 AS tracked;
SELECT finalize.record_range('ct.orders', NULL, '0x00000000000000000100', '2026-11-29 09:00+00');
SELECT finalize.record_range('ct.orders', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 12:05+00',
                             1, 0, 0, '2026-11-29 10:10+00', '2026-11-29 10:10+00', event_periods => '[]');
SELECT finalize.record_range('ev.orders', '0x00000000000000000400', '0x00000000000000000500', '2026-11-29 13:30+00',
                             1, 0, 0, '2026-11-29 13:25+00', '2026-11-29 13:25+00', event_periods => '{}');
SELECT finalize.record_range('ev.orders', '0x00000000000000000400', '0x00000000000000000500', '2026-11-29 13:30+00',
                             1, 0, 0, '2026-11-29 13:25+00', '2026-11-29 13:25+00',
                             first_event_time => '2026-11-29 13:25+00', last_event_time => '2026-11-29 13:20+00');
-- The event-time facts must count the range's rows: rows per event period
-- that add up to other counts, or none for a range with rows, would tell
-- the event-time verdict and the late-data counts another story.
SELECT finalize.record_range('ev.orders', '0x00000000000000000400', '0x00000000000000000500', '2026-11-29 13:30+00',
                             2, 0, 0, '2026-11-29 13:25+00', '2026-11-29 13:25+00',
                             event_periods => '[{"period": "2026-11-29T13:00:00Z", "inserts": 0}]');
SELECT finalize.record_range('ev.orders', '0x00000000000000000400', '0x00000000000000000500', '2026-11-29 13:30+00',
                             3, 0, 0, '2026-11-29 13:25+00', '2026-11-29 13:25+00');
SELECT finalize.record_range('ev.orders', '0x00000000000000000400', '0x00000000000000000500', '2026-11-29 13:30+00',
                             1, 1, 0, '2026-11-29 13:25+00', '2026-11-29 13:25+00',
                             event_periods => '[{"period": "2026-11-29T13:00:00Z", "inserts": 2, "updates": -1}]');
SELECT finalize.record_range('ev.orders', '0x00000000000000000400', '0x00000000000000000500', '2026-11-29 13:30+00',
                             0, 0, 0, NULL, NULL,
                             event_periods => '[{"period": "2026-11-29T13:00:00Z", "inserts": 5}]');
SELECT finalize.changes_by_event_period('ct.orders', '2026-11-29 10:00+00', '2026-11-29 11:00+00');

-- The event column cannot change once there is a verdict; the policy can,
-- and a stricter one never takes back what was final.
SELECT finalize.alter_tracked_table('ev.orders', event_time_column => 'order_date');
SELECT finalize.alter_tracked_table('ct.orders', allowed_lateness => '1 hour');
SELECT finalize.alter_tracked_table('ev.orders', allowed_lateness => '3 hours');
SELECT finalize.record_range('ev.orders', '0x00000000000000000400', '0x00000000000000000500', '2026-11-29 14:10+00');
SELECT finalized_until AT TIME ZONE 'UTC' AS event_until, commit_until AT TIME ZONE 'UTC' AS commit_until, event_allowance
  FROM finalize.watermark w JOIN finalize.tracked_table t USING (table_id) WHERE t.table_name = 'ev.orders';
SELECT finalize.alter_tracked_table('ev.orders', lateness_policy => 'quantile', lateness_quantile => 0.999);
SELECT lateness_policy, lateness_quantile FROM finalize.tracked_table WHERE table_name = 'ev.orders';
SELECT finalize.alter_tracked_table('ev.orders', lateness_policy => 'exact');
SELECT lateness_policy, lateness_quantile FROM finalize.tracked_table WHERE table_name = 'ev.orders';
-- No sketches recorded (the worker records them): no observed lateness.
SELECT lateness, rows FROM finalize.lateness('ev.orders');
SELECT finalize.lateness('ct.orders');
-- A sketch that is not one is refused by name.
SELECT finalize_internal.sketch_rows('\x0102'::bytea);

-- The event-time bound is C period arithmetic: the same in every zone.
SELECT finalize_internal.event_bound('2026-11-29 12:00+00', '10 minutes', '1 hour', 'UTC') AT TIME ZONE 'UTC' AS b1,
       finalize_internal.event_bound('2026-11-29 12:00+00', '0', '1 hour', 'UTC') AT TIME ZONE 'UTC' AS b2,
       finalize_internal.event_bound('2026-11-29 12:00+00', '1 day', '1 day', 'UTC') AT TIME ZONE 'UTC' AS b3,
       finalize_internal.event_bound('infinity', '0', '1 hour', 'UTC') AS b4,
       finalize_internal.event_bound('2026-11-29 12:00+00', '0', '1 day', 'Asia/Seoul') AT TIME ZONE 'UTC' AS b5;
SET TimeZone = 'UTC';

-- The granularity of an event-time table with facts cannot change (its
-- facts count in the periods they were recorded with); a granularity that
-- is not whole seconds is refused.
SELECT finalize.alter_tracked_table('ev.orders', granularity => '15 minutes');
SELECT finalize.track_table('ev.half', 'erp', 'dbo.orders', event_time_column => 'created_at',
                            granularity => '0.5 seconds');

-- Under policy quantile the allowance needs 1 / (1 - q) rows of observed
-- lateness in the window: without them the event-time verdict waits.
SELECT finalize.alter_tracked_table('ev.orders', lateness_policy => 'quantile', lateness_quantile => 0.99);
SELECT finalize.record_range('ev.orders', '0x00000000000000000500', '0x00000000000000000600', '2026-11-29 18:10+00');
SELECT finalized_until AT TIME ZONE 'UTC' AS event_until, commit_until AT TIME ZONE 'UTC' AS commit_until, event_allowance
  FROM finalize.watermark w JOIN finalize.tracked_table t USING (table_id) WHERE t.table_name = 'ev.orders';
SELECT reason FROM finalize.explain_verdict('ev.orders', '2026-11-29 12:00+00');
SELECT finalize.alter_tracked_table('ev.orders', lateness_policy => 'exact');

-- A loss on an event-time table holds event times: from its start less the
-- allowance (3 hours) to its end plus finalize.max_clock_skew (1 hour).
SELECT finalize_internal.record_loss(t.table_id, w, '0x00000000000000000700', '2026-11-29 19:30+00')
  FROM finalize.tracked_table t JOIN finalize.watermark w USING (table_id) WHERE t.table_name = 'ev.orders';
SELECT lost_from AT TIME ZONE 'UTC' AS lost_from, lost_to AT TIME ZONE 'UTC' AS lost_to FROM finalize.loss;
UPDATE finalize.watermark w SET offset_lsn = '0x00000000000000000700', offset_commit_time = '2026-11-29 19:30+00'
  FROM finalize.tracked_table t WHERE t.table_id = w.table_id AND t.table_name = 'ev.orders';
SELECT finalize.record_range('ev.orders', '0x00000000000000000700', '0x00000000000000000800', '2026-11-29 23:10+00');
SELECT finalize.finalized_until('ev.orders') AT TIME ZONE 'UTC' AS until,
       finalize.is_final('ev.orders', '2026-11-29 14:00+00') AS h14, finalize.is_final('ev.orders', '2026-11-29 15:00+00') AS h15,
       finalize.is_final('ev.orders', '2026-11-29 19:00+00') AS h19;
SELECT reason FROM finalize.explain_verdict('ev.orders', '2026-11-29 15:00+00');
-- An acknowledgement must cover the event periods the loss holds: 15:00
-- is one of them; once it is covered the verdict moves at once.
SELECT finalize.acknowledge_loss('ev.orders', '2026-11-29 16:00+00', '2026-11-29 21:00+00', 'rows of 16:00 to 21:00 re-snapshotted');
SELECT finalize.finalized_until('ev.orders') AT TIME ZONE 'UTC' AS until, finalize.is_final('ev.orders', '2026-11-29 15:00+00') AS h15;
SELECT finalize.acknowledge_loss('ev.orders', '2026-11-29 15:00+00', '2026-11-29 16:00+00', 'and 15:00');
SELECT finalize.finalized_until('ev.orders') AT TIME ZONE 'UTC' AS until, finalize.is_final('ev.orders', '2026-11-29 15:00+00') AS h15;

-- A loss on a table whose verdict waits (policy quantile without enough
-- observed rows) leaves it waiting: the loss caps a verdict, never makes one.
SELECT finalize.track_table('ev.q', 'erp', 'dbo.orders', event_time_column => 'created_at',
                            lateness_policy => 'quantile', lateness_quantile => 0.999) > 0 AS tracked;
SELECT finalize.record_range('ev.q', NULL, '0x00000000000000000100', '2026-11-29 09:00+00');
SELECT finalize.record_range('ev.q', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 10:05+00',
                             1, 0, 0, '2026-11-29 10:01+00', '2026-11-29 10:01+00',
                             event_periods => '[{"period": "2026-11-29T10:00:00Z", "inserts": 1}]');
SELECT finalize_internal.record_loss(t.table_id, w, '0x00000000000000000300', '2026-11-29 11:30+00')
  FROM finalize.tracked_table t JOIN finalize.watermark w USING (table_id) WHERE t.table_name = 'ev.q';
UPDATE finalize.watermark w SET offset_lsn = '0x00000000000000000300', offset_commit_time = '2026-11-29 11:30+00'
  FROM finalize.tracked_table t WHERE t.table_id = w.table_id AND t.table_name = 'ev.q';
SELECT finalize.record_range('ev.q', '0x00000000000000000300', '0x00000000000000000400', '2026-11-29 14:05+00');
SELECT finalize.finalized_until('ev.q') AS until, w.finalized_until, w.commit_until AT TIME ZONE 'UTC' AS commit_until
  FROM finalize.watermark w JOIN finalize.tracked_table t USING (table_id) WHERE t.table_name = 'ev.q';
-- When the allowance grows (here by hand: allowed_lateness from 0 to 2
-- hours), the loss reaches back from its commit-time start by the new
-- allowance: the lost rows may lie further back.
SELECT lost_from AT TIME ZONE 'UTC' AS lost_from, commit_from AT TIME ZONE 'UTC' AS commit_from FROM finalize.loss l
  JOIN finalize.tracked_table t USING (table_id) WHERE t.table_name = 'ev.q';
SELECT finalize.alter_tracked_table('ev.q', lateness_policy => 'exact', allowed_lateness => '2 hours');
SELECT finalize.record_range('ev.q', '0x00000000000000000400', '0x00000000000000000500', '2026-11-29 14:10+00');
SELECT lost_from AT TIME ZONE 'UTC' AS lost_from, commit_from AT TIME ZONE 'UTC' AS commit_from FROM finalize.loss l
  JOIN finalize.tracked_table t USING (table_id) WHERE t.table_name = 'ev.q';
SELECT finalize.finalized_until('ev.q') AT TIME ZONE 'UTC' AS until, finalize.is_final('ev.q', '2026-11-29 07:00+00') AS h07;
SELECT finalize.untrack_table('ev.q', keep_facts => false);

-- Later tests start from no tables and no server.
SELECT finalize.untrack_table('ev.orders', keep_facts => false);
SELECT finalize.untrack_table('ct.orders', keep_facts => false);
DROP SERVER erp CASCADE;
