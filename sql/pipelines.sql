-- Pipelines and derived tables (docs/design/pipelines.md): required
-- consumers hold the verdict until they applied a period, derived tables
-- follow their inputs, and a period that lost data is never final until a
-- human acknowledges the loss. The worker's resolution of a reported LSN is
-- simulated with _consumer_resolved, as the worker calls it.
\i sql/include/preamble.sql

-- A session's transaction moves only the table it writes; the derived
-- tables that use it follow in the scheduler's next round
-- (_refresh_derived). This database has no scheduler, so the test takes
-- that step itself (:follow, which says how many derived tables moved).
\set follow 'SELECT finalize_internal.refresh_derived() AS followed;'
-- A loss flag holds the tables built from its table at once
-- (_lineage_blocked, which the sensors read); verdicts shows each table's
-- own flag, which the scheduler's step sets and clears below it.

CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
SELECT finalize.track_table('pl.orders', 'erp', 'dbo.orders') > 0 AS tracked;
CREATE VIEW verdicts AS
    SELECT t.table_name, t.kind, t.granularity, w.source_until, w.finalized_until, w.loss_blocked
      FROM finalize.tracked_table t JOIN finalize.watermark w USING (table_id)
     WHERE t.untracked_at IS NULL AND t.table_name LIKE 'pl.%'
     ORDER BY t.table_id;

-- Without consumers nothing changed: record_range returns the new verdict,
-- which is the source verdict, and explanations read as before.
SELECT finalize.record_range('pl.orders', NULL, '0x00000000000000000100', '2026-11-29 12:10+00');
SELECT finalize.record_range('pl.orders', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 13:05+00',
                             2, 0, 0, '2026-11-29 12:20+00', '2026-11-29 12:40+00');
SELECT * FROM verdicts;
SELECT reason FROM finalize.explain_verdict('pl.orders', '2026-11-29 12:00+00');
SELECT reason FROM finalize.explain_verdict('pl.orders', '2026-11-29 13:00+00');
SELECT kind, source_until, held_back_by, loss_blocked FROM finalize.status WHERE table_name = 'pl.orders';
-- A tracked table's NOTIFY payload has the keys it always had; a derived
-- table's also says "kind".
SELECT finalize_internal.advance_payload(t.table_name, t.kind, w.finalized_until, '2026-11-29 14:00+00', w.offset_lsn,
                                 w.offset_commit_time)
  FROM finalize.tracked_table t JOIN finalize.watermark w USING (table_id) WHERE t.table_name = 'pl.orders';

-- A required consumer holds the verdict from now on; what was final stays final.
SELECT finalize.add_consumer('pl.orders', 'spark-orders');
SELECT finalize.add_consumer('pl.orders', 'audit-copy', required => false);
SELECT finalize.record_range('pl.orders', '0x00000000000000000200', '0x00000000000000000300', '2026-11-29 14:02+00');
SELECT * FROM verdicts;
SELECT finalize.is_final('pl.orders', '2026-11-29 12:00+00') AS hour_12, finalize.is_final('pl.orders', '2026-11-29 13:00+00') AS hour_13;
SELECT reason FROM finalize.explain_verdict('pl.orders', '2026-11-29 13:00+00');
SELECT held_back_by FROM finalize.status WHERE table_name = 'pl.orders';
-- The pipeline reports; the worker resolves the LSN to a commit time on
-- SQL Server on its next cycle: until then nothing moves.
SELECT finalize.report_progress('pl.orders', 'spark-orders', '0x00000000000000000250');
SELECT reason FROM finalize.explain_verdict('pl.orders', '2026-11-29 13:00+00');
SELECT * FROM finalize_internal.source_consumers('erp');
-- An LSN between two commits resolves to the greatest mapping row below it
-- (0x...240, committed 13:42:10): every commit before that time is applied,
-- so hour 13 still waits.
SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('pl.orders'), 'spark-orders',
                                   '0x00000000000000000250', '0x00000000000000000240', '2026-11-29 13:42:10+00');
SELECT * FROM verdicts;
SELECT reason FROM finalize.explain_verdict('pl.orders', '2026-11-29 13:00+00');
-- Replays: a lower or equal LSN changes nothing and says so.
SELECT finalize.report_progress('pl.orders', 'spark-orders', '0x00000000000000000120');
SELECT finalize.report_progress('pl.orders', 'spark-orders', '0x00000000000000000250');
-- Debezium's commit_lsn form, in either case, is the same LSN.
SELECT finalize.report_progress('pl.orders', 'spark-orders', '00000000:00000000:0300');
SELECT finalize.report_progress('pl.orders', 'spark-orders', '0x00000000000000000300');
SELECT reported_lsn FROM finalize.consumers WHERE consumer = 'spark-orders';
SELECT reason FROM finalize.explain_verdict('pl.orders', '2026-11-29 13:00+00');
-- A resolution for an LSN the consumer never reported is ignored; one for
-- its LSN moves the verdict (in the same transaction).
SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('pl.orders'), 'spark-orders',
                                   '0x00000000000000000400', '0x00000000000000000400', '2026-11-29 16:00+00');
-- The worker holds it back by its source's clock_tolerance, as it holds the
-- source verdict: a commit 30 s past 14:00 leaves hour 13 waiting under a
-- 60 s tolerance.
SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('pl.orders'), 'spark-orders',
                                   '0x00000000000000000300', '0x00000000000000000300', '2026-11-29 14:00:30+00',
                                   interval '60 s');
SELECT commit_time FROM finalize.consumers WHERE consumer = 'spark-orders';
SELECT * FROM verdicts;
SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('pl.orders'), 'spark-orders',
                                   '0x00000000000000000300', '0x00000000000000000300', '2026-11-29 14:02+00');
SELECT * FROM verdicts;
-- A commit time never moves back; a mapping row above the LSN it resolves is refused.
SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('pl.orders'), 'spark-orders',
                                   '0x00000000000000000300', '0x00000000000000000200', '2026-11-29 13:05+00');
SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('pl.orders'), 'spark-orders',
                                   '0x00000000000000000300', '0x00000000000000000301', '2026-11-29 14:03+00');
