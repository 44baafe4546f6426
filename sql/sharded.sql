-- Sharded tables (docs/sharding.md): one lake table fed by the same SQL
-- Server table in many databases. Each shard is a tracked table of its
-- own (<table>/<shard>); the sharded table is final for a period once
-- every shard is. Ranges are recorded by hand through the write path (no
-- worker runs here) and, as in pipelines.sql, the scheduler's round that
-- lets a sharded table follow a session's writes is taken by :follow.
\i sql/include/preamble.sql
\set follow 'SELECT finalize_internal.refresh_derived() AS followed;'

CREATE SERVER sh_db01 FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'db01');
CREATE SERVER sh_db02 FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'db02');
CREATE SERVER sh_db03 FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'db03');
CREATE VIEW sh_verdicts AS
    SELECT t.table_name, t.kind, t.shard, w.source_until, w.finalized_until, w.loss_blocked
      FROM finalize.tracked_table t JOIN finalize.watermark w USING (table_id)
     WHERE t.untracked_at IS NULL AND t.table_name LIKE 'sh.orders%'
     ORDER BY t.table_id;

-- A sharded table and its shards.
SELECT finalize.track_sharded('sh.orders', ddl_policy => 'block') > 0 AS tracked;
-- Without a shard it is never final, and says why.
SELECT finalize.finalized_until('sh.orders') AS until, finalize.is_final('sh.orders', '2026-11-29 12:00+00') AS final;
SELECT reason FROM finalize.explain_verdict('sh.orders', '2026-11-29 12:00+00');
SELECT finalize.add_shard('sh.orders', 'db01', 'sh_db01', 'dbo.orders') > 0 AS added;
SELECT finalize.add_shard('sh.orders', 'db02', 'sh_db02', 'dbo.orders') > 0 AS added;
-- A server may hold several shards of a table, in different source tables.
SELECT finalize.add_shard('sh.orders', 't2', 'sh_db01', 'tenant2.orders') > 0 AS added;
SELECT table_name, kind, granularity, server_name, source_table, sharded_table, shard, shards, slowest_shard
  FROM finalize.status WHERE table_name LIKE 'sh.orders%' ORDER BY table_name;
-- Each shard follows its sharded table's policy (here ddl_policy block).
SELECT table_name, granularity, period_zone, ddl_policy, on_data_loss, start_from
  FROM finalize.tracked_table WHERE shard_of = finalize_internal.tracked_id('sh.orders') ORDER BY table_name;

-- Bad input: errors that name the object and say what to do.
SELECT finalize.track_sharded('sh.orders');
SELECT finalize.track_sharded('sh.bad', granularity => '5 months');
SELECT finalize.track_sharded('sh.bad', allowed_lateness => '1 hour');
SELECT finalize.track_sharded('sh.bad', period_zone => 'Mars/Olympus');
SELECT finalize.track_sharded(E'sh.bad\nname');
SELECT finalize.add_shard('sh.nosuch', 'x', 'sh_db01', 'dbo.orders');
SELECT finalize.add_shard('sh.orders/db01', 'x', 'sh_db01', 'dbo.orders');
SELECT finalize.add_shard('sh.orders', 'db01', 'sh_db03', 'dbo.orders');
SELECT finalize.add_shard('sh.orders', 'a/b', 'sh_db03', 'dbo.orders');
SELECT finalize.add_shard('sh.orders', ' ', 'sh_db03', 'dbo.orders');
SELECT finalize.add_shard('sh.orders', repeat('x', 64), 'sh_db03', 'dbo.orders');
SELECT finalize.add_shard('sh.orders', E'x\ty', 'sh_db03', 'dbo.orders');
SELECT finalize.add_shard('sh.orders', NULL, 'sh_db03', 'dbo.orders');
SELECT finalize.add_shard('sh.orders', 'db09', 'sh_db01', '[dbo].[orders]');
SELECT finalize.add_shard('sh.orders', 'db09', 'sh_nosuch', 'dbo.orders');
SELECT finalize.add_shard('sh.orders', 'db09', 'sh_db03', 'dbo.orders', start_from => 'soon');
SELECT finalize.drop_shard('sh.orders', 'db99');
SELECT finalize.drop_shard('sh.orders/db01', 'db01');
SELECT finalize.untrack_table('sh.orders/db01');
SELECT finalize.alter_tracked_table('sh.orders/db01', granularity => '1 day');
SELECT finalize.record_range('sh.orders', NULL, '0x00000000000000000100', '2026-11-29 12:10+00');
SELECT count(*) AS nothing_added FROM finalize.tracked_table WHERE table_name LIKE 'sh.bad%' OR table_name LIKE 'sh.orders/db09%';

