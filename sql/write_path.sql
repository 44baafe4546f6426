-- The one write path: record_range records a range's facts and advances the
-- verdict with GREATEST(old, period_start(end_commit_time, granularity)).
\i sql/include/preamble.sql

CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
SELECT finalize.track_table('w.hourly', 'erp', 'dbo.orders') > 0 AS tracked;
CREATE VIEW verdict AS
    SELECT w.finalized_until, w.offset_lsn, w.offset_commit_time
      FROM finalize.watermark w JOIN finalize.tracked_table t USING (table_id)
     WHERE t.table_name = 'w.hourly' AND t.untracked_at IS NULL;

-- LSNs are 0x and 20 hex digits; the error names the argument.
SELECT finalize.record_range('w.hourly', NULL, '0x123', '2026-11-29 12:00+00');
SELECT finalize.record_range('w.hourly', NULL, '0000002D00000E5800030', '2026-11-29 12:00+00');
SELECT finalize.record_range('w.hourly', '0x0000002D00000E58000G', '0x0000002D00000E580004', '2026-11-29 12:00+00');
SELECT finalize.record_range('w.hourly', NULL, NULL, '2026-11-29 12:00+00');
SELECT finalize.record_range('w.hourly', NULL, '0x00000000000000000100', NULL);

-- The first range may omit its start: it marks where tracking begins, without rows.
SELECT finalize.record_range('w.hourly', NULL, '0x00000000000000000100', '2026-11-29 12:00+00', 3, 0, 0,
                             '2026-11-29 11:00+00', '2026-11-29 11:30+00');
SELECT finalize.record_range('w.hourly', NULL, '0x00000000000000000100', '2026-11-29 12:59:59.997+00');
SELECT * FROM verdict;
-- Repeating it changes nothing; another start-less range is refused.
SELECT finalize.record_range('w.hourly', NULL, '0x00000000000000000100', '2026-11-29 12:59:59.997+00');
SELECT finalize.record_range('w.hourly', NULL, '0x00000000000000000200', '2026-11-29 13:00+00');

-- Boundaries: commit time exactly on a period start finalizes the period before it.
SELECT finalize.record_range('w.hourly', '0x00000000000000000100', '0x00000000000000000200',
                             '2026-11-29 13:00:00+00', 2, 1, 0, '2026-11-29 12:59:59.990+00', '2026-11-29 13:00:00+00');
SELECT finalize.is_final('w.hourly', '2026-11-29 12:00+00') AS hour_12_final,
       finalize.is_final('w.hourly', '2026-11-29 13:00+00') AS hour_13_final;
-- One tick before the next boundary: no change.
SELECT finalize.record_range('w.hourly', '0x00000000000000000200', '0x00000000000000000300',
                             '2026-11-29 13:59:59.997+00', 10, 0, 0, '2026-11-29 13:10+00', '2026-11-29 13:59:59.997+00');
SELECT finalize.is_final('w.hourly', '2026-11-29 13:00+00') AS hour_13_final;
-- One tick after it: hour 13 is final.
SELECT finalize.record_range('w.hourly', '0x00000000000000000300', '0x0000000000000000030A',
                             '2026-11-29 14:00:00.003+00');
SELECT * FROM verdict;
SELECT finalize.is_final('w.hourly', '2026-11-29 13:59:59.999999+00') AS hour_13_final,
       finalize.is_final('w.hourly', '2026-11-29 14:00+00') AS hour_14_final;

-- Monotonic: a later range whose commit time is earlier (server clock set
-- back, DST fall-back mapped to the earlier instant) never moves it back.
SELECT finalize.record_range('w.hourly', '0x0000000000000000030A', '0x00000000000000000400',
                             '2026-11-29 13:30+00', 0, 0, 1, '2026-11-29 13:29+00', '2026-11-29 13:30+00');
SELECT * FROM verdict;

-- Ranges chain: no gaps, no overlaps, no reversed ranges.
SELECT finalize.record_range('w.hourly', '0x00000000000000000500', '0x00000000000000000600', '2026-11-29 15:00+00');
SELECT finalize.record_range('w.hourly', '0x00000000000000000350', '0x00000000000000000450', '2026-11-29 15:00+00');
SELECT finalize.record_range('w.hourly', '0x00000000000000000400', '0x00000000000000000400', '2026-11-29 15:00+00');
SELECT finalize.record_range('w.hourly', '0x00000000000000000400', '0x000000000000000003FF', '2026-11-29 15:00+00');