SELECT table_name, consumer, required, reporter, reported_lsn, commit_time, consumer_until, lag, condition
  FROM finalize.consumers ORDER BY consumer;
SELECT reason FROM finalize.explain_verdict('pl.orders', '2026-11-29 13:00+00');
-- Dropping a consumer that holds the verdict releases it at once.
SELECT finalize.add_consumer('pl.orders', 'slow-job');
SELECT finalize.record_range('pl.orders', '0x00000000000000000300', '0x00000000000000000400', '2026-11-29 15:01+00');
SELECT finalize.report_progress('pl.orders', 'spark-orders', '0x00000000000000000400');
SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('pl.orders'), 'spark-orders',
                                   '0x00000000000000000400', '0x00000000000000000400', '2026-11-29 15:01+00');
SELECT source_until, finalized_until, held_back_by FROM finalize.status WHERE table_name = 'pl.orders';
SELECT finalize.drop_consumer('pl.orders', 'slow-job');
SELECT finalize.drop_consumer('pl.orders', 'slow-job');
SELECT source_until, finalized_until, held_back_by FROM finalize.status WHERE table_name = 'pl.orders';

-- A consumer that has not reported for finalize.consumer_stall_threshold
-- while the source moved on is consumer_stalled (the worker checks once a
-- cycle); once it reports and catches up, the condition clears.
SELECT finalize_internal.consumer_stall_threshold();
UPDATE finalize.consumer SET reported_at = now() - interval '20 minutes' WHERE consumer = 'spark-orders';
SELECT finalize_internal.check_consumers('erp');
SELECT consumer, condition, condition_since IS NOT NULL AS since FROM finalize.consumers ORDER BY consumer;
SELECT finalize.record_range('pl.orders', '0x00000000000000000400', '0x00000000000000000500', '2026-11-29 16:01+00');
SELECT finalize_internal.check_consumers('erp');
SELECT consumer, condition, condition_since IS NOT NULL AS since FROM finalize.consumers ORDER BY consumer;
SELECT finalize.report_progress('pl.orders', 'spark-orders', '0x00000000000000000500');
SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('pl.orders'), 'spark-orders',
                                   '0x00000000000000000500', '0x00000000000000000500', '2026-11-29 16:01+00');
SELECT finalize_internal.check_consumers('erp');
SELECT consumer, condition FROM finalize.consumers ORDER BY consumer;
SELECT * FROM verdicts;

-- Clear errors that name the table and the consumer.
SELECT finalize.add_consumer('pl.orders', 'spark-orders');
SELECT finalize.add_consumer('pl.orders', '  ');
SELECT finalize.add_consumer('pl.orders', NULL);
SELECT finalize.add_consumer('pl.nosuch', 'x');
SELECT finalize.report_progress('pl.orders', 'nobody', '0x00000000000000000500');
SELECT finalize.report_progress('pl.orders', 'spark-orders', '0x123');
SELECT finalize.report_progress('pl.orders', 'spark-orders', '0000002d:00000f2a');
SELECT finalize.report_progress('pl.orders', 'spark-orders', NULL);
SELECT finalize.report_processed('pl.orders', 'spark-orders', '2026-11-29 16:00+00');

-- Who may report: a consumer's reporter (and admins); a consumer without
-- one, only admins. A pipeline role writes nothing else.
CREATE ROLE regress_pipe_a LOGIN IN ROLE finalize_pipeline;
CREATE ROLE regress_pipe_b LOGIN IN ROLE finalize_pipeline;
CREATE ROLE regress_pl_admin LOGIN IN ROLE finalize_admin;
CREATE ROLE regress_pl_reader LOGIN IN ROLE finalize_reader;
SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname = 'finalize_pipeline';
SELECT pg_has_role('finalize_pipeline', 'finalize_reader', 'MEMBER') AS pipeline_is_reader,
       pg_has_role('finalize_admin', 'finalize_pipeline', 'MEMBER') AS admin_is_pipeline,
       pg_has_role('finalize_pipeline', 'finalize_publisher', 'MEMBER') AS pipeline_is_publisher;
SELECT finalize.add_consumer('pl.orders', 'flink-orders', reporter => 'regress_pipe_a');
SELECT finalize.add_consumer('pl.orders', 'odd-reporter', required => false, reporter => 'regress_pl_reader');
SET ROLE regress_pipe_a;
SELECT finalize.report_progress('pl.orders', 'flink-orders', '0x00000000000000000500');
SELECT consumer, reported_lsn FROM finalize.consumers WHERE consumer = 'flink-orders';
SELECT finalize.is_final('pl.orders', '2026-11-29 15:00+00');
RESET ROLE;
SET ROLE regress_pipe_b;
SELECT finalize.report_progress('pl.orders', 'flink-orders', '0x00000000000000000600');
SELECT finalize.report_progress('pl.orders', 'spark-orders', '0x00000000000000000500');
SELECT finalize.record_range('pl.orders', '0x00000000000000000500', '0x00000000000000000600', '2026-11-29 23:00+00');
SELECT finalize.add_consumer('pl.orders', 'mine');
SELECT finalize.drop_consumer('pl.orders', 'flink-orders');
SELECT finalize_internal.consumer_resolved(1, 'flink-orders', '0x00000000000000000600', '0x00000000000000000600', now());
SELECT count(*) FROM finalize.consumer;
UPDATE finalize.consumer SET reported_lsn = '0x00000000000000000900';
RESET ROLE;
SET ROLE regress_pl_reader;
SELECT finalize.report_progress('pl.orders', 'odd-reporter', '0x00000000000000000500');
SELECT count(*) AS consumers_visible FROM finalize.consumers;
RESET ROLE;
SET ROLE regress_pl_admin;
SELECT finalize.report_progress('pl.orders', 'flink-orders', '0x00000000000000000510');
RESET ROLE;
SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('pl.orders'), 'flink-orders',
                                   '0x00000000000000000510', '0x00000000000000000500', '2026-11-29 16:01+00');
SELECT source_until, finalized_until, held_back_by FROM finalize.status WHERE table_name = 'pl.orders';