-- The min rule: the sharded table is final as far as its least shard.
SELECT finalize.record_range('sh.orders/db01', NULL, '0x00000000000000000100', '2026-11-29 11:10+00');
SELECT finalize.record_range('sh.orders/db01', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 14:05+00',
                             3, 0, 0, '2026-11-29 12:10+00', '2026-11-29 13:40+00');
SELECT finalize.record_range('sh.orders/db02', NULL, '0x00000000000000000100', '2026-11-29 12:10+00');
-- a session moves only the shard it writes; the sharded table follows in the scheduler's round
SELECT * FROM sh_verdicts;
:follow
SELECT finalize.record_range('sh.orders/t2', NULL, '0x00000000000000000100', '2026-11-29 13:20+00');
:follow
SELECT * FROM sh_verdicts;
SELECT finalize.finalized_until('sh.orders') AS until,
       finalize.is_final('sh.orders', '2026-11-29 11:00+00') AS hour_11,
       finalize.is_final('sh.orders', '2026-11-29 12:00+00') AS hour_12;
-- Each shard on its own.
SELECT finalize.is_final('sh.orders/db01', '2026-11-29 13:00+00') AS db01_13,
       finalize.is_final('sh.orders/t2', '2026-11-29 12:00+00') AS t2_12,
       finalize.is_final('sh.orders/db02', '2026-11-29 12:00+00') AS db02_12,
       finalize.is_final(ARRAY['sh.orders/db01', 'sh.orders/t2'], '2026-11-29 12:00+00') AS both_12;
-- explain_verdict names the shards that hold the table back, least first, with their own reasons.
SELECT reason FROM finalize.explain_verdict('sh.orders', '2026-11-29 12:00+00');
SELECT reason FROM finalize.explain_verdict('sh.orders', '2026-11-29 13:00+00');
SELECT is_final, reason FROM finalize.explain_verdict('sh.orders', '2026-11-29 11:00+00');
SELECT table_name, finalized_until, shards, slowest_shard FROM finalize.status WHERE table_name = 'sh.orders';
SELECT period_start, is_final, covered, inserts FROM finalize.changes_by_period('sh.orders', '2026-11-29 11:00+00', '2026-11-29 13:00+00');
SELECT period_start, is_final, covered, inserts FROM finalize.changes_by_period('sh.orders/db01', '2026-11-29 11:00+00', '2026-11-29 14:00+00');

