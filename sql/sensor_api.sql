-- The sensor API: finalized_until, is_final, explain_verdict, status.
\i sql/include/preamble.sql

CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
SELECT finalize.track_table('s.orders', 'erp', 'dbo.orders') > 0 AS tracked;

-- Tracked, nothing final yet: NULL watermark, every period not final.
SELECT finalize.finalized_until('s.orders');
SELECT finalize.is_final('s.orders', '1990-01-01 00:00+00') AS long_ago_final;
SELECT (e).is_final, (e).finalized_until, (e).reason LIKE 'Period [%) is not final yet: the worker has not recorded any range for this table since it was tracked at %.' AS reason_ok
  FROM (SELECT finalize.explain_verdict('s.orders', '2026-11-29 14:00+00') AS e) x;

-- Untracked names and NULL arguments are errors, never NULL answers.
SELECT finalize.finalized_until('s.nosuch');
SELECT finalize.is_final('s.nosuch', '2026-11-29 14:00+00');
SELECT finalize.is_final(NULL, '2026-11-29 14:00+00');
SELECT finalize.is_final('s.orders', NULL);
SELECT finalize.is_final('s.orders', 'infinity');
SELECT finalize.finalized_until(NULL);
SELECT * FROM finalize.explain_verdict('s.nosuch');

SELECT finalize.record_range('s.orders', NULL, '0x00000000000000000100', '2026-11-29 14:00:00+00');
SELECT finalize.finalized_until('s.orders');

-- The period that ends exactly at finalized_until is final, the next is not;
-- any instant inside a period answers for the whole period.
SELECT p, finalize.is_final('s.orders', p)
  FROM unnest(ARRAY['2026-11-29 12:00+00', '2026-11-29 13:00+00', '2026-11-29 13:59:59.999999+00',
                    '2026-11-29 14:00+00', '2026-11-29 14:30+00', '2026-11-29 15:00+00']::timestamptz[]) AS p;
-- The same instant written in another time zone gives the same answer.
SELECT finalize.is_final('s.orders', '2026-11-29 14:59:59+01') AS in_cet,
       finalize.is_final('s.orders', '2026-11-29 09:30-05') AS in_est;

-- wait_final answers as is_final does: at once when final, after one check
-- with a timeout of 0 (test_wait_final.py waits for real).
SELECT p, finalize.wait_final('s.orders', p, '0') AS waited,
       finalize.wait_final(ARRAY['s.orders'], p, '0') AS waited_all,
       finalize.wait_final('s.orders', p, '0') = finalize.is_final('s.orders', p) AS agrees
  FROM unnest(ARRAY['2026-11-29 13:00+00', '2026-11-29 14:00+00']::timestamptz[]) AS p;
SELECT finalize.wait_final('s.orders', '2026-11-29 13:00+00') AS final_at_once;
SELECT finalize.wait_final('s.orders', '2026-11-29 14:00+00', '10 ms') AS not_final_at_timeout;
-- Its arguments are checked as is_final's are, and the timeout too.
SELECT finalize.wait_final('s.nosuch', '2026-11-29 13:00+00', '0');
SELECT finalize.wait_final(NULL::text, '2026-11-29 13:00+00');
SELECT finalize.wait_final('s.orders', NULL);
SELECT finalize.wait_final('s.orders', '2026-11-29 13:00+00', NULL);
SELECT finalize.wait_final('s.orders', '2026-11-29 13:00+00', '-1 second');
SELECT finalize.wait_final('s.orders', '2026-11-29 13:00+00', '1 day -25 hours');
SELECT finalize.wait_final('{}'::text[], '2026-11-29 13:00+00', '0');
SELECT finalize.wait_final(ARRAY['s.orders', NULL], '2026-11-29 13:00+00', '0');
-- A transaction whose snapshot lasts as long as itself may not wait.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT finalize.wait_final('s.orders', '2026-11-29 13:00+00', '0');
ROLLBACK;