-- Changing a consumer in place. A reporter must be a role that exists.
SELECT finalize.add_consumer('pl.orders', 'ghost', reporter => '-');
SELECT finalize.add_consumer('pl.orders', 'ghost', reporter => '4000000000');
SELECT finalize.alter_consumer('pl.orders', 'nosuch', required => false);
SELECT finalize.alter_consumer('pl.orders', 'odd-reporter', reporter => 'regress_pipe_b');
SET ROLE regress_pipe_b;
SELECT finalize.report_progress('pl.orders', 'odd-reporter', '0x00000000000000000500');
RESET ROLE;
-- A reporter role renamed or dropped (its OID may one day name another
-- role) reports no more until an admin names one again.
CREATE ROLE regress_pipe_c LOGIN IN ROLE finalize_pipeline;
SELECT finalize.alter_consumer('pl.orders', 'odd-reporter', reporter => 'regress_pipe_c');
ALTER ROLE regress_pipe_c RENAME TO regress_pipe_d;
SET ROLE regress_pipe_d;
SELECT finalize.report_progress('pl.orders', 'odd-reporter', '0x00000000000000000600');
RESET ROLE;
DROP ROLE regress_pipe_d;
SELECT finalize.alter_consumer('pl.orders', 'odd-reporter', reporter => 'regress_pl_reader');
-- reset forgets a wrong report (here one above anything SQL Server will
-- reach): the verdict stays where it is and waits for the next report.
SELECT finalize.report_progress('pl.orders', 'flink-orders', '0xFFFFFFFFFFFFFFFFFFFF');
SELECT finalize.alter_consumer('pl.orders', 'flink-orders', reset => true);
SELECT consumer, reported_lsn, commit_time FROM finalize.consumers WHERE consumer = 'flink-orders';
SELECT source_until, finalized_until, held_back_by FROM finalize.status WHERE table_name = 'pl.orders';
SELECT finalize.report_progress('pl.orders', 'flink-orders', '0x00000000000000000510');
SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('pl.orders'), 'flink-orders',
                                   '0x00000000000000000510', '0x00000000000000000500', '2026-11-29 16:01+00');
SELECT source_until, finalized_until, held_back_by FROM finalize.status WHERE table_name = 'pl.orders';