-- Re-recording a recorded range unchanged is a no-op; with other counts it is refused.
SELECT finalize.record_range('w.hourly', '0x00000000000000000100', '0x00000000000000000200',
                             '2026-11-29 13:00:00+00', 2, 1, 0, '2026-11-29 12:59:59.990+00', '2026-11-29 13:00:00+00');
SELECT finalize.record_range('w.hourly', '0x00000000000000000100', '0x00000000000000000200',
                             '2026-11-29 13:00:00+00', 2, 2, 0, '2026-11-29 12:59:59.990+00', '2026-11-29 13:00:00+00');
SELECT finalize.record_range('w.hourly', '0x00000000000000000150', '0x00000000000000000200', '2026-11-29 13:00:00+00');
SELECT * FROM verdict;
SELECT count(*) AS facts FROM finalize.fact f JOIN finalize.tracked_table t USING (table_id) WHERE t.table_name = 'w.hourly';

-- Consecutive empty ranges coalesce into one fact.
SELECT finalize.record_range('w.hourly', '0x00000000000000000400', '0x00000000000000000410', '2026-11-29 14:05+00');
SELECT finalize.record_range('w.hourly', '0x00000000000000000410', '0x00000000000000000420', '2026-11-29 14:10+00');
SELECT finalize.record_range('w.hourly', '0x00000000000000000420', '0x00000000000000000430', '2026-11-29 15:00:01+00');
SELECT start_lsn, end_lsn, end_commit_time, ranges FROM finalize.facts
 WHERE table_name = 'w.hourly' AND start_lsn >= '0x00000000000000000400' ORDER BY end_lsn;
-- A range repeated after it was coalesced is still a no-op.
SELECT finalize.record_range('w.hourly', '0x00000000000000000410', '0x00000000000000000420', '2026-11-29 14:10+00');
-- Rows, an event or another capture instance start a new fact.
SELECT finalize.record_range('w.hourly', '0x00000000000000000430', '0x00000000000000000440',
                             '2026-11-29 15:01+00', 1, 0, 0, '2026-11-29 15:00:30+00', '2026-11-29 15:00:30+00');
SELECT finalize.record_range('w.hourly', '0x00000000000000000440', '0x00000000000000000450', '2026-11-29 15:02+00');
SELECT finalize.record_range('w.hourly', '0x00000000000000000450', '0x00000000000000000460', '2026-11-29 15:03+00',
                             capture_instance => 'dbo_orders_v2', event => 'instance_switch',
                             detail => '{"from": "dbo_orders", "to": "dbo_orders_v2"}');
SELECT finalize.record_range('w.hourly', '0x00000000000000000460', '0x00000000000000000470', '2026-11-29 15:04+00',
                             capture_instance => 'dbo_orders_v2');
SELECT finalize.record_range('w.hourly', '0x00000000000000000470', '0x00000000000000000480', '2026-11-29 15:05+00',
                             capture_instance => 'dbo_orders_v2');
SELECT start_lsn, end_lsn, inserts, capture_instance, event, detail, ranges FROM finalize.facts
 WHERE table_name = 'w.hourly' AND start_lsn >= '0x00000000000000000430' ORDER BY end_lsn;

-- Lower-case LSN input is stored upper-case.
SELECT finalize.record_range('w.hourly', '0x00000000000000000480', '0x000000000000000004ff', '2026-11-29 15:06+00');
SELECT offset_lsn FROM verdict;

-- Bad counts, spans and events.
SELECT finalize.record_range('w.hourly', '0x000000000000000004FF', '0x00000000000000000500', '2026-11-29 15:07+00', -1, 0, 0);
SELECT finalize.record_range('w.hourly', '0x000000000000000004FF', '0x00000000000000000500', '2026-11-29 15:07+00', 1, 0, 0);
SELECT finalize.record_range('w.hourly', '0x000000000000000004FF', '0x00000000000000000500', '2026-11-29 15:07+00',
                             1, 0, 0, '2026-11-29 15:06+00', '2026-11-29 15:05+00');
