-- Facts: readable per range and per period, bounded by coalescing and retention.
\i sql/include/preamble.sql

CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
SELECT finalize.track_table('f.orders', 'erp', 'dbo.orders') > 0 AS tracked;
SELECT finalize.record_range('f.orders', NULL, '0x00000000000000000100', '2026-11-29 11:58+00');
-- Rows all inside hour 12.
SELECT finalize.record_range('f.orders', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 12:40+00',
                             5, 3, 1, '2026-11-29 12:01+00', '2026-11-29 12:40+00');
-- Rows straddling the 13:00 boundary.
SELECT finalize.record_range('f.orders', '0x00000000000000000200', '0x00000000000000000300', '2026-11-29 13:10+00',
                             4, 0, 0, '2026-11-29 12:50+00', '2026-11-29 13:05+00');
-- Rows inside hour 13, then empty ranges into hour 15.
SELECT finalize.record_range('f.orders', '0x00000000000000000300', '0x00000000000000000400', '2026-11-29 13:30+00',
                             0, 0, 2, '2026-11-29 13:20+00', '2026-11-29 13:30+00');
SELECT finalize.record_range('f.orders', '0x00000000000000000400', '0x00000000000000000500', '2026-11-29 14:30+00');
SELECT finalize.record_range('f.orders', '0x00000000000000000500', '0x00000000000000000600', '2026-11-29 15:10+00');

SELECT table_name, kind, event, start_lsn, end_lsn, end_commit_time, inserts, updates, deletes,
       first_commit_time, last_commit_time, ranges, untracked
  FROM finalize.facts WHERE table_name = 'f.orders' ORDER BY fact_id;

-- Per period: exact where every range lies in one period; a straddling range
-- is reported in both periods it touches, which are then not exact.
SELECT * FROM finalize.changes_by_period('f.orders', '2026-11-29 11:00+00', '2026-11-29 16:00+00');
SELECT * FROM finalize.changes_by_period('f.orders', '2026-11-29 12:30+00', '2026-11-29 12:31+00');
SELECT * FROM finalize.changes_by_period('f.orders', '2026-11-29 16:00+00', '2026-11-29 11:00+00');
SELECT * FROM finalize.changes_by_period('f.orders', '2000-01-01 00:00+00', '2026-11-29 11:00+00');
SELECT * FROM finalize.changes_by_period('f.nosuch', '2026-11-29 11:00+00', '2026-11-29 16:00+00');
-- Exactly 100000 periods is the most one call lists; beyond the timestamp
-- range, NULL and infinite bounds are errors that name the argument.
SELECT count(*) FROM finalize.changes_by_period('f.orders', '2015-07-04 00:00+00', '2026-11-29 16:00+00');
SELECT count(*) FROM finalize.changes_by_period('f.orders', '2015-07-03 23:59+00', '2026-11-29 16:00+00');
SELECT * FROM finalize.changes_by_period('f.orders', '-infinity', '2026-11-29 16:00+00');
SELECT * FROM finalize.changes_by_period('f.orders', '2026-11-29 11:00+00', 'infinity');
SELECT * FROM finalize.changes_by_period('f.orders', NULL, '2026-11-29 16:00+00');
SELECT * FROM finalize.changes_by_period('f.orders', '4713-01-01 00:00+00 BC', '294276-01-01 00:00+00');
-- Huge granularities: no interval arithmetic overflows, one period each.
SELECT finalize.alter_tracked_table('f.orders', granularity => '1000000 days');
SELECT period_start, period_end, is_final, covered
  FROM finalize.changes_by_period('f.orders', '2026-11-29 11:00+00', '2026-11-29 16:00+00');
SELECT finalize.alter_tracked_table('f.orders', granularity => '2000000000 hours');
SELECT count(*) FROM finalize.changes_by_period('f.orders', '2026-11-29 11:00+00', '2026-11-29 16:00+00');
SELECT finalize.alter_tracked_table('f.orders', granularity => '1 hour');

-- Retention: old facts go, the fact the offset points at stays.
UPDATE finalize.fact SET recorded_at = now() - interval '40 days';
SELECT finalize.purge_facts();
SELECT start_lsn, end_lsn FROM finalize.facts WHERE table_name = 'f.orders';
-- The verdict and the chain are unaffected.
SELECT finalize.finalized_until('f.orders');
SELECT finalize.record_range('f.orders', '0x00000000000000000600', '0x00000000000000000700', '2026-11-29 16:00+00');
SELECT finalize.purge_facts('-1 day');
SELECT finalize.purge_facts('0');
SELECT count(*) AS facts_left FROM finalize.facts WHERE table_name = 'f.orders';

-- Untracked tables keep their facts until retention, then disappear.
SELECT finalize.untrack_table('f.orders');
SELECT count(*) AS facts, bool_and(untracked) AS untracked FROM finalize.facts WHERE table_name = 'f.orders';
SELECT finalize.purge_facts();
SELECT count(*) AS tables FROM finalize.tracked_table WHERE table_name = 'f.orders';
UPDATE finalize.tracked_table SET untracked_at = now() - interval '40 days' WHERE table_name = 'f.orders';
UPDATE finalize.fact SET recorded_at = now() - interval '40 days';
SELECT finalize.purge_facts();
SELECT count(*) AS tables FROM finalize.tracked_table WHERE table_name = 'f.orders';
SELECT count(*) AS facts FROM finalize.fact;

-- SQL Server's clock went back inside a range: its end LSN is stamped 10:59,
-- before its last commit (11:02). The range still straddles hour 11, which
-- is then not exact (never 0 rows and exact while a row of it is there).
SELECT finalize.track_table('f.stepped', 'erp', 'dbo.stepped') > 0 AS tracked;
SELECT finalize.record_range('f.stepped', NULL, '0x00000000000000000100', '2026-11-29 10:30+00');
SELECT finalize.record_range('f.stepped', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 10:59+00',
                             3, 0, 0, '2026-11-29 10:58+00', '2026-11-29 11:02+00');
SELECT finalize.record_range('f.stepped', '0x00000000000000000200', '0x00000000000000000300', '2026-11-29 12:05+00');
SELECT period_start, inserts, straddling_ranges, exact
  FROM finalize.changes_by_period('f.stepped', '2026-11-29 10:00+00', '2026-11-29 12:00+00');
SELECT finalize.untrack_table('f.stepped');
DELETE FROM finalize.tracked_table WHERE table_name = 'f.stepped';

DROP SERVER erp;