-- explain_verdict: final and not final, with the reason.
SELECT table_name, period_start, period_end, is_final, finalized_until, captured_until, state, reason
  FROM finalize.explain_verdict('s.orders', '2026-11-29 13:15+00');
SELECT table_name, period_start, period_end, is_final, finalized_until, captured_until, state, reason
  FROM finalize.explain_verdict('s.orders', '2026-11-29 14:15+00');
-- Without a period: the first period that is not final.
SELECT period_start, is_final FROM finalize.explain_verdict('s.orders');
SELECT finalize.record_range('s.orders', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 14:50+00');
SELECT reason FROM finalize.explain_verdict('s.orders', '2026-11-29 14:15+00');
-- A stopped table and a failing source say so.
UPDATE finalize.tracked_table SET state = 'data_lost', state_detail = 'Rows were purged before they were read.', state_since = '2026-11-29 14:51+00'
 WHERE table_name = 's.orders';
INSERT INTO finalize.source_status (server_name, condition, last_error, last_error_at)
VALUES ('erp', 'unreachable', 'SQL Server error 18456: Login failed for user ''cdc''.', '2026-11-29 14:52+00');
SELECT state, reason FROM finalize.explain_verdict('s.orders', '2026-11-29 14:15+00');
-- Conditions are the worker's codes (src/core/condition.c); the tables
-- refuse any other.
SELECT c.conname, x.code[1] AS code
  FROM pg_constraint c, regexp_matches(pg_get_constraintdef(c.oid), '''([a-z_]+)''', 'g') WITH ORDINALITY AS x(code, n)
 WHERE c.conrelid IN ('finalize.table_condition'::regclass, 'finalize.source_status'::regclass) AND c.contype = 'c'
 ORDER BY c.conname, x.n;
\set VERBOSITY terse
INSERT INTO finalize.source_status (server_name, condition) VALUES ('other', 'table_gone');
UPDATE finalize.source_status SET held_by = 'clock_skew' WHERE server_name = 'erp';
INSERT INTO finalize.table_condition (table_id, condition)
SELECT table_id, 'unreachable' FROM finalize.tracked_table WHERE table_name = 's.orders';
\set VERBOSITY default

-- The status view: one row per tracked table.
SELECT finalize.track_table('s.lines', 'erp', 'dbo.order_lines', '1 day') > 0 AS tracked;
SELECT table_name, server_name, source_table, granularity, state, finalized_until, offset_lsn,
       captured_until, source_condition, last_error, worker_pid
  FROM finalize.status ORDER BY table_name;
SELECT lag = now() - finalized_until AS lag_is_age_of_watermark FROM finalize.status WHERE table_name = 's.orders';

-- Period arithmetic without a zone (0.2.0's): UTC strides aligned like
-- date_bin with origin 2000-01-01 00:00 UTC, whole weeks too.
SELECT g, finalize.period_start('2026-11-29 14:37:12.5+00', g) AS start,
       finalize.period_end('2026-11-29 14:37:12.5+00', g) AS "end",
       finalize.period_start('2026-11-29 14:37:12.5+00', g) = date_bin(g, '2026-11-29 14:37:12.5+00', '2000-01-01 00:00+00') AS same_as_date_bin
  FROM unnest(ARRAY['1 hour', '15 minutes', '1 day', '7 days', '168 hours', '90 seconds', '1 second']::interval[]) AS g;
SELECT finalize.period_start('1999-12-31 23:30+00', '1 hour') AS before_origin,
       finalize.period_start('2000-01-01 00:00+00', '1 day') AS at_origin;
-- A table's periods, in its zone: ISO weeks (whole weeks written in days
-- start on Monday), months, quarters and years, in UTC and in Seoul; a DST
-- day lasts 23 or 25 hours.
SELECT g, finalize.period_start('2026-11-29 14:37+00', g, 'UTC') AS utc_start,
       finalize.period_end('2026-11-29 14:37+00', g, 'UTC') AS utc_end,
       finalize.period_start('2026-11-29 14:37+00', g, 'Asia/Seoul') AS seoul_start,
       finalize.period_end('2026-11-29 14:37+00', g, 'Asia/Seoul') AS seoul_end
  FROM unnest(ARRAY['1 week', '1 mon', '3 mons', '1 year']::interval[]) AS g;
SELECT d, finalize.period_end(d, '1 day', 'America/New_York') - finalize.period_start(d, '1 day', 'America/New_York') AS length
  FROM unnest(ARRAY['2026-03-08 12:00+00', '2026-06-01 12:00+00', '2026-11-01 12:00+00']::timestamptz[]) AS d;
SELECT finalize.period_start('2026-11-29 14:37+00', '1 hour', 'Asia/Kathmandu') AS kathmandu_hour;
SELECT finalize.period_start('2026-11-29 14:37+00', '1 day', 'Mars/Olympus');
SELECT finalize.period_start('2026-11-29 14:37+00', '5 mons');
SELECT finalize.period_start(now(), '-1 hour');
SELECT finalize.period_end('294276-12-31 23:00+00', '1 day') AS saturates;

-- Periods before tracking began (docs/periods.md): final, as the verdict
-- has passed them, but not observed. finalize.status says where tracking
-- began (the end of the first range), changes_by_period marks the periods
-- before it, explain_verdict says so.
SELECT finalize.track_table('s.daily', 'erp', 'dbo.orders', '1 day', period_zone => 'Asia/Seoul') > 0 AS tracked;
SELECT tracked_since, finalized_until FROM finalize.status WHERE table_name = 's.daily';
SELECT finalize.record_range('s.daily', NULL, '0x00000000000000000100', '2026-11-25 10:07+00');
SELECT finalize.record_range('s.daily', '0x00000000000000000100', '0x00000000000000000200', '2026-11-27 16:00+00');
SELECT tracked_since, finalized_until, local_finalized_until FROM finalize.status WHERE table_name = 's.daily';
SELECT period_start, is_final, covered, before_tracking
  FROM finalize.changes_by_period('s.daily', '2026-11-23 15:00+00', '2026-11-28 15:00+00');
SELECT p, finalize.is_final('s.daily', p), (finalize.explain_verdict('s.daily', p)).reason
  FROM unnest(ARRAY['2026-11-24 00:00+09', '2026-11-25 00:00+09', '2026-11-26 00:00+09', '2026-11-28 00:00+09']::timestamptz[]) AS p;
-- A Seoul-day table's verdict and reasons in its zone, whatever the
-- session's TimeZone and DateStyle (a literal without offset, though, is
-- read in the session's TimeZone, as PostgreSQL reads it).
SET TimeZone = 'America/New_York';
SET DateStyle = 'SQL, DMY';
SELECT period_zone, local_period_start, local_finalized_until, tracked_since AT TIME ZONE 'UTC' AS tracked_since_utc,
       reason FROM finalize.explain_verdict('s.daily', '2026-11-27');
SELECT local_finalized_until FROM finalize.status WHERE table_name = 's.daily';
RESET DateStyle;
SET TimeZone = 'UTC';
SELECT period_zone, local_period_start, reason FROM finalize.explain_verdict('s.daily', '2026-11-27 00:00+09');
SELECT finalize_internal.local_time('2026-12-05 15:00+00', 'Asia/Kathmandu') AS kathmandu,
       finalize_internal.local_time('infinity', 'Asia/Seoul') AS inf,
       finalize_internal.local_time('2026-12-05 15:00+00', 'Mars/Olympus') AS bad;
SELECT finalize.untrack_table('s.daily', false);

UPDATE finalize.tracked_table SET state = 'active', state_detail = NULL WHERE table_name = 's.orders';
DELETE FROM finalize.source_status;
SELECT finalize.untrack_table(t, false) FROM unnest(ARRAY['s.orders', 's.lines']) AS t;
DROP SERVER erp;
