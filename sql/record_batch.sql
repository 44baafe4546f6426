-- The worker's set-based write path (_record_ranges): it takes only ranges
-- that plainly continue their tables' facts, records them exactly as
-- _record_range would, and hands every other range back (the worker then
-- records it one table at a time, where _record_range's checks decide).
\i sql/include/preamble.sql

CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
-- Twins: b.N go through the batch, r.N through record_range, same inputs.
SELECT count(finalize.track_table(p || '.' || i, 'erp', 'dbo.t' || i, '1 hour'))
  FROM unnest(ARRAY['b', 'r']) p, generate_series(1, 12) i WHERE i <> 11;
SELECT finalize.track_table('b.11', 'erp', 'dbo.t11', event_time_column => 'changed_at',
                            allowed_lateness => '1 hour') > 0 AS event_time;
SELECT count(finalize.record_range(t.table_name, NULL, '0x00000000000000000100', '2026-11-29 10:30+00'))
  FROM finalize.tracked_table t WHERE t.untracked_at IS NULL;
CREATE FUNCTION id(name text) RETURNS bigint LANGUAGE sql RETURN finalize_internal.tracked_id(name);
-- The worker follows a capture instance once a table's first range is
-- recorded; the batch takes only ranges of the instance a table follows.
SELECT count(*) AS following FROM (SELECT finalize_internal.set_capture_instance(id('b.' || i), 'dbo_t')
                                   FROM generate_series(1, 12) i) x;
SELECT finalize_internal.set_capture_instance(id('b.3'), 'dbo_t3_before_a_switch');

-- Tables the batch must refuse, whatever their ranges: a derived table, a
-- table whose data was lost, one with a condition, one partitioned by
-- event time, an untracked one.
SELECT finalize.track_derived('b.derived', ARRAY['b.1'], '1 day') > 0 AS derived;
SELECT finalize_internal.record_event(id('b.9'), 'data_loss', '0x00000000000000000100', '0x00000000000000000150',
                              NULL, '{}', 'data_lost', 'lost for the test');
SELECT finalize_internal.set_condition(id('b.10'), 'read_failed', 'a read failed');
CREATE TEMP TABLE gone AS SELECT id('b.12') AS table_id;
SELECT finalize.untrack_table('b.12');

-- The inputs, one per table: plain ranges (b.1, b.2: rows, empty; b.3
-- empty but of another instance than the one it follows), and every kind
-- of doubt.
CREATE TEMP TABLE input (n int, s text, e text, t timestamptz, ins bigint, upd bigint, del bigint,
                         t1 timestamptz, t2 timestamptz, why text);
INSERT INTO input VALUES
 (1, '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 12:00:01+00', 3, 1, 0,
     '2026-11-29 11:00+00', '2026-11-29 11:59+00', 'plain, with rows'),
 (2, '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 12:00:01+00', 0, 0, 0, NULL, NULL, 'plain, empty'),
 (3, '0x00000000000000000100', '0x00000000000000000300', '2026-11-29 11:00:01+00', 0, 0, 0, NULL, NULL, 'plain, empty'),
 (4, '0x00000000000000000150', '0x00000000000000000200', '2026-11-29 12:00:01+00', 0, 0, 0, NULL, NULL, 'a gap'),
 (5, '0x00000000000000000050', '0x00000000000000000200', '2026-11-29 12:00:01+00', 0, 0, 0, NULL, NULL, 'an overlap'),
 (6, '0x00000000000000000100', '0x00000000000000000200', '2999-01-01 00:00+00', 0, 0, 0, NULL, NULL, 'in the future'),
 (7, '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 12:00:01+00', 1, 0, 0, NULL, NULL, 'rows without times'),
 (8, '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 12:00:01+00', -1, 0, 0, NULL, NULL, 'negative count'),
 (9, '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 12:00:01+00', 0, 0, 0, NULL, NULL, 'data lost'),
 (10, '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 12:00:01+00', 0, 0, 0, NULL, NULL, 'a condition'),
 (11, '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 12:00:01+00', 2, 0, 0,
      '2026-11-29 11:00+00', '2026-11-29 11:59+00', 'event time');

-- Without the twins' rows the same input through record_range.
SELECT i.n, i.why, finalize.record_range('r.' || i.n, i.s, i.e, i.t, i.ins, i.upd, i.del, i.t1, i.t2, 'dbo_t')
  FROM input i WHERE i.n <= 3 ORDER BY i.n;

-- The batch: b.2 taken, every other table handed back (a NULL start,
-- a repeated table and the untracked table too).
SELECT t.table_name, x.why
  FROM finalize_internal.record_ranges(
         (SELECT array_agg(id('b.' || n) ORDER BY n) FROM input) || ARRAY[id('b.1'), (SELECT table_id FROM gone), id('b.derived')],
         (SELECT array_agg(s ORDER BY n) FROM input) || ARRAY['0x00000000000000000200', '0x00000000000000000100', '0x00000000000000000100'],
         (SELECT array_agg(e ORDER BY n) FROM input) || ARRAY['0x00000000000000000300', '0x00000000000000000200', '0x00000000000000000200'],
         (SELECT array_agg(t ORDER BY n) FROM input) || ARRAY['2026-11-29 12:00:02+00', '2026-11-29 12:00:01+00', '2026-11-29 12:00:01+00']::timestamptz[],
         (SELECT array_agg(ins ORDER BY n) FROM input) || ARRAY[0, 0, 0]::bigint[],
         (SELECT array_agg(upd ORDER BY n) FROM input) || ARRAY[0, 0, 0]::bigint[],
         (SELECT array_agg(del ORDER BY n) FROM input) || ARRAY[0, 0, 0]::bigint[],
         (SELECT array_agg(t1 ORDER BY n) FROM input) || ARRAY[NULL, NULL, NULL]::timestamptz[],
         (SELECT array_agg(t2 ORDER BY n) FROM input) || ARRAY[NULL, NULL, NULL]::timestamptz[],
         (SELECT array_fill('dbo_t'::text, ARRAY[14]))) AS left_id
  LEFT JOIN finalize.tracked_table t ON t.table_id = left_id
  LEFT JOIN input x ON 'b.' || x.n = t.table_name
 ORDER BY left_id;
-- b.1 was handed back (it came twice); the strict path then records it.
SELECT finalize.record_range('b.1', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 12:00:01+00',
                             3, 1, 0, '2026-11-29 11:00+00', '2026-11-29 11:59+00', 'dbo_t');

-- b.3 was handed back (it follows another instance than the range's); the
-- one-by-one way records it and follows the new instance.
SELECT finalize_internal.record_range(id('b.3'), s, e, t, ins, upd, del, t1, t2, 'dbo_t', NULL, NULL, NULL, NULL, NULL, NULL)
  FROM input WHERE n = 3;
SELECT finalize_internal.set_capture_instance(id('b.3'), 'dbo_t');

-- What the batch recorded is what record_range recorded: verdicts, offsets,
-- facts (empty ranges coalesced into one fact).
SELECT substr(t.table_name, 3) AS n, t.table_name LIKE 'b.%' AS batch,
       w.finalized_until, w.commit_until, w.source_until, w.offset_lsn, w.offset_commit_time
  FROM finalize.tracked_table t JOIN finalize.watermark w USING (table_id)
 WHERE t.table_name IN ('b.1', 'b.2', 'b.3', 'r.1', 'r.2', 'r.3')
 ORDER BY 1, 2;
SELECT substr(t.table_name, 3) AS n, t.table_name LIKE 'b.%' AS batch, f.start_lsn, f.end_lsn, f.end_commit_time,
       f.inserts, f.updates, f.deletes, f.first_commit_time, f.last_commit_time, f.capture_instance, f.event, f.ranges
  FROM finalize.fact f JOIN finalize.tracked_table t USING (table_id)
 WHERE t.table_name IN ('b.1', 'b.2', 'b.3', 'r.1', 'r.2', 'r.3')
 ORDER BY 1, 2, f.end_lsn;
-- The derived table followed b.1.
SELECT finalized_until FROM finalize.watermark WHERE table_id = id('b.derived');

-- Tables handed back get nothing from the batch: their offsets did not move.
SELECT t.table_name, w.offset_lsn
  FROM finalize.tracked_table t JOIN finalize.watermark w USING (table_id)
 WHERE t.table_name IN ('b.4', 'b.5', 'b.6', 'b.7', 'b.8', 'b.9', 'b.10', 'b.11')
 ORDER BY t.table_id;

-- The strict path says why each one was handed back.
SELECT finalize_internal.record_range(id('b.' || n), s, e, t, ins, upd, del, t1, t2, 'dbo_t', NULL, NULL, NULL, NULL, NULL, NULL)
  FROM input WHERE n = 4;
SELECT finalize_internal.record_range(id('b.' || n), s, e, t, ins, upd, del, t1, t2, 'dbo_t', NULL, NULL, NULL, NULL, NULL, NULL)
  FROM input WHERE n = 5;
\set VERBOSITY terse
SELECT finalize_internal.record_range(id('b.' || n), s, e, t, ins, upd, del, t1, t2, 'dbo_t', NULL, NULL, NULL, NULL, NULL, NULL)
  FROM input WHERE n = 6;
\set VERBOSITY default
SELECT finalize_internal.record_range(id('b.' || n), s, e, t, ins, upd, del, t1, t2, 'dbo_t', NULL, NULL, NULL, NULL, NULL, NULL)
  FROM input WHERE n = 7;
SELECT finalize_internal.record_range(id('b.' || n), s, e, t, ins, upd, del, t1, t2, 'dbo_t', NULL, NULL, NULL, NULL, NULL, NULL)
  FROM input WHERE n = 8;
SELECT finalize_internal.record_range(id('b.' || n), s, e, t, ins, upd, del, t1, t2, 'dbo_t', NULL, NULL, NULL, NULL, NULL, NULL)
  FROM input WHERE n = 9;
-- A condition only sends it the one-by-one way, which records it.
SELECT finalize_internal.record_range(id('b.' || n), s, e, t, ins, upd, del, t1, t2, 'dbo_t', NULL, NULL, NULL, NULL, NULL, NULL)
  FROM input WHERE n = 10;

-- Which tables have a condition or an open incident of one to clear: b.10.
-- b.9's open data-loss incident is not a condition's (acknowledging the
-- loss resolves it), so it does not keep b.9 from the batch.
SELECT t.table_name FROM finalize_internal.held_conditions((SELECT array_agg(id('b.' || n)) FROM generate_series(1, 11) n)) h
  JOIN finalize.tracked_table t ON t.table_id = h ORDER BY t.table_id;

-- An empty range continuing an empty one: one fact, its end moved.
SELECT finalize_internal.record_ranges(ARRAY[id('b.2')], ARRAY['0x00000000000000000200'], ARRAY['0x00000000000000000400'],
                               ARRAY['2026-11-29 13:00:01+00']::timestamptz[], ARRAY[0]::bigint[], ARRAY[0]::bigint[],
                               ARRAY[0]::bigint[], ARRAY[NULL]::timestamptz[], ARRAY[NULL]::timestamptz[],
                               ARRAY['dbo_t']) AS left_id;
SELECT finalized_until, offset_lsn FROM finalize.watermark WHERE table_id = id('b.2');
SELECT start_lsn, end_lsn, ranges FROM finalize.fact WHERE table_id = id('b.2') ORDER BY fact_id;

-- The NOTIFY payload built in C is json_build_object's text with
-- finalize_internal.utc_iso's times, byte for byte: names that need escaping,
-- fractions, infinities, NULLs, a derived table's "kind".
SELECT count(*) AS payloads, count(*) FILTER (WHERE c = j) AS identical FROM (
    SELECT finalize_internal.advance_payload(n, k, o, nw, l, o) AS c,
           CASE WHEN k = 'source'
                THEN json_build_object('table', n, 'old', finalize_internal.utc_iso(o), 'new', finalize_internal.utc_iso(nw),
                                       'lsn', l, 'commit_time', finalize_internal.utc_iso(o))::text
                ELSE json_build_object('table', n, 'old', finalize_internal.utc_iso(o), 'new', finalize_internal.utc_iso(nw),
                                       'lsn', l, 'commit_time', finalize_internal.utc_iso(o), 'kind', k)::text END AS j
      FROM unnest(ARRAY['plain', 'quo"te', E'back\\slash', E'tab\there', 'ünïcødé', E'nl\nx', 'ctl' || chr(1)]) n,
           unnest(ARRAY['source', 'derived']) k,
           unnest(ARRAY[NULL, '2026-11-29 13:00+00', '2026-11-29 13:00:00.5+00', '2026-11-29 13:00:00.000001+00',
                        'infinity', '-infinity', '0044-03-15 12:00+00 BC']::timestamptz[]) o,
           unnest(ARRAY['2026-11-29 14:00+00', '1999-12-31 23:59:59.999999+05']::timestamptz[]) nw,
           unnest(ARRAY[NULL, '0x0000002D00000E580004']) l) x;

SELECT count(*) AS untracked FROM (
    SELECT finalize.untrack_table(t.table_name, false, true) FROM finalize.tracked_table t
     WHERE t.untracked_at IS NULL AND t.table_name ~ '^[br]\.' AND t.kind = 'source') x;
SELECT finalize.purge_facts('0 seconds') >= 0 AS purged;
SELECT count(*) AS left_behind FROM finalize.tracked_table;
DROP FUNCTION id(text);
DROP SERVER erp;