SELECT finalize.record_range('w.hourly', '0x000000000000000004FF', '0x00000000000000000500', '2026-11-29 15:07+00',
                             0, 0, 0, '2026-11-29 15:06+00', '2026-11-29 15:06+00');
SELECT finalize.record_range('w.hourly', '0x000000000000000004FF', '0x00000000000000000500', '2026-11-29 15:07+00',
                             event => 'data_loss');
SELECT finalize.record_range('w.hourly', '0x000000000000000004FF', '0x00000000000000000500', '2026-11-29 15:07+00',
                             inserts => NULL);

-- A table whose verdict is stopped accepts no range.
UPDATE finalize.tracked_table SET state = 'data_lost', state_detail = 'Rows of (0x04FF, 0x0500] were purged before they were read.'
 WHERE table_name = 'w.hourly' AND untracked_at IS NULL;
SELECT finalize.record_range('w.hourly', '0x000000000000000004FF', '0x00000000000000000500', '2026-11-29 16:00+00');
UPDATE finalize.tracked_table SET state = 'active', state_detail = NULL
 WHERE table_name = 'w.hourly' AND untracked_at IS NULL;

-- A rolled-back range leaves no trace.
BEGIN;
SELECT finalize.record_range('w.hourly', '0x000000000000000004FF', '0x00000000000000000500', '2026-11-29 16:00+00');
ROLLBACK;
SELECT * FROM verdict;

-- Unknown tables.
SELECT finalize.record_range('w.nosuch', NULL, '0x00000000000000000100', '2026-11-29 12:00+00');
SELECT finalize.record_range(NULL, NULL, '0x00000000000000000100', '2026-11-29 12:00+00');

