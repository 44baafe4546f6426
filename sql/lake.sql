-- Iceberg consumers (docs/lake.md): the finalize_iceberg wrapper's options,
-- add_consumer's checks, and the rule that nobody reports for a consumer
-- whose progress is an Iceberg table's. What the lake worker reads is tested
-- against a real REST catalog (test/peers/iceberg/); here, only what
-- sessions see, and _lake_observe as the worker calls it.
\i sql/include/preamble.sql

-- Servers: a uri is required; plain http only to a loopback host.
CREATE SERVER cat1 FOREIGN DATA WRAPPER finalize_iceberg;
CREATE SERVER cat1 FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri 'http://catalog.example.com');
CREATE SERVER cat1 FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri 'https://u:p@catalog.example.com');
CREATE SERVER cat1 FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri 'https://catalog.example.com', token 'secret-token');
CREATE SERVER cat1 FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri 'https://catalog.example.com', poll_interval '0.5 seconds');
CREATE SERVER cat1 FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri 'https://catalog.example.com', prefix '../x');
CREATE SERVER cat1 FOREIGN DATA WRAPPER finalize_iceberg OPTIONS (uri 'https://catalog.example.com', signing_name 's3');
CREATE SERVER cat1 FOREIGN DATA WRAPPER finalize_iceberg
    OPTIONS (uri 'http://127.0.0.1:8181', warehouse 'wh', poll_interval '2 seconds', timeout '5 seconds');

-- User mappings: one kind of credentials, complete, secrets never echoed.
CREATE USER MAPPING FOR CURRENT_USER SERVER cat1 OPTIONS (token 'short');
CREATE USER MAPPING FOR CURRENT_USER SERVER cat1 OPTIONS (client_id 'finalize');
CREATE USER MAPPING FOR CURRENT_USER SERVER cat1 OPTIONS (token 'long-enough-token', access_key_id 'AKIA', secret_access_key 'long-enough-key');
CREATE USER MAPPING FOR CURRENT_USER SERVER cat1 OPTIONS (uri 'https://elsewhere.example.com');
CREATE USER MAPPING FOR CURRENT_USER SERVER cat1 OPTIONS (client_id 'finalize', client_secret 'long-enough-secret');

-- Consumers: the server must be an Iceberg catalog, the names well formed.
CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
SELECT finalize.track_table('lk.orders', 'erp', 'dbo.orders') > 0 AS tracked;
SELECT finalize.add_consumer('lk.orders', 'spark', iceberg_server => 'nope', iceberg_table => 'ns.orders');
SELECT finalize.add_consumer('lk.orders', 'spark', iceberg_server => 'erp', iceberg_table => 'ns.orders');
SELECT finalize.add_consumer('lk.orders', 'spark', iceberg_server => 'cat1', iceberg_table => 'orders');
SELECT finalize.add_consumer('lk.orders', 'spark', iceberg_server => 'cat1', iceberg_table => 'ns..orders');
SELECT finalize.add_consumer('lk.orders', 'spark', iceberg_server => 'cat1', iceberg_table => 'ns.orders', ref => '');
SELECT finalize.add_consumer('lk.orders', 'spark', iceberg_server => 'cat1', iceberg_table => 'ns.orders');
SELECT finalize.add_consumer('lk.orders', 'spark', iceberg_server => 'cat1', iceberg_table => 'ns.orders');
SELECT consumer, required, reporter, iceberg_server, iceberg_table, iceberg_ref, condition
  FROM finalize.consumers WHERE table_name = 'lk.orders';

-- Nobody reports for it.
SELECT finalize.report_progress('lk.orders', 'spark', '0x00000000000000000100');

-- The lake worker's write (_lake_observe), for the declaration it polled
-- and the state it judged (head, LSN): a condition, then an LSN that only
-- moves forward, then a rollback, which records a loss; then a rollback to
-- nothing provable. An observation for another declaration (dropped and
-- added again mid-poll), or judged against another state (a reset
-- meanwhile), changes nothing.
\set lake_id '(SELECT l.lake_id FROM finalize.lake_consumer l WHERE l.consumer = ''spark'')'
SELECT finalize_internal.lake_observe(:lake_id, NULL, NULL, 'catalog_unreachable', 'no answer', NULL, NULL, NULL, NULL,
                              NULL, false, NULL, NULL) AS moved;
SELECT consumer, condition, resolve_error FROM finalize.consumers WHERE table_name = 'lk.orders';
SELECT table_name, consumer_conditions FROM finalize.status WHERE table_name = 'lk.orders';
SELECT finalize_internal.lake_observe(:lake_id, NULL, NULL, NULL, NULL, 7, 3, 7, '0x00000000000000000200', 'u1', false,
                              NULL, NULL) AS moved;
SELECT finalize_internal.lake_observe(:lake_id, 7, '0x00000000000000000200', NULL, NULL, 8, 4, 8, '0x00000000000000000100',
                              'u1', false, NULL, NULL) AS moved;
SELECT finalize_internal.lake_observe(:lake_id + 1000, 7, '0x00000000000000000200', NULL, NULL, 9, 5, 9,
                              '0x00000000000000000900', 'u1', false, NULL, NULL) AS moved;
SELECT finalize_internal.lake_observe(:lake_id, 99, '0x00000000000000000200', NULL, NULL, 9, 5, 9,
                              '0x00000000000000000900', 'u1', false, NULL, NULL) AS moved;