-- Derived tables: a DAG of three levels with mixed granularities.
SELECT finalize.track_table('pl.lines', 'erp', 'dbo.order_lines') > 0 AS tracked;
SELECT finalize.record_range('pl.lines', NULL, '0x00000000000000000100', '2026-11-29 13:30+00');
-- Level 1, hourly (the coarsest input's granularity): the least of its inputs.
SELECT finalize.track_derived('pl.order_facts', ARRAY['pl.orders', 'pl.lines']) > 0 AS derived;
-- Level 2, daily from hourly; level 3 from a derived and a tracked table,
-- daily by default (its coarsest input).
SELECT finalize.track_derived('pl.daily_revenue', ARRAY['pl.order_facts'], '1 day') > 0 AS derived;
SELECT finalize.track_derived('pl.revenue_report', ARRAY['pl.daily_revenue', 'pl.orders']) > 0 AS derived;
SELECT * FROM verdicts;
SELECT t.table_name, array_agg(i.table_name ORDER BY i.table_name) AS inputs
  FROM finalize.derived_input d JOIN finalize.tracked_table t ON t.table_id = d.table_id
  JOIN finalize.tracked_table i ON i.table_id = d.input_id GROUP BY t.table_name ORDER BY 1;
SELECT reason FROM finalize.explain_verdict('pl.order_facts', '2026-11-29 14:00+00');
SELECT reason FROM finalize.explain_verdict('pl.order_facts', '2026-11-29 12:00+00');
SELECT reason FROM finalize.explain_verdict('pl.daily_revenue', '2026-11-29 00:00+00');
-- One range of an input moves the input in its transaction, and the whole
-- chain in the scheduler's next round: not before.
SELECT finalize.record_range('pl.lines', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 23:59:59+00');
SELECT table_name, source_until FROM verdicts WHERE kind = 'derived';
:follow
SELECT * FROM verdicts;
SELECT finalize.record_range('pl.lines', '0x00000000000000000200', '0x00000000000000000300', '2026-11-30 00:00:01+00');
SELECT finalize.record_range('pl.orders', '0x00000000000000000500', '0x00000000000000000600', '2026-11-30 00:05+00');
SELECT finalize.report_progress('pl.orders', 'spark-orders', '0x00000000000000000600');
SELECT finalize.report_progress('pl.orders', 'flink-orders', '0x00000000000000000600');
BEGIN;
SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('pl.orders'), c, '0x00000000000000000600',
                                   '0x00000000000000000600', '2026-11-30 00:05+00')
  FROM unnest(ARRAY['flink-orders', 'spark-orders']) AS c;
SELECT * FROM verdicts;
COMMIT;
:follow
SELECT * FROM verdicts;
SELECT finalize.is_final('pl.revenue_report', '2026-11-29 10:00+00') AS report_day_29;
SELECT finalize_internal.advance_payload(t.table_name, t.kind, w.finalized_until, w.finalized_until, w.offset_lsn,
                                 w.offset_commit_time)
  FROM finalize.tracked_table t JOIN finalize.watermark w USING (table_id) WHERE t.table_name = 'pl.daily_revenue';
-- A derived table's own job caps it, through report_processed, in the
-- same transaction. (A consumer declared after a period became final does
-- not take it back.)
SELECT finalize.track_derived('pl.hourly_copy', ARRAY['pl.order_facts'], '30 minutes') > 0 AS derived;
SELECT finalize.add_consumer('pl.hourly_copy', 'late-job');
SELECT reason FROM finalize.explain_verdict('pl.hourly_copy', '2026-11-29 23:30+00');
-- An optional consumer holds nothing: making it optional releases the verdict.
SELECT finalize.alter_consumer('pl.hourly_copy', 'late-job', required => false);
SELECT finalize.drop_consumer('pl.hourly_copy', 'late-job');
SELECT finalize.track_table('pl.refunds', 'erp', 'dbo.refunds') > 0 AS tracked;
SELECT finalize.track_derived('pl.refund_copy', ARRAY['pl.refunds'], '30 minutes') > 0 AS derived;
SELECT finalize.add_consumer('pl.refund_copy', 'copy-job', reporter => 'regress_pipe_b');
SELECT finalize.record_range('pl.refunds', NULL, '0x00000000000000000100', '2026-11-30 00:10+00');
:follow
SELECT table_name, source_until, finalized_until, held_back_by FROM finalize.status WHERE table_name LIKE 'pl.refund%' ORDER BY table_name;
SELECT reason FROM finalize.explain_verdict('pl.refund_copy', '2026-11-29 23:00+00');
SET ROLE regress_pipe_b;
SELECT finalize.report_processed('pl.refund_copy', 'copy-job', '2026-11-29 23:10+00');
RESET ROLE;
SELECT table_name, source_until, finalized_until, held_back_by FROM finalize.status WHERE table_name = 'pl.refund_copy';
SELECT reason FROM finalize.explain_verdict('pl.refund_copy', '2026-11-29 23:00+00');
SELECT finalize.report_processed('pl.refund_copy', 'copy-job', '2026-11-30 00:45+00');
SELECT finalize.report_processed('pl.refund_copy', 'copy-job', '2026-11-30 00:45+00');
SELECT finalize.report_processed('pl.refund_copy', 'copy-job', '2026-11-30 00:40+00');
SELECT finalize.report_processed('pl.refund_copy', 'copy-job', 'infinity');
SELECT finalize.report_processed('pl.refund_copy', 'copy-job', NULL);
SELECT finalize.report_progress('pl.refund_copy', 'copy-job', '0x00000000000000000100');
SELECT table_name, source_until, finalized_until, held_back_by FROM finalize.status WHERE table_name = 'pl.refund_copy';
SELECT reason FROM finalize.explain_verdict('pl.refund_copy', '2026-11-29 23:30+00');
SELECT reason FROM finalize.explain_verdict('pl.refund_copy', '2026-11-30 00:00+00');
SELECT table_name, consumer, reported_lsn, commit_time, consumer_until, lag FROM finalize.consumers
 WHERE table_name = 'pl.refund_copy';
SELECT finalize.untrack_table('pl.refunds', false, true);
-- A derived table's status and facts: no source, no facts of its own.
SELECT table_name, server_name, source_table, granularity, state, finalized_until, offset_lsn, captured_until, kind
  FROM finalize.status WHERE kind = 'derived' ORDER BY table_name;
SELECT * FROM finalize.changes_by_period('pl.daily_revenue', '2026-11-28 00:00+00', '2026-11-30 12:00+00');
SELECT count(*) AS derived_tables_the_worker_reads
  FROM finalize_internal.source_tables('erp') s JOIN finalize.tracked_table t USING (table_id) WHERE t.kind = 'derived';
SELECT finalize.record_range('pl.order_facts', '0x00000000000000000100', '0x00000000000000000200', '2026-11-30 03:00+00');
SELECT finalize.alter_tracked_table('pl.order_facts', ddl_policy => 'block');
SELECT finalize.alter_tracked_table('pl.hourly_copy', granularity => '1 hour');
SELECT table_name, granularity, source_until, finalized_until FROM verdicts WHERE table_name = 'pl.hourly_copy';

-- Bad definitions: every input must be tracked, once; no table may depend on itself.
SELECT finalize.track_derived('pl.bad', ARRAY['pl.orders', 'pl.nosuch']);
SELECT finalize.track_derived('pl.bad', ARRAY['pl.orders', 'pl.orders']);
SELECT finalize.track_derived('pl.bad', ARRAY['pl.bad']);
SELECT finalize.track_derived('pl.bad', '{}');
SELECT finalize.track_derived('pl.bad', ARRAY['pl.orders', NULL]);
SELECT finalize.track_derived('pl.bad', NULL);
SELECT finalize.track_derived('pl.bad', ARRAY['pl.orders'], '1 mon 1 day');
SELECT finalize.track_derived(' ', ARRAY['pl.orders']);
SELECT finalize.track_derived(E'pl.bad\nLOG:  forged', ARRAY['pl.orders']);
SELECT finalize.track_derived('pl.lines', ARRAY['pl.orders']);
-- pl.orders feeds pl.daily_revenue (through pl.order_facts): no cycle can be
-- built, since a derived table's name must be new and its inputs exist.
SELECT finalize.track_derived('pl.orders', ARRAY['pl.daily_revenue']);
SELECT count(*) AS tracked FROM finalize.tracked_table WHERE table_name = 'pl.bad';

-- Several tables at once: the least verdict, final only if final in all;
-- a name alone still calls the single-table functions.
SELECT finalize.finalized_until(ARRAY['pl.orders', 'pl.lines', 'pl.daily_revenue']);
SELECT finalize.is_final(ARRAY['pl.orders', 'pl.daily_revenue'], '2026-11-29 10:00+00') AS day_29,
       finalize.is_final(ARRAY['pl.orders', 'pl.daily_revenue'], '2026-11-30 00:00+00') AS day_30_first_hour;
SELECT finalize.finalized_until(ARRAY['pl.orders', 'pl.nosuch', 'pl.other']);
SELECT finalize.is_final(ARRAY['pl.orders', 'pl.nosuch'], '2026-11-29 10:00+00');
EXPLAIN (VERBOSE, COSTS OFF) SELECT finalize.is_final('pl.orders', '2026-11-29 13:00+00'), finalize.finalized_until('pl.orders');
SELECT finalize.is_final('pl.orders', '2026-11-29 13:00+00'), finalize.finalized_until('pl.orders');
SET ROLE regress_pl_reader;
SELECT finalize.is_final(ARRAY['pl.orders', 'pl.lines'], '2026-11-29 13:00+00');
RESET ROLE;

-- Untracking an input is refused while a derived table uses it, or
-- cascades; the two-argument form still works.
SELECT finalize.untrack_table('pl.order_facts');
SELECT finalize.untrack_table('pl.lines', false);
SELECT finalize.untrack_table('pl.hourly_copy');
SELECT finalize.untrack_table('pl.order_facts', cascade => true);
SELECT table_name, kind FROM finalize.status WHERE table_name LIKE 'pl.%' ORDER BY table_name;
SELECT finalize.untrack_table('pl.lines', false);

-- Losses: after a data loss and a restart, the periods of the lost range
-- are not final, here and in the derived tables that use the table, until
-- an admin acknowledges the loss.
SELECT finalize.track_table('pl.events', 'erp', 'dbo.events') > 0 AS tracked;
SELECT finalize.record_range('pl.events', NULL, '0x00000000000000000100', '2026-11-29 08:00:01+00');
SELECT finalize.record_range('pl.events', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 10:15+00',
                             1, 0, 0, '2026-11-29 09:30+00', '2026-11-29 09:30+00');
SELECT finalize.track_derived('pl.events_daily', ARRAY['pl.events'], '1 day') > 0 AS derived;
SELECT finalize.track_derived('pl.events_6h', ARRAY['pl.events_daily', 'pl.orders'], '6 hours') > 0 AS derived;
SELECT finalize_internal.record_event(finalize_internal.tracked_id('pl.events'), 'data_loss', '0x00000000000000000200',
                              '0x00000000000000000400', 'dbo_events', '{"cause": "cleanup"}', 'data_lost',
                              'Rows were purged before they were read.');
SELECT finalize.resume_table('pl.events');
-- The worker restarts it below the capture instance's min LSN, at 12:20.
SELECT finalize_internal.resume_after_loss(finalize_internal.tracked_id('pl.events'), '0x000000000000000003FF',
                                   '2026-11-29 12:20+00', '2026-11-29 12:20+00', 'dbo_events', false, '{}');
SELECT table_name, lost_from, lost_to, from_lsn, to_lsn, fact_id IS NOT NULL AS linked
  FROM finalize.loss JOIN finalize.tracked_table USING (table_id);
SELECT finalize.record_range('pl.events', '0x000000000000000003FF', '0x00000000000000000500', '2026-11-30 01:00+00');
:follow
SELECT * FROM verdicts WHERE table_name LIKE 'pl.events%';
-- Hours 10, 11 and 12 intersect [10:15, 12:20]; 9 and 13 do not.
SELECT p, finalize.is_final('pl.events', p)
  FROM unnest(ARRAY['2026-11-29 09:00+00', '2026-11-29 10:00+00', '2026-11-29 11:00+00', '2026-11-29 12:00+00',
                    '2026-11-29 13:00+00']::timestamptz[]) AS p;
SELECT period_start, is_final, covered FROM finalize.changes_by_period('pl.events', '2026-11-29 09:00+00', '2026-11-29 14:00+00');
SELECT is_final, reason FROM finalize.explain_verdict('pl.events', '2026-11-29 11:00+00');
SELECT finalize_internal.loss_blocks(finalize_internal.tracked_id('pl.events'), '2026-11-29 13:00+00', '2026-11-29 14:00+00') AS hour_13,
       finalize_internal.loss_blocks(finalize_internal.tracked_id('pl.events'), '2026-11-29 12:00+00', '2026-11-29 13:00+00') AS hour_12;
-- The derived tables inherit it.
SELECT finalize.is_final('pl.events_daily', '2026-11-29 00:00+00') AS day_29,
       finalize.is_final('pl.events_6h', '2026-11-29 06:00+00') AS from_6h,
       finalize.is_final('pl.events_6h', '2026-11-29 18:00+00') AS from_18h;
SELECT is_final, reason FROM finalize.explain_verdict('pl.events_6h', '2026-11-29 12:00+00');
SELECT finalize.is_final(ARRAY['pl.orders', 'pl.events'], '2026-11-29 11:00+00');
-- Acknowledging: whole periods of the table that lost the data, with a note.
SELECT finalize.acknowledge_loss('pl.events', '2026-11-29 10:30+00', '2026-11-29 12:00+00', 're-snapshotted');
SELECT finalize.acknowledge_loss('pl.events', '2026-11-29 12:00+00', '2026-11-29 10:00+00', 're-snapshotted');
SELECT finalize.acknowledge_loss('pl.events', '2026-11-29 10:00+00', '2026-11-29 12:00+00', ' ');
SELECT finalize.acknowledge_loss('pl.events', '2026-11-29 10:00+00', NULL, 'x');
SELECT finalize.acknowledge_loss('pl.events_daily', '2026-11-29 00:00+00', '2026-11-30 00:00+00', 'x');
SELECT finalize.acknowledge_loss('pl.orders', '2026-11-29 10:00+00', '2026-11-29 11:00+00', 'nothing was lost here');
-- Part of it: hours 10 and 11 are final, hour 12 still waits.
SELECT finalize.acknowledge_loss('pl.events', '2026-11-29 10:00+00', '2026-11-29 12:00+00',
                                 'events re-snapshotted from SQL Server, ticket DATA-123');
:follow
SELECT p, finalize.is_final('pl.events', p)
  FROM unnest(ARRAY['2026-11-29 10:00+00', '2026-11-29 11:00+00', '2026-11-29 12:00+00']::timestamptz[]) AS p;
SELECT * FROM verdicts WHERE table_name LIKE 'pl.events%';
SELECT finalize.is_final('pl.events_daily', '2026-11-29 00:00+00') AS day_29;
-- The rest: an adjacent acknowledgement joins the first.
SELECT finalize.acknowledge_loss('pl.events', '2026-11-29 12:00+00', '2026-11-29 13:00+00',
                                 'hour 12 re-snapshotted too');
-- The acknowledging session releases its own table; the derived tables
-- are released in the scheduler's next round.
SELECT * FROM verdicts WHERE table_name LIKE 'pl.events%';
:follow
SELECT * FROM verdicts WHERE table_name LIKE 'pl.events%';
SELECT finalize.is_final('pl.events', '2026-11-29 12:00+00') AS hour_12,
       finalize.is_final('pl.events_daily', '2026-11-29 00:00+00') AS day_29,
       finalize.is_final('pl.events_6h', '2026-11-29 12:00+00') AS from_12h;
SELECT period_start, is_final, covered FROM finalize.changes_by_period('pl.events', '2026-11-29 11:00+00', '2026-11-29 13:00+00');
SELECT event, detail - 'by' AS detail, detail ->> 'by' = current_user AS by_current_user FROM finalize.facts
 WHERE table_name = 'pl.events' AND event IN ('loss_acknowledged', 'resumed') ORDER BY fact_id;
SELECT acknowledged_by = current_user AS by_current_user, period_from, period_to, note FROM finalize.loss_ack ORDER BY ack_id;
-- An acknowledgement covers only the losses recorded before it: a later
-- loss in the same periods holds them again.
SELECT finalize_internal.record_event(finalize_internal.tracked_id('pl.events'), 'data_loss', '0x00000000000000000500',
                              '0x00000000000000000600', 'dbo_events', '{"cause": "cleanup"}', 'data_lost', 'lost again');
UPDATE finalize.tracked_table SET state = 'resuming' WHERE table_name = 'pl.events';
UPDATE finalize.watermark SET offset_commit_time = '2026-11-29 10:40+00'
 WHERE table_id = finalize_internal.tracked_id('pl.events');
SELECT finalize_internal.resume_after_loss(finalize_internal.tracked_id('pl.events'), '0x000000000000000005FF',
                                   '2026-11-29 11:10+00', '2026-11-29 11:10+00', 'dbo_events', true, '{}');
SELECT finalize.is_final('pl.events', '2026-11-29 10:00+00') AS hour_10,
       finalize.is_final('pl.events', '2026-11-29 11:00+00') AS hour_11,
       finalize.is_final('pl.events', '2026-11-29 12:00+00') AS hour_12;
SELECT table_name, loss_blocked FROM finalize.status WHERE table_name LIKE 'pl.events%' ORDER BY table_name;

-- finalized_until never runs ahead of a loss: every period ending at or
-- before it must be complete, so while a loss is not acknowledged it stops
-- at the start of the first period the loss holds (is_final may still say
-- that later periods are final). finalize.status shows the watermark.
SELECT finalize.track_table('pl.la', 'erp', 'dbo.la') > 0 AS tracked;
SELECT finalize.record_range('pl.la', NULL, '0x00000000000000000100', '2026-11-29 08:00:01+00');
SELECT finalize.record_range('pl.la', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 10:15+00',
                             1, 0, 0, '2026-11-29 09:30+00', '2026-11-29 09:30+00');
-- Its derived tables: a job that builds pl.la_job hourly (a required
-- consumer, declared before the loss), a view without consumers, a daily
-- table built from pl.la_job by a job of its own (three levels), and a copy
-- of pl.la_job without consumers.
SELECT finalize.track_derived('pl.la_job', ARRAY['pl.la']) > 0 AS derived;
SELECT finalize.add_consumer('pl.la_job', 'la-job');
SELECT finalize.track_derived('pl.la_view', ARRAY['pl.la']) > 0 AS derived;
SELECT finalize.track_derived('pl.la_daily', ARRAY['pl.la_job'], '1 day') > 0 AS derived;
SELECT finalize.add_consumer('pl.la_daily', 'la-daily-job');
SELECT finalize.track_derived('pl.la_copy', ARRAY['pl.la_job']) > 0 AS derived;
SELECT finalize_internal.record_event(finalize_internal.tracked_id('pl.la'), 'data_loss', '0x00000000000000000200',
                              '0x00000000000000000400', 'dbo_la', '{"cause": "cleanup"}', 'data_lost', 'purged');
SELECT finalize.resume_table('pl.la');
SELECT finalize_internal.resume_after_loss(finalize_internal.tracked_id('pl.la'), '0x000000000000000003FF',
                                   '2026-11-29 12:20+00', '2026-11-29 12:20+00', 'dbo_la', false, '{}');
-- Before anyone sets the derived tables' own flags, pl.la's holds them
-- (what the sensors, the status view and explain_verdict read).
SELECT table_name, loss_blocked FROM verdicts WHERE table_name LIKE 'pl.la%';
SELECT table_name, loss_blocked FROM finalize.status WHERE table_name LIKE 'pl.la%' ORDER BY table_name;
SELECT finalize.record_range('pl.la', '0x000000000000000003FF', '0x00000000000000000500', '2026-11-30 01:00+00');
:follow
-- The jobs had processed everything their inputs allowed, the lost hours
-- from incomplete data.
SELECT finalize.report_processed('pl.la_job', 'la-job', '2026-11-30 01:00+00');
SELECT finalize.report_processed('pl.la_daily', 'la-daily-job', '2026-11-30 00:00+00');
:follow
SELECT * FROM verdicts WHERE table_name LIKE 'pl.la%';
-- Hours 10 to 12 intersect [10:15, 12:20]: the verdict stops at 10:00.
SELECT finalize.finalized_until('pl.la') AS la, finalize.finalized_until('pl.la_view') AS la_view,
       finalize.finalized_until('pl.la_daily') AS la_daily;
SELECT finalize.is_final('pl.la', '2026-11-29 09:00+00') AS hour_9, finalize.is_final('pl.la', '2026-11-29 11:00+00') AS hour_11,
       finalize.is_final('pl.la', '2026-11-29 13:00+00') AS hour_13;
SELECT finalize.finalized_until(ARRAY['pl.orders', 'pl.la']) AS with_orders,
       finalize.finalized_until(ARRAY['pl.la_view', 'pl.la_daily']) AS view_and_daily;
SELECT period_start, is_final, finalized_until FROM finalize.explain_verdict('pl.la');
-- finalize.status shows the verdict the sensors give, never the watermark beyond the loss.
SELECT finalized_until, loss_blocked FROM finalize.status WHERE table_name = 'pl.la';
SELECT finalize_internal.loss_cap(finalize_internal.tracked_id('pl.la')) AS la, finalize_internal.loss_cap(finalize_internal.tracked_id('pl.la_daily')) AS la_daily,
       finalize_internal.loss_cap(finalize_internal.tracked_id('pl.orders')) AS no_loss;
-- Part of it acknowledged: the verdict moves to the first hour still held.
SELECT finalize.acknowledge_loss('pl.la', '2026-11-29 10:00+00', '2026-11-29 11:00+00', 'hour 10 re-snapshotted');
SELECT finalize.finalized_until('pl.la') AS la, finalize.is_final('pl.la', '2026-11-29 10:00+00') AS hour_10;

-- Acknowledging the input releases the derived tables without a required
-- consumer (nothing to rebuild), not those whose job built the lost
-- periods from incomplete data: they wait for an acknowledgement of their
-- own, once the job has rebuilt them.
SELECT is_final, reason FROM finalize.explain_verdict('pl.la_copy', '2026-11-29 11:00+00');
SELECT finalize.acknowledge_loss('pl.la', '2026-11-29 11:00+00', '2026-11-29 13:00+00', 're-snapshotted');
:follow
SELECT t AS table_name, finalize.is_final(t, '2026-11-29 11:00+00') AS hour_11, finalize.finalized_until(t)
  FROM unnest(ARRAY['pl.la', 'pl.la_view', 'pl.la_job', 'pl.la_copy', 'pl.la_daily']) AS t;
SELECT table_name, loss_blocked FROM verdicts WHERE table_name LIKE 'pl.la%';
SELECT is_final, reason FROM finalize.explain_verdict('pl.la_job', '2026-11-29 11:00+00');
SELECT is_final, reason FROM finalize.explain_verdict('pl.la_daily', '2026-11-29 00:00+00');
SELECT finalize.is_final(ARRAY['pl.la', 'pl.la_view'], '2026-11-29 11:00+00') AS without_jobs,
       finalize.is_final(ARRAY['pl.la', 'pl.la_job'], '2026-11-29 11:00+00') AS with_job;
-- A derived table with nothing to rebuild is still refused; the others
-- take their own period boundaries.
SELECT finalize.acknowledge_loss('pl.la_view', '2026-11-29 10:00+00', '2026-11-29 13:00+00', 'x');
SELECT finalize.acknowledge_loss('pl.la_daily', '2026-11-29 10:00+00', '2026-11-29 13:00+00', 'x');
SELECT finalize.acknowledge_loss('pl.la_job', '2026-11-29 10:00+00', '2026-11-29 13:00+00', 'la-job rebuilt hours 10 to 12');
:follow
SELECT t AS table_name, finalize.is_final(t, '2026-11-29 11:00+00') AS hour_11, finalize.finalized_until(t)
  FROM unnest(ARRAY['pl.la_job', 'pl.la_copy', 'pl.la_daily']) AS t;
SELECT is_final, reason FROM finalize.explain_verdict('pl.la_daily', '2026-11-29 00:00+00');
SELECT finalize.acknowledge_loss('pl.la_daily', '2026-11-29 00:00+00', '2026-11-30 00:00+00', 'la-daily-job rebuilt day 29');
-- The acknowledging session clears the flag of the table it acknowledges
-- (its verdict it holds), never those of the tables built from it.
SELECT table_name, loss_blocked FROM verdicts WHERE table_name = 'pl.la_daily';
SELECT finalize.is_final('pl.la_daily', '2026-11-29 00:00+00') AS day_29, finalize.finalized_until('pl.la_daily');
SELECT table_name, loss_blocked FROM verdicts WHERE table_name LIKE 'pl.la%';
SELECT t.table_name, f.detail ->> 'losses' AS losses, f.detail ->> 'period_from' AS period_from,
       f.detail ->> 'period_to' AS period_to, f.detail ->> 'note' AS note
  FROM finalize.fact f JOIN finalize.tracked_table t USING (table_id)
 WHERE f.event = 'loss_acknowledged' AND t.table_name LIKE 'pl.la%' ORDER BY f.fact_id;
-- Whether a derived table must acknowledge follows its required consumers
-- as they change; one declared after the input's acknowledgement built from
-- repaired data and needs none (declaring one never retracts what was final).
SELECT finalize.track_table('pl.lb', 'erp', 'dbo.lb') > 0 AS tracked;
SELECT finalize.record_range('pl.lb', NULL, '0x00000000000000000100', '2026-11-29 10:15+00');
SELECT finalize.track_derived('pl.lb_job', ARRAY['pl.lb']) > 0 AS derived;
SELECT finalize.add_consumer('pl.lb_job', 'lb-job', required => false);
SELECT finalize_internal.record_event(finalize_internal.tracked_id('pl.lb'), 'data_loss', '0x00000000000000000100',
                              '0x00000000000000000200', 'dbo_lb', '{"cause": "cleanup"}', 'data_lost', 'purged');
SELECT finalize.resume_table('pl.lb');
SELECT finalize_internal.resume_after_loss(finalize_internal.tracked_id('pl.lb'), '0x000000000000000001FF',
                                   '2026-11-29 11:20+00', '2026-11-29 11:20+00', 'dbo_lb', false, '{}');
SELECT finalize.record_range('pl.lb', '0x000000000000000001FF', '0x00000000000000000300', '2026-11-29 14:00+00');
:follow
SELECT finalize.acknowledge_loss('pl.lb', '2026-11-29 10:00+00', '2026-11-29 12:00+00', 're-snapshotted');
:follow
SELECT table_name, loss_blocked FROM verdicts WHERE table_name LIKE 'pl.lb%';
SELECT finalize.alter_consumer('pl.lb_job', 'lb-job', required => true);
SELECT table_name, loss_blocked FROM verdicts WHERE table_name LIKE 'pl.lb%';
SELECT finalize.drop_consumer('pl.lb_job', 'lb-job');
:follow
SELECT table_name, loss_blocked FROM verdicts WHERE table_name LIKE 'pl.lb%';
SELECT finalize.add_consumer('pl.lb_job', 'lb-job-2');
SELECT table_name, loss_blocked FROM verdicts WHERE table_name LIKE 'pl.lb%';
SELECT finalize.acknowledge_loss('pl.lb_job', '2026-11-29 10:00+00', '2026-11-29 12:00+00', 'x');
-- A loss without a start (nothing was recorded before it) leaves nothing
-- that finalized_until can promise until it is acknowledged.
SELECT finalize.track_table('pl.lc', 'erp', 'dbo.lc') > 0 AS tracked;
SELECT finalize_internal.record_event(finalize_internal.tracked_id('pl.lc'), 'data_loss', NULL, '0x00000000000000000200',
                              'dbo_lc', '{"cause": "cleanup"}', 'data_lost', 'purged');
SELECT finalize.resume_table('pl.lc');
SELECT finalize_internal.resume_after_loss(finalize_internal.tracked_id('pl.lc'), '0x000000000000000001FF',
                                   '2026-11-29 12:20+00', '2026-11-29 12:20+00', 'dbo_lc', false, '{}');
SELECT finalize.record_range('pl.lc', '0x000000000000000001FF', '0x00000000000000000300', '2026-11-29 14:00+00');
SELECT finalize.finalized_until('pl.lc'), finalize.finalized_until(ARRAY['pl.lc', 'pl.lb']) AS with_lb,
       finalize.is_final('pl.lc', '2026-11-29 13:00+00') AS hour_13, finalize_internal.loss_cap(finalize_internal.tracked_id('pl.lc'));
SELECT finalize.acknowledge_loss('pl.lc', '-infinity', '2026-11-29 13:00+00', 'rebuilt from scratch');
SELECT finalize.finalized_until('pl.lc'), finalize.is_final('pl.lc', '2026-11-29 12:00+00') AS hour_12;

-- Untracking with cascade untracks each dependent once, also in a diamond:
-- pl.dm3 uses pl.dm2 and pl.dm1, pl.dm2 uses pl.dm1.
SELECT finalize.track_table('pl.dm1', 'erp', 'dbo.dm1') > 0 AS tracked;
SELECT finalize.track_derived('pl.dm2', ARRAY['pl.dm1']) > 0 AS derived;
SELECT finalize.track_derived('pl.dm3', ARRAY['pl.dm2', 'pl.dm1']) > 0 AS derived;
SELECT finalize.untrack_table('pl.dm1', true, true);
SELECT table_name, untracked_at IS NOT NULL AS untracked FROM finalize.tracked_table
 WHERE table_name LIKE 'pl.dm%' ORDER BY table_name;
SELECT finalize.track_table('pl.dm1', 'erp', 'dbo.dm1') > 0 AS tracked;
SELECT finalize.track_derived('pl.dm2', ARRAY['pl.dm1']) > 0 AS derived;
SELECT finalize.track_derived('pl.dm3', ARRAY['pl.dm1', 'pl.dm2']) > 0 AS derived;
SELECT finalize.track_derived('pl.dm0', ARRAY['pl.dm3', 'pl.dm2']) > 0 AS derived;
SELECT finalize.untrack_table('pl.dm1', false, true);
SELECT count(*) AS left_active FROM finalize.tracked_table WHERE table_name LIKE 'pl.dm%' AND untracked_at IS NULL;
SELECT finalize.untrack_table(t, false)
  FROM unnest(ARRAY['pl.la_copy', 'pl.la_daily', 'pl.la_job', 'pl.la_view', 'pl.la', 'pl.lb_job', 'pl.lb', 'pl.lc']) AS t;

-- The release gate works on a derived table as on a tracked one: a final
-- period is released, a period that is not final is refused with the
-- reason. The local store lives in the data directory.
SELECT current_setting('data_directory') || '/pipelines_store' AS store \gset
SELECT format('mkdir -p %s/day=2026-11-29/g1 && cat > %s/day=2026-11-29/g1/part-0.csv', :'store', :'store') AS mk1,
       format('mkdir -p %s/day=2026-11-30/g1 && cat > %s/day=2026-11-30/g1/part-0.csv', :'store', :'store') AS mk2,
       format('rm -rf %s; cat > /dev/null', :'store') AS rm \gset
COPY (SELECT 'x') TO PROGRAM :'mk1';
COPY (SELECT 'x') TO PROGRAM :'mk2';
SELECT finalize.track_derived('pl.revenue', ARRAY['pl.orders'], '1 day') > 0 AS derived;
SELECT finalize.register_partition('pl.revenue', 'day=2026-11-29', 'day=2026-11-29/g1/');
SELECT finalize.register_partition('pl.revenue', 'day=2026-11-30', 'day=2026-11-30/g1/');
SELECT jsonb_build_object('table', 'pl.revenue', 'partition', 'day=2026-11-29', 'generation', 'g1',
                          'store', 'file://' || :'store', 'prefix', 'day=2026-11-29/g1/',
                          'period_start', '2026-11-29 00:00+00',
                          'files', jsonb_build_object('day=2026-11-29/g1/part-0.csv', 2)) AS final_day,
       jsonb_build_object('table', 'pl.revenue', 'partition', 'day=2026-11-30', 'generation', 'g1',
                          'store', 'file://' || :'store', 'prefix', 'day=2026-11-30/g1/',
                          'period_start', '2026-11-30 00:00+00',
                          'files', jsonb_build_object('day=2026-11-30/g1/part-0.csv', 2)) AS open_day \gset
SELECT released, generation, problems FROM finalize.release_gate(:'final_day');
SELECT released, generation, jsonb_path_query_array(problems, '$[*].code') AS codes,
       problems -> 0 ->> 'detail' AS detail
  FROM finalize.release_gate(:'open_day');
SELECT finalize.released_generation('pl.revenue', 'day=2026-11-29') AS day_29,
       finalize.released_generation('pl.revenue', 'day=2026-11-30') AS day_30;
COPY (SELECT 'x') TO PROGRAM :'rm';

SELECT finalize.untrack_table(t, false)
  FROM unnest(ARRAY['pl.revenue', 'pl.events_6h', 'pl.events_daily', 'pl.events', 'pl.orders']) AS t;
DELETE FROM finalize.tracked_table WHERE table_name LIKE 'pl.%' AND untracked_at IS NOT NULL;
SELECT count(*) AS left_over FROM finalize.tracked_table;
DROP VIEW verdicts;
DROP SERVER erp;
DROP ROLE regress_pipe_a, regress_pipe_b, regress_pl_admin, regress_pl_reader;