-- A new shard holds the verdict until its first verdict; what was final stays final.
SELECT finalize.add_shard('sh.orders', 'db03', 'sh_db03', 'dbo.orders') > 0 AS added;
SELECT finalize.record_range('sh.orders/db02', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 15:10+00');
SELECT finalize.record_range('sh.orders/t2', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 15:20+00');
:follow
SELECT * FROM sh_verdicts;
SELECT regexp_replace(reason, 'tracked at [0-9: .-]+[+]00', 'tracked at <its creation>') AS reason
  FROM finalize.explain_verdict('sh.orders', '2026-11-29 12:00+00');
SELECT finalize.is_final('sh.orders', '2026-11-29 11:00+00') AS still_final;
SELECT finalize.record_range('sh.orders/db03', NULL, '0x00000000000000000100', '2026-11-29 14:30+00');
:follow
SELECT * FROM sh_verdicts;

-- Dropping a shard lets the verdict go on, never back.
SELECT finalize.record_range('sh.orders/db01', '0x00000000000000000200', '0x00000000000000000300', '2026-11-29 16:05+00');
SELECT finalize.record_range('sh.orders/db02', '0x00000000000000000200', '0x00000000000000000300', '2026-11-29 16:10+00');
SELECT finalize.record_range('sh.orders/t2', '0x00000000000000000200', '0x00000000000000000300', '2026-11-29 16:20+00');
:follow
SELECT finalize.finalized_until('sh.orders') AS held_by_db03;
SELECT finalize.drop_shard('sh.orders', 'db03');
SELECT * FROM sh_verdicts;
-- Added again under the same label, it is a new shard (a fresh verdict) that holds the table
-- from now on: the verdict stays where it is.
SELECT finalize.add_shard('sh.orders', 'db03', 'sh_db03', 'dbo.orders') > 0 AS added;
:follow
SELECT * FROM sh_verdicts;
SELECT table_name, untracked FROM finalize.facts WHERE table_name = 'sh.orders/db03' ORDER BY fact_id;
SELECT finalize.drop_shard('sh.orders', 'db03', keep_facts => false);
-- the first db03 is kept (untracked, with its facts), the second is gone
SELECT table_name, untracked_at IS NOT NULL AS untracked FROM finalize.tracked_table WHERE table_name = 'sh.orders/db03';

-- Consumers: declared on the sharded table, a consumer of every shard, now and when one is added.
CREATE ROLE regress_sh_sink;
SELECT finalize.add_consumer('sh.orders', 'sink', reporter => 'regress_sh_sink');
SELECT table_name, consumer, required, reporter, sharded_table, shard, table_wide
  FROM finalize.consumers WHERE table_name LIKE 'sh.orders%' ORDER BY table_name;
SELECT finalize.record_range('sh.orders/db01', '0x00000000000000000300', '0x00000000000000000400', '2026-11-29 17:05+00');
SELECT finalize.record_range('sh.orders/db02', '0x00000000000000000300', '0x00000000000000000400', '2026-11-29 17:10+00');
SELECT finalize.record_range('sh.orders/t2', '0x00000000000000000300', '0x00000000000000000400', '2026-11-29 17:20+00');
:follow
SELECT * FROM sh_verdicts;
-- Reports name the shard (a Debezium connector over many databases: its record's source.db).
SELECT finalize.report_progress('sh.orders', 'sink', '0x00000000000000000400');
SELECT finalize.report_processed('sh.orders', 'sink', '2026-11-29 17:00+00');
SELECT finalize.report_progress('sh.orders/db01', 'sink', '00000000:00000000:0400');
SELECT finalize.report_progress('sh.orders/db02', 'sink', '0x00000000000000000400');
SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('sh.orders/db01'), 'sink',
                                   '0x00000000000000000400', '0x00000000000000000400', '2026-11-29 17:05+00');
SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('sh.orders/db02'), 'sink',
                                   '0x00000000000000000400', '0x00000000000000000400', '2026-11-29 17:10+00');
:follow
-- db01 and db02 moved; t2's consumer has not reported, so it and the table wait.
SELECT * FROM sh_verdicts;
SELECT reason FROM finalize.explain_verdict('sh.orders', '2026-11-29 16:00+00');
SELECT finalize.report_progress('sh.orders/t2', 'sink', '0x00000000000000000400');
SELECT finalize_internal.consumer_resolved(finalize_internal.tracked_id('sh.orders/t2'), 'sink',
                                   '0x00000000000000000400', '0x00000000000000000400', '2026-11-29 17:20+00');
:follow
SELECT * FROM sh_verdicts;
-- A table-wide consumer is changed and dropped on the sharded table; a shard may only reset it.
SELECT finalize.drop_consumer('sh.orders/db01', 'sink');
SELECT finalize.alter_consumer('sh.orders/db01', 'sink', required => false);
SELECT finalize.alter_consumer('sh.orders/db01', 'sink', reset => true);
SELECT reported_lsn FROM finalize.consumers WHERE table_name = 'sh.orders/db01' AND consumer = 'sink';
SELECT finalize.add_consumer('sh.orders', 'sink');
SELECT finalize.alter_consumer('sh.orders', 'nobody', required => false);
-- One declared on a shard alone stays that shard's.
SELECT finalize.add_consumer('sh.orders/db02', 'audit', required => false);
SELECT finalize.add_consumer('sh.orders', 'audit');
SELECT finalize.drop_consumer('sh.orders/db02', 'audit');
-- A shard added later gets the table-wide consumer, and holds the table until it reports.
SELECT finalize.add_shard('sh.orders', 'db04', 'sh_db03', 'dbo.orders') > 0 AS added;
SELECT table_name, consumer, reported_lsn, table_wide FROM finalize.consumers
 WHERE table_name = 'sh.orders/db04';
SELECT finalize.record_range('sh.orders/db04', NULL, '0x00000000000000000100', '2026-11-29 18:10+00');
SELECT finalize.record_range('sh.orders/db02', '0x00000000000000000400', '0x00000000000000000500', '2026-11-29 18:12+00');
:follow
SELECT * FROM sh_verdicts;
-- Made optional on the sharded table, it releases every shard at once; dropped, it is gone from all.
SELECT finalize.alter_consumer('sh.orders', 'sink', required => false);
SELECT * FROM sh_verdicts;
SELECT finalize.drop_consumer('sh.orders', 'sink');
SELECT finalize.drop_consumer('sh.orders', 'sink');
SELECT count(*) AS sink_rows FROM finalize.consumers WHERE consumer = 'sink';

-- Losses are per shard: a shard's loss holds the sharded table's periods it
-- touches until it is acknowledged on that shard.
SELECT finalize_internal.record_event(finalize_internal.tracked_id('sh.orders/db02'), 'data_loss', '0x00000000000000000500',
                              '0x00000000000000000700', 'dbo_orders', '{"cause": "cleanup"}', 'data_lost',
                              'Rows were purged before they were read.');
SELECT finalize.resume_table('sh.orders/db02');
SELECT finalize_internal.resume_after_loss(finalize_internal.tracked_id('sh.orders/db02'), '0x000000000000000006FF',
                                   '2026-11-29 20:20+00', '2026-11-29 20:20+00', 'dbo_orders', false, '{}');
SELECT finalize.record_range('sh.orders/db02', '0x000000000000000006FF', '0x00000000000000000800', '2026-11-29 22:05+00');
SELECT finalize.record_range('sh.orders/db01', '0x00000000000000000400', '0x00000000000000000500', '2026-11-29 22:10+00');
SELECT finalize.record_range('sh.orders/t2', '0x00000000000000000400', '0x00000000000000000500', '2026-11-29 22:15+00');
SELECT finalize.record_range('sh.orders/db04', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 22:20+00');
:follow
SELECT * FROM sh_verdicts;
-- Hours 18 to 20 intersect db02's lost range [18:12, 20:20]: not final in db02 nor in the table.
SELECT p, finalize.is_final('sh.orders', p) AS sharded, finalize.is_final('sh.orders/db02', p) AS db02,
       finalize.is_final('sh.orders/db01', p) AS db01
  FROM unnest(ARRAY['2026-11-29 17:00+00', '2026-11-29 18:00+00', '2026-11-29 20:00+00',
                    '2026-11-29 21:00+00']::timestamptz[]) AS p;
SELECT finalize.finalized_until('sh.orders') AS until;
SELECT table_name, loss_blocked FROM finalize.status WHERE table_name LIKE 'sh.orders%' ORDER BY table_name;
SELECT is_final, reason FROM finalize.explain_verdict('sh.orders', '2026-11-29 19:00+00');
-- Acknowledged on the sharded table: refused, it names the shard to acknowledge on.
SELECT finalize.acknowledge_loss('sh.orders', '2026-11-29 18:00+00', '2026-11-29 21:00+00', 're-snapshotted');
-- Nor can the shard be dropped while its loss holds the table.
SELECT finalize.drop_shard('sh.orders', 'db02');
SELECT finalize.acknowledge_loss('sh.orders/db02', '2026-11-29 18:00+00', '2026-11-29 21:00+00',
                                 'db02 orders re-snapshotted into shard=db02, ticket DATA-31');
SELECT p, finalize.is_final('sh.orders', p) AS sharded
  FROM unnest(ARRAY['2026-11-29 18:00+00', '2026-11-29 20:00+00']::timestamptz[]) AS p;
SELECT finalize.finalized_until('sh.orders') AS until;

-- The release gate: a partition holds one shard (shard=<label>, or the manifest's "shard") and
-- is final when that shard is; a shard the table does not have is unknown_shard.
SELECT finalize.record_range('sh.orders/db01', '0x00000000000000000500', '0x00000000000000000600', '2026-11-30 01:05+00');
:follow
SELECT table_name, finalized_until FROM finalize.status WHERE table_name LIKE 'sh.orders%' ORDER BY table_name;
SELECT finalize.set_projection('sh.orders', 'shard={shard}/dt={date}/hour={hour}/', '2026-11-01', '2026-12-01');
SELECT finalize.set_projection('sh.orders/db01', 'shard={shard}/dt={date}/', '2026-11-01', '2026-12-01');
SELECT finalize.render_location('shard={shard}/dt={date}/hour={hour}/', '2026-11-29 23:00+00', 'UTC', 'db07');
-- Hour 23 is final in db01, not in the table (db02 is at 22:00).
SELECT code FROM jsonb_to_recordset((finalize.release_gate(
    '{"table": "sh.orders", "partition": "shard=db01/dt=2026-11-29/hour=23", "generation": "g1",
      "store": "file:///tmp", "prefix": "shard=db01/dt=2026-11-29/hour=23/",
      "period_start": "2026-11-29T23:00:00Z", "empty": true, "files": {}}')).problems) AS x(code text);
SELECT code FROM jsonb_to_recordset((finalize.release_gate(
    '{"table": "sh.orders", "partition": "dt=2026-11-29/hour=23", "shard": "db02", "generation": "g1",
      "store": "file:///tmp", "prefix": "shard=db02/dt=2026-11-29/hour=23/",
      "period_start": "2026-11-29T23:00:00Z", "empty": true, "files": {}}')).problems) AS x(code text);
SELECT code, detail FROM jsonb_to_recordset((finalize.release_gate(
    '{"table": "sh.orders", "partition": "shard=db77/dt=2026-11-29/hour=23", "generation": "g1",
      "store": "file:///tmp", "prefix": "shard=db77/dt=2026-11-29/hour=23/",
      "period_start": "2026-11-29T23:00:00Z", "empty": true, "files": {}}')).problems) AS x(code text, detail text)
 WHERE code = 'unknown_shard';
-- A partition of no shard holds them all: final when every shard is.
SELECT code FROM jsonb_to_recordset((finalize.release_gate(
    '{"table": "sh.orders", "partition": "dt=2026-11-29/hour=23", "generation": "g1",
      "store": "file:///tmp", "prefix": "all/dt=2026-11-29/hour=23/",
      "period_start": "2026-11-29T23:00:00Z", "empty": true, "files": {}}')).problems) AS x(code text);
SELECT partition, released, report -> 'catalog' ->> 'shard' AS shard, report -> 'catalog' ->> 'location' AS location
  FROM finalize.release WHERE table_id = finalize_internal.tracked_id('sh.orders') ORDER BY release_id;
-- Malformed: a "shard" the partition key contradicts, two shards, or a table that is not sharded.
SELECT * FROM finalize.release_gate(
    '{"table": "sh.orders", "partition": "shard=db01/hour=23", "shard": "db02", "generation": "g1",
      "store": "file:///tmp", "files": {}}');
SELECT * FROM finalize.release_gate(
    '{"table": "sh.orders", "partition": "shard=db01/shard=db02", "generation": "g1",
      "store": "file:///tmp", "files": {}}');
SELECT * FROM finalize.release_gate(
    '{"table": "sh.orders/db01", "partition": "hour=23", "shard": "db01", "generation": "g1",
      "store": "file:///tmp", "files": {}}');
SELECT * FROM finalize.release_gate(
    '{"table": "sh.orders", "partition": "shard=db01/hour=23", "shard": 7, "generation": "g1",
      "store": "file:///tmp", "files": {}}');

-- A manifest's "shard" is believed only where the catalog binds the partition to that shard:
-- its key names it (shard=<label>), or it is not registered and a projection with {shard}
-- places it. Elsewhere its location may hold every shard: it is checked as a partition of
-- every shard, and refused (unknown_shard). g.orders: shard a is final until 02:00 on the
-- 30th, shard b until 11:00 on the 29th.
SELECT finalize.track_sharded('g.orders') > 0 AS tracked;
SELECT finalize.add_shard('g.orders', 'a', 'sh_db01', 'dbo.items') > 0 AS added;
SELECT finalize.add_shard('g.orders', 'b', 'sh_db02', 'dbo.items') > 0 AS added;
SELECT finalize.record_range('g.orders/a', NULL, '0x00000000000000000100', '2026-11-29 09:10+00');
SELECT finalize.record_range('g.orders/a', '0x00000000000000000100', '0x00000000000000000200', '2026-11-30 02:10+00');
SELECT finalize.record_range('g.orders/b', NULL, '0x00000000000000000100', '2026-11-29 09:10+00');
SELECT finalize.record_range('g.orders/b', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 11:10+00');
:follow
CREATE FUNCTION g_gate(partition text, prefix text, shard text, period_start timestamptz,
                       OUT released boolean, OUT codes text)
LANGUAGE sql
BEGIN ATOMIC
    SELECT g.released, (SELECT string_agg(p ->> 'code', ' ' ORDER BY n) FROM jsonb_array_elements(g.problems)
                                                                       WITH ORDINALITY AS x(p, n))
      FROM finalize.release_gate(jsonb_build_object('table', 'g.orders', 'partition', partition,
                                                    'generation', 'g1', 'store', 'file:///tmp', 'prefix', prefix,
                                                    'period_start', period_start, 'empty', true, 'files', '{}'::jsonb)
                                 || CASE WHEN shard IS NULL THEN '{}' ELSE jsonb_build_object('shard', shard) END) AS g;
END;
CREATE VIEW g_last_problem AS
    SELECT x.code, x.detail FROM finalize.release r CROSS JOIN jsonb_to_recordset(r.problems) AS x(code text, detail text)
     WHERE r.release_id = (SELECT max(release_id) FROM finalize.release) AND x.code = 'unknown_shard';
SELECT finalize.is_final('g.orders', '2026-11-29 23:00+00') AS table_23, finalize.is_final('g.orders/a', '2026-11-29 23:00+00') AS a_23;
-- A partition registered at a location of every shard: not final without "shard", nor with it.
SELECT finalize.register_partition('g.orders', 'dt=2026-11-29/hour=23', 'all/dt=2026-11-29/hour=23/', '2026-11-29 23:00+00');
SELECT * FROM g_gate('dt=2026-11-29/hour=23', 'all/dt=2026-11-29/hour=23/', NULL, '2026-11-29 23:00+00');
SELECT * FROM g_gate('dt=2026-11-29/hour=23', 'all/dt=2026-11-29/hour=23/', 'a', '2026-11-29 23:00+00');
SELECT * FROM g_last_problem;
SELECT finalize.released_generation('g.orders', 'dt=2026-11-29/hour=23') AS released_23;
-- A projection whose template has no {shard}: the same.
SELECT finalize.set_projection('g.orders', 'dt={date}/hour={hour}/', '2026-11-01', '2026-12-01');
SELECT * FROM g_gate('dt=2026-11-29/hour=22', 'dt=2026-11-29/hour=22/', 'a', '2026-11-29 22:00+00');
SELECT * FROM g_last_problem;
-- With {shard}, the projection binds the partition to the manifest's shard (the one location
-- it accepts); a registration still wins over it.
SELECT finalize.set_projection('g.orders', 'db={shard}/dt={date}/hour={hour}/', '2026-11-01', '2026-12-01');
SELECT * FROM g_gate('dt=2026-11-29/hour=22', 'dt=2026-11-29/hour=22/', 'a', '2026-11-29 22:00+00');
SELECT * FROM g_gate('dt=2026-11-29/hour=22', 'db=a/dt=2026-11-29/hour=22/', 'a', '2026-11-29 22:00+00');
SELECT * FROM g_gate('dt=2026-11-29/hour=23', 'db=a/dt=2026-11-29/hour=23/', 'a', '2026-11-29 23:00+00');
-- A partition keeps the scope it was published with (its marker is keyed by the partition
-- alone): released as shard a's, it is never released as shard b's, though b is final too.
SELECT * FROM g_gate('dt=2026-11-29/hour=10', 'db=a/dt=2026-11-29/hour=10/', 'a', '2026-11-29 10:00+00');
SELECT * FROM g_gate('dt=2026-11-29/hour=10', 'db=b/dt=2026-11-29/hour=10/', 'b', '2026-11-29 10:00+00');
SELECT * FROM g_last_problem;
-- Shard b's partitions under keys of their own are released.
SELECT * FROM g_gate('db=b/dt=2026-11-29/hour=10', 'db=b/dt=2026-11-29/hour=10/', 'b', '2026-11-29 10:00+00');
SELECT * FROM g_gate('shard=b/dt=2026-11-29/hour=10', 'db=b/dt=2026-11-29/hour=10/', NULL, '2026-11-29 10:00+00');
SELECT partition, generation, prefix FROM finalize.published
 WHERE table_id = finalize_internal.tracked_id('g.orders') ORDER BY partition;
SELECT partition, released, report -> 'catalog' ->> 'shard' AS shard, report -> 'catalog' ->> 'location' AS location
  FROM finalize.release WHERE table_id = finalize_internal.tracked_id('g.orders') ORDER BY release_id;
-- A release publishes its whole location: where the catalog places another shard's partition
-- (or every shard's) at it, one shard's verdict does not release it, however the release
-- names the shard. Shard b is final until 11:00: hours 20 to 23 are shard a's alone.
CREATE FUNCTION g_gate_on(tbl text, partition text, prefix text, period_start timestamptz,
                          generation text DEFAULT 'g1', OUT released boolean, OUT codes text)
LANGUAGE sql
BEGIN ATOMIC
    SELECT g.released, (SELECT string_agg(p ->> 'code', ' ' ORDER BY n) FROM jsonb_array_elements(g.problems)
                                                                       WITH ORDINALITY AS x(p, n))
      FROM finalize.release_gate(jsonb_build_object('table', tbl, 'partition', partition, 'generation', generation,
                                                    'store', 'file:///tmp', 'prefix', prefix,
                                                    'period_start', period_start, 'empty', true,
                                                    'files', '{}'::jsonb)) AS g;
END;
-- A shard named as the table, at the location the sharded table registers for every shard.
SELECT finalize.register_partition('g.orders/a', 'hour=23', 'all/dt=2026-11-29/hour=23/', '2026-11-29 23:00+00');
SELECT * FROM g_gate_on('g.orders/a', 'hour=23', 'all/dt=2026-11-29/hour=23/', '2026-11-29 23:00+00');
SELECT * FROM g_last_problem;
-- ... or at the location the sharded table's projection gives shard b.
SELECT finalize.register_partition('g.orders/a', 'hour=22', 'db=b/dt=2026-11-29/hour=22/', '2026-11-29 22:00+00');
SELECT * FROM g_gate_on('g.orders/a', 'hour=22', 'db=b/dt=2026-11-29/hour=22/', '2026-11-29 22:00+00');
SELECT * FROM g_last_problem;
-- A key that names the shard, placed by a template without {shard}: every shard's location.
SELECT finalize.set_projection('g.orders', 'dt={date}/hour={hour}/', '2026-11-01', '2026-12-01');
SELECT * FROM g_gate_on('g.orders', 'shard=a/dt=2026-11-29/hour=21', 'dt=2026-11-29/hour=21/', '2026-11-29 21:00+00');
SELECT * FROM g_last_problem;
-- A location registered for two shards, by key or by shard.
SELECT finalize.register_partition('g.orders', 'shard=b/hour=20', 'both/hour=20/', '2026-11-29 20:00+00');
SELECT finalize.register_partition('g.orders', 'shard=a/hour=20', 'both/hour=20/', '2026-11-29 20:00+00');
SELECT * FROM g_gate_on('g.orders', 'shard=a/hour=20', 'both/hour=20/', '2026-11-29 20:00+00');
SELECT finalize.register_partition('g.orders/b', 'hour=20', 'two/hour=20/', '2026-11-29 20:00+00');
SELECT finalize.register_partition('g.orders/a', 'hour=20', 'two/hour=20/', '2026-11-29 20:00+00');
SELECT * FROM g_gate_on('g.orders/a', 'hour=20', 'two/hour=20/', '2026-11-29 20:00+00');
-- A shard's own location, which nothing else places anything at, is its own.
SELECT finalize.register_partition('g.orders/a', 'hour=19', 'own/a/hour=19/', '2026-11-29 19:00+00');
SELECT * FROM g_gate_on('g.orders/a', 'hour=19', 'own/a/hour=19/', '2026-11-29 19:00+00');
-- A shard named as the table releases its own partitions, not one whose key names another shard.
SELECT finalize.register_partition('g.orders/a', 'shard=b/hour=18', 'own/b/hour=18/', '2026-11-29 18:00+00');
SELECT * FROM g_gate_on('g.orders/a', 'shard=b/hour=18', 'own/b/hour=18/', '2026-11-29 18:00+00');
SELECT * FROM g_last_problem;
SELECT finalize.register_partition('g.orders/a', 'shard=a/hour=18', 'own/a/hour=18/', '2026-11-29 18:00+00');
SELECT * FROM g_gate_on('g.orders/a', 'shard=a/hour=18', 'own/a/hour=18/', '2026-11-29 18:00+00');
-- Retirement: a shard's superseded generation inside the location the sharded table's
-- projection gives its period is live data, never listed for deletion.
SELECT finalize.register_partition('g.orders/a', 'hour=12', 'old/hour=12/', '2026-11-29 12:00+00');
SELECT * FROM g_gate_on('g.orders/a', 'hour=12', 'old/hour=12/', '2026-11-29 12:00+00');
SELECT finalize.register_partition('g.orders/a', 'hour=12', 'new/hour=12/', '2026-11-29 12:00+00');
SELECT * FROM g_gate_on('g.orders/a', 'hour=12', 'new/hour=12/', '2026-11-29 12:00+00', 'g2');
SELECT partition, generation, prefix FROM finalize.retired_generations('g.orders/a', '0');
SELECT finalize.set_projection('g.orders', 'old/hour={hour}/', '2026-11-01', '2026-12-01');
SELECT partition, generation, prefix FROM finalize.retired_generations('g.orders/a', '0');
DROP FUNCTION g_gate_on(text, text, text, timestamptz, text);
SELECT finalize.untrack_table('g.orders', keep_facts => false);
DROP VIEW g_last_problem;
DROP FUNCTION g_gate(text, text, text, timestamptz);

-- A shard whose sharded table is no longer tracked (left behind when an add_shard raced
-- untrack_table, before the two took the same lock: specs/shard_locks.spec) is untracked
-- on its own; nothing else could remove it.
SELECT finalize.track_sharded('g.orphans') > 0 AS tracked;
SELECT finalize.add_shard('g.orphans', 'a', 'sh_db03', 'dbo.items') > 0 AS added;
UPDATE finalize.tracked_table SET untracked_at = now() WHERE table_name = 'g.orphans';
SELECT finalize.drop_shard('g.orphans', 'a');
SELECT finalize.untrack_table('g.orphans/a');
SELECT table_name, untracked_at IS NOT NULL AS untracked FROM finalize.tracked_table
 WHERE table_name LIKE 'g.orphans%' ORDER BY table_name;
DELETE FROM finalize.tracked_table WHERE table_name LIKE 'g.orphans%';

-- Event time: the sharded table's event column and lateness policy are every shard's; its
-- event-time verdict is the least of theirs.
SELECT finalize.track_sharded('sh.events', '1 hour', event_time_column => 'created_at',
                              allowed_lateness => '30 minutes') > 0 AS tracked;
SELECT finalize.add_shard('sh.events', 'db01', 'sh_db01', 'dbo.events') > 0 AS added;
SELECT finalize.add_shard('sh.events', 'db02', 'sh_db02', 'dbo.events') > 0 AS added;
SELECT table_name, event_time_column, lateness_policy, allowed_lateness
  FROM finalize.tracked_table WHERE table_name LIKE 'sh.events%' ORDER BY table_name;
SELECT finalize.record_range('sh.events/db01', NULL, '0x00000000000000000100', '2026-11-29 10:00+00');
SELECT finalize.record_range('sh.events/db01', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 14:40+00',
                             2, 0, 0, '2026-11-29 12:10+00', '2026-11-29 13:50+00',
                             event_periods => '[{"period": "2026-11-29 12:00+00", "inserts": 1}, {"period": "2026-11-29 13:00+00", "inserts": 1}]',
                             first_event_time => '2026-11-29 12:05+00', last_event_time => '2026-11-29 13:45+00');
SELECT finalize.record_range('sh.events/db02', NULL, '0x00000000000000000100', '2026-11-29 13:20+00');
:follow
SELECT t.table_name, w.commit_until, w.finalized_until
  FROM finalize.tracked_table t JOIN finalize.watermark w USING (table_id)
 WHERE t.table_name LIKE 'sh.events%' AND t.untracked_at IS NULL ORDER BY t.table_name;
SELECT reason FROM finalize.explain_verdict('sh.events', '2026-11-29 12:00+00');
SELECT rows, allowance FROM finalize.lateness('sh.events');
SELECT period_start, is_final, covered, inserts FROM finalize.changes_by_event_period('sh.events', '2026-11-29 12:00+00', '2026-11-29 14:00+00');
-- Its settings change on every shard at once, and only there.
SELECT finalize.alter_tracked_table('sh.events', allowed_lateness => '45 minutes');
SELECT table_name, allowed_lateness FROM finalize.tracked_table WHERE table_name LIKE 'sh.events%' ORDER BY table_name;
SELECT finalize.alter_tracked_table('sh.events/db01', allowed_lateness => '1 hour');
SELECT finalize.alter_tracked_table('sh.events/db01', max_lag => '2 hours');
SELECT table_name, max_lag FROM finalize.tracked_table WHERE table_name LIKE 'sh.events%' ORDER BY table_name;
SELECT finalize.alter_tracked_table('sh.events', event_time_column => 'updated_at');

-- Untracking the sharded table untracks its shards with it.
SELECT finalize.untrack_table('sh.events');
SELECT table_name FROM finalize.status WHERE table_name LIKE 'sh.events%';
SELECT table_name, untracked_at IS NOT NULL AS untracked FROM finalize.tracked_table
 WHERE table_name LIKE 'sh.events%' ORDER BY table_name;
-- A derived table built from a shard: untracked with it only with cascade.
SELECT finalize.track_derived('sh.db01_daily', ARRAY['sh.orders/db01'], '1 day') > 0 AS derived;
SELECT finalize.drop_shard('sh.orders', 'db01');
SELECT finalize.untrack_table('sh.orders');
SELECT finalize.untrack_table('sh.orders', keep_facts => false, cascade => true);
SELECT count(*) AS left_behind FROM finalize.tracked_table WHERE table_name LIKE 'sh.%' AND untracked_at IS NULL;
DROP VIEW sh_verdicts;
DROP ROLE regress_sh_sink;