-- A commit time further ahead of this server's clock than
-- finalize.max_clock_skew (1 hour by default) is refused: GREATEST would keep
-- the verdict it gave for ever. Within the skew it is accepted.
-- (The details name this server's clock: only the SQLSTATE or message is shown.)
\set VERBOSITY sqlstate
SELECT finalize.record_range('w.hourly', '0x000000000000000004FF', '0x00000000000000000500', now() + interval '2 hours');
\set VERBOSITY terse
SELECT finalize.record_range('w.hourly', '0x000000000000000004FF', '0x00000000000000000500', '2300-01-01 00:00+00');
SELECT finalize.record_range('w.hourly', '0x000000000000000004FF', '0x00000000000000000500', '2026-11-29 15:07+00',
                             1, 0, 0, '2026-11-29 15:06+00', 'infinity');
\set VERBOSITY default
SELECT finalize.record_range('w.hourly', '0x000000000000000004FF', '0x00000000000000000500', now() + interval '30 minutes')
       = finalize.period_start(now() + interval '30 minutes', '1 hour') AS within_skew_accepted;

-- A new table's first range has no start: one with a start would claim
-- facts before it (and the worker records by table id, so a name tracked
-- again on another server never gets the old tracking's ranges).
SELECT finalize.track_table('w.fresh', 'erp', 'dbo.orders') > 0 AS tracked;
SELECT finalize.record_range('w.fresh', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 13:00+00',
                             1, 0, 0, '2026-11-29 12:30+00', '2026-11-29 12:30+00');
SELECT finalize.record_range('w.fresh', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 13:00+00');
SELECT finalize.finalized_until('w.fresh');
SELECT (SELECT table_id FROM finalize.tracked_table WHERE table_name = 'w.fresh' AND untracked_at IS NULL) AS old_id \gset
SELECT finalize.untrack_table('w.fresh');
SELECT finalize.track_table('w.fresh', 'erp', 'dbo.orders') > :old_id AS tracked_again;
SELECT finalize_internal.record_range(:old_id, NULL, '0x00000000000000000100', '2026-11-29 13:00+00', 0, 0, 0,
                              NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
SELECT finalize.finalized_until('w.fresh');
SELECT finalize.untrack_table('w.fresh', false);

-- Other granularities: 15 minutes, 1 day; periods before the origin (2000) too.
SELECT finalize.track_table('w.quarter', 'erp', 'dbo.orders', '15 minutes') > 0 AS tracked,
       finalize.track_table('w.daily', 'erp', 'dbo.orders', '1 day') > 0 AS tracked;
SELECT finalize.record_range('w.quarter', NULL, '0x00000000000000000100', '2026-11-29 13:44:59.997+00'),
       finalize.record_range('w.daily', NULL, '0x00000000000000000100', '2026-11-29 13:44:59.997+00');
SELECT finalize.record_range('w.quarter', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 13:45+00'),
       finalize.record_range('w.daily', '0x00000000000000000100', '0x00000000000000000200', '2026-11-30 00:00+00');
SELECT finalize.track_table('w.old', 'erp', 'dbo.orders', '1 day') > 0 AS tracked;
SELECT finalize.record_range('w.old', NULL, '0x00000000000000000100', '1999-12-31 23:59:59+00');

-- The worker holds the verdict back by its source's clock_tolerance: a
-- commit time 30 s past 10:00 leaves hour 09 open under a 60 s tolerance
-- (record_range, which states its own instant, holds back by nothing).
SELECT finalize.track_table('w.clock', 'erp', 'dbo.orders') > 0 AS tracked;
SELECT finalize_internal.tracked_id('w.clock') AS clock_id \gset
SELECT finalize_internal.record_range(:clock_id, NULL, '0x00000000000000000100', '2026-11-29 08:30+00', 0, 0, 0,
                              NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, interval '60 s');
SELECT finalize_internal.record_range(:clock_id, '0x00000000000000000100', '0x00000000000000000200',
                              '2026-11-29 10:00:30+00', 2, 0, 0, '2026-11-29 10:00:10+00', '2026-11-29 10:00:30+00',
                              NULL, NULL, NULL, NULL, NULL, NULL, NULL, interval '60 s') AS held_back;
SELECT finalize_internal.record_range(:clock_id, '0x00000000000000000200', '0x00000000000000000300',
                              '2026-11-29 10:01:00+00', 0, 0, 0, NULL, NULL,
                              NULL, NULL, NULL, NULL, NULL, NULL, NULL, interval '60 s') AS a_tolerance_later;
-- The clock went back by more than that: a commit stamped 09:59:40, in hour
-- 09, final. The worker records the step: both hours inexact, an incident.
SELECT finalize_internal.record_range(:clock_id, '0x00000000000000000300', '0x00000000000000000400',
                              '2026-11-29 10:00:10+00', 1, 0, 0, '2026-11-29 09:59:40+00', '2026-11-29 09:59:40+00',
                              NULL, NULL, NULL, NULL, NULL, NULL, NULL, interval '60 s') AS stays;
SELECT period_start, inserts, straddling_ranges, exact
  FROM finalize.changes_by_period('w.clock', '2026-11-29 09:00+00', '2026-11-29 11:00+00');
SELECT finalize_internal.record_clock_step(:clock_id, '0x00000000000000000400', '2026-11-29 09:59:40+00',
                                   '2026-11-29 10:01:00+00', true, true, '0x00000000000000000300',
                                   '2026-11-29 10:00+00');
SELECT period_start, inserts, straddling_ranges, exact
  FROM finalize.changes_by_period('w.clock', '2026-11-29 09:00+00', '2026-11-29 11:00+00');
SELECT event, detail ->> 'from' AS from, detail ->> 'to' AS to, detail ->> 'ran_ahead' AS ran_ahead
  FROM finalize.fact WHERE table_id = :clock_id AND kind = 'event';
SELECT kind, severity, subject, state, message FROM finalize.alert WHERE table_id = :clock_id;
-- Its change stamped in final hour 09 is late data, as an event-time
-- table's late rows are: the release gate refuses a partition of hour 09
-- built before it was read.
SELECT table_name, event_period, period_end, rows, verdict_at_arrival
  FROM finalize.late_data WHERE table_name = 'w.clock';
SELECT finalize.untrack_table('w.clock', false);

SELECT finalize.untrack_table(t, false) FROM unnest(ARRAY['w.hourly', 'w.quarter', 'w.daily', 'w.old']) AS t;
DROP VIEW verdict;
DROP SERVER erp;
