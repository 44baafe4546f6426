-- The success_marker publication target (docs/publishing.md, "_SUCCESS
-- markers"): the options of a success_marker publication as
-- finalize_internal.publication_options_success_marker checks and completes
-- them, and what finalize.add_publication checks of the store (the server's
-- bucket; pg_write_server_files for file://). (test/peers/test_luigi.py
-- writes markers to a real S3 server and a directory.)
\i sql/include/preamble.sql

CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
CREATE SERVER lake_s3 FOREIGN DATA WRAPPER finalize_s3 OPTIONS (bucket 'lake');
CREATE SERVER lake_nobucket FOREIGN DATA WRAPPER finalize_s3;
SELECT finalize.track_table('sm.hourly', 'erp', 'dbo.orders') AS hourly_id \gset
-- Completed: format paimon by default; a directory may hold several periods.
SELECT finalize_internal.publication_options('success_marker', '{"location": "s3://lake/orders/dt={date}/hour={hour}/"}', :hourly_id);
SELECT finalize_internal.publication_options('success_marker', '{"location": "file:///srv/lake/orders/dt={date}/", "format": "empty"}', :hourly_id);
SELECT finalize_internal.publication_options('success_marker', '{"location": "s3://lake/y={year}/m={month}/d={day}/", "format": "s3a"}', :hourly_id);
-- Refused, each naming the option.
SELECT finalize_internal.publication_options('success_marker', '{}', :hourly_id);
SELECT finalize_internal.publication_options('success_marker', '{"location": 7}', :hourly_id);
SELECT finalize_internal.publication_options('success_marker', '{"location": "s3://lake/dt={date}/", "fromat": "empty"}', :hourly_id);
SELECT finalize_internal.publication_options('success_marker', '{"location": "s3://lake/dt={date}/", "format": "json"}', :hourly_id);
SELECT finalize_internal.publication_options('success_marker', '{"location": "s3://lake/orders/dt={date}"}', :hourly_id);
SELECT finalize_internal.publication_options('success_marker', '{"location": "s3://lake/orders/"}', :hourly_id);
SELECT finalize_internal.publication_options('success_marker', '{"location": "s3://lake/orders/hour={hour}/"}', :hourly_id);
SELECT finalize_internal.publication_options('success_marker', '{"location": "s3://lake/orders/{start}/"}', :hourly_id);
SELECT finalize_internal.publication_options('success_marker', '{"location": "https://lake/orders/dt={date}/"}', :hourly_id);
SELECT finalize_internal.publication_options('success_marker', '{"location": "s3://lake/orders/../dt={date}/"}', :hourly_id);
SELECT finalize_internal.publication_options('success_marker', '{"location": "file:///dt={date}/"}', :hourly_id);
SELECT finalize_internal.publication_options('success_marker', '{"location": "file://srv/dt={date}/"}', :hourly_id);

-- The store: the server's bucket; file:// only with no server, and only
-- for a role that could write the server's files anyway.
SELECT finalize.add_publication('sm.hourly', 'm1', 'lake_s3', '{"location": "s3://other/dt={date}/"}');
SELECT finalize.add_publication('sm.hourly', 'm1', 'lake_nobucket', '{"location": "s3://lake/dt={date}/"}');
SELECT finalize.add_publication('sm.hourly', 'm1', 'lake_s3', '{"location": "file:///srv/lake/dt={date}/"}');
SELECT finalize.add_publication('sm.hourly', 'm1', NULL, '{"location": "s3://lake/dt={date}/"}');
CREATE ROLE sm_admin IN ROLE finalize_admin;
GRANT USAGE ON FOREIGN SERVER lake_s3 TO sm_admin;
SET ROLE sm_admin;
SELECT finalize.add_publication('sm.hourly', 'm1', NULL, '{"location": "file:///srv/lake/dt={date}/"}');
SELECT finalize.add_publication('sm.hourly', 'to_s3', 'lake_s3', '{"location": "s3://lake/orders/dt={date}/"}') > 0 AS added;
RESET ROLE;
SELECT finalize.add_publication('sm.hourly', 'to_files', NULL, '{"location": "file:///srv/lake/dt={date}/hour={hour}/"}') > 0 AS added;
SELECT publication, target_kind, target, options FROM finalize.publications WHERE table_name = 'sm.hourly' ORDER BY 1;
SELECT finalize.drop_publication('sm.hourly', 'to_s3');
SELECT finalize.drop_publication('sm.hourly', 'to_files');
SELECT finalize.untrack_table('sm.hourly', false);
REVOKE USAGE ON FOREIGN SERVER lake_s3 FROM sm_admin;
DROP ROLE sm_admin;
DROP SERVER erp;
DROP SERVER lake_s3;
DROP SERVER lake_nobucket;