SELECT consumer, reported_lsn, condition, iceberg_snapshot_id FROM finalize.consumers WHERE table_name = 'lk.orders';
SELECT finalize_internal.lake_observe(:lake_id, 7, '0x00000000000000000200', NULL, NULL, 5, 1, 5, '0x00000000000000000100',
                              'u1', true, '0x00000000000000000100', 'the newest LSN property on the ref went down') AS moved;
SELECT consumer, reported_lsn, commit_time, iceberg_snapshot_id FROM finalize.consumers WHERE table_name = 'lk.orders';
SELECT finalize_internal.lake_observe(:lake_id, 5, '0x00000000000000000100', NULL, NULL, 6, 2, NULL, NULL, 'u2', true,
                              NULL, 'the table was dropped and created again (its table-uuid changed)') AS moved;
SELECT consumer, reported_lsn, commit_time, iceberg_snapshot_id FROM finalize.consumers WHERE table_name = 'lk.orders';
SELECT lost_from, lost_to, from_lsn, to_lsn FROM finalize.loss l JOIN finalize.tracked_table t USING (table_id)
 WHERE t.table_name = 'lk.orders' ORDER BY l.loss_id;
SELECT kind, severity, subject, count FROM finalize.alerts WHERE table_name = 'lk.orders';

-- Dropping the consumer forgets where it read.
SELECT finalize.drop_consumer('lk.orders', 'spark');
SELECT count(*) AS lake_consumers_left FROM finalize.lake_consumer;

-- Delta consumers (docs/delta.md): named arguments; positional calls still
-- resolve to the Iceberg form. The location, the store (by the rule the
-- worker opens it with) and lsn_from are checked.
SELECT finalize.add_consumer('lk.orders', 'rs', 'nope', 'ns.orders');
SELECT finalize.add_consumer('lk.orders', 'rs', delta_table => 'orders', store => 'file:///tmp/');
SELECT finalize.add_consumer('lk.orders', 'rs', delta_table => 'file:///tmp/a/../orders', store => 'file:///tmp/');
SELECT finalize.add_consumer('lk.orders', 'rs', delta_table => 's3://lake/orders/_delta_log', store => 'file:///tmp/');
SELECT finalize.add_consumer('lk.orders', 'rs', delta_table => 's3://lake/orders', store => 'nope');
SELECT finalize.add_consumer('lk.orders', 'rs', delta_table => 's3://lake/orders', store => 'erp');
SELECT finalize.add_consumer('lk.orders', 'rs', delta_table => 'file:///var/orders', store => 'file:///tmp/');
-- A URL with a query (a SAS token pasted with it) is no location of the store, and the query is not echoed.
CREATE SERVER lk_az FOREIGN DATA WRAPPER finalize_azure OPTIONS (account 'acct', container 'lake');
CREATE USER MAPPING FOR CURRENT_USER SERVER lk_az OPTIONS (account_key 'c2VjcmV0LWtleQ==');
SELECT finalize.add_consumer('lk.orders', 'rs', store => 'lk_az',
                             delta_table => 'https://acct.blob.core.windows.net/lake/orders?sv=2021&sig=S3CRETSIG');
DROP SERVER lk_az CASCADE;
SELECT finalize.add_consumer('lk.orders', 'rs', delta_table => 'file:///tmp/orders', store => 'file:///tmp/',
                             lsn_from => 'userMetadata.');
SELECT finalize.add_consumer('lk.orders', 'rs', delta_table => 'file:///tmp/orders/', store => 'file:///tmp/',
                             lsn_from => 'userMetadata');
SELECT consumer, required, iceberg_server, iceberg_table, delta_table, delta_store, delta_version, condition
  FROM finalize.consumers WHERE table_name = 'lk.orders';
SELECT finalize.report_progress('lk.orders', 'rs', '0x00000000000000000100');
-- A Delta consumer's observations and rollbacks go through the same lake_observe.
\set delta_id '(SELECT l.lake_id FROM finalize.lake_consumer l WHERE l.consumer = ''rs'')'
SELECT finalize_internal.lake_observe(:delta_id, NULL, NULL, 'log_malformed', 'Commit 3 cannot be read.', NULL, NULL,
                              NULL, NULL, NULL, false, NULL, NULL) AS moved;
SELECT consumer, condition, resolve_error FROM finalize.consumers WHERE table_name = 'lk.orders';
SELECT finalize_internal.lake_observe(:delta_id, NULL, NULL, NULL, NULL, 4, 1000, 4, '0x00000000000000000200', 'id1',
                              false, NULL, NULL) AS moved;
SELECT finalize_internal.lake_observe(:delta_id, 4, '0x00000000000000000200', NULL, NULL, 5, 1001, NULL,
                              '0x00000000000000000100', 'id1', true, '0x00000000000000000100',
                              'a RESTORE took the table back to an older version') AS moved;
SELECT consumer, reported_lsn, delta_version, condition FROM finalize.consumers WHERE table_name = 'lk.orders';
SELECT detail - 'lost_from' AS detail FROM finalize.facts WHERE table_name = 'lk.orders' AND event = 'data_loss'
 ORDER BY fact_id DESC LIMIT 1;
SELECT finalize.drop_consumer('lk.orders', 'rs');
DELETE FROM finalize.alert WHERE table_name = 'lk.orders';
DELETE FROM finalize.tracked_table WHERE table_name = 'lk.orders';
DROP SERVER erp;
DROP SERVER cat1 CASCADE;
