-- The dagster publication target (docs/publishing.md, "Dagster"): the
-- finalize_dagster wrapper's options and the options of a dagster
-- publication as finalize_internal.publication_options_dagster checks and
-- completes them. (test/peers/test_dagster.py reports to a real webserver.)
\i sql/include/preamble.sql

-- Servers: https anywhere, plain http only to this machine, no query (the
-- endpoints are appended); the token only in the user mapping, never echoed.
CREATE SERVER dagster_ok FOREIGN DATA WRAPPER finalize_dagster
    OPTIONS (url 'https://dagster.example.com/prefix', timeout '5 seconds');
CREATE SERVER dagster_local FOREIGN DATA WRAPPER finalize_dagster OPTIONS (url 'http://127.0.0.1:3000');
CREATE USER MAPPING FOR CURRENT_USER SERVER dagster_ok OPTIONS (api_token 'user:0123456789abcdef');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_dagster OPTIONS (url 'http://dagster.example.com');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_dagster OPTIONS (url 'https://dagster.example.com/?x=1');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_dagster OPTIONS (url 'https://u:p@dagster.example.com');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_dagster OPTIONS (timeout '2 minutes');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_dagster OPTIONS (api_token 'user:0123456789abcdef');
CREATE USER MAPPING FOR CURRENT_USER SERVER dagster_local OPTIONS (api_token 'short');
CREATE USER MAPPING FOR CURRENT_USER SERVER dagster_local OPTIONS (url 'http://127.0.0.1:3000');
SELECT has_foreign_data_wrapper_privilege('finalize_admin', 'finalize_dagster', 'USAGE') AS admin_creates_servers,
       has_foreign_data_wrapper_privilege('finalize_reader', 'finalize_dagster', 'USAGE') AS reader_creates_servers;
-- Only admins create them, and a refusal says so.
SET ROLE finalize_publisher;
CREATE SERVER rogue FOREIGN DATA WRAPPER finalize_dagster OPTIONS (url 'https://dagster.example.com');
RESET ROLE;

-- Options of a publication (finalize.add_publication checks them so: the
-- options common to every kind, then the dagster kind's).
CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
SELECT finalize.track_table('dg.hourly', 'erp', 'dbo.orders') AS hourly_id \gset
-- The key as Dagster prints it, or its segments; stored as the segments.
SELECT finalize_internal.publication_options('dagster', '{"asset_key": "lake/sales/orders"}', :hourly_id);
SELECT finalize_internal.publication_options('dagster', '{"asset_key": ["orders"], "partition_key": "{date}"}', :hourly_id);
SELECT finalize_internal.publication_options('dagster',
    '{"asset_key": ["lake", "sales orders"], "partition_key": "{date}-{hour}:{minute}", "metadata": {"owner": "sales"}}', :hourly_id);
-- Refused, each naming the option.
SELECT finalize_internal.publication_options('dagster', '{}', :hourly_id);
SELECT finalize_internal.publication_options('dagster', '[]', :hourly_id);
SELECT finalize_internal.publication_options('dagster', '{"asset_key": "orders", "asset": "x"}', :hourly_id);
SELECT finalize_internal.publication_options('dagster', '{"asset_key": "lake//orders"}', :hourly_id);
SELECT finalize_internal.publication_options('dagster', '{"asset_key": ["lake/sales"]}', :hourly_id);
SELECT finalize_internal.publication_options('dagster', '{"asset_key": ["..", "x"]}', :hourly_id);
SELECT finalize_internal.publication_options('dagster', '{"asset_key": []}', :hourly_id);
SELECT finalize_internal.publication_options('dagster', '{"asset_key": 7}', :hourly_id);
SELECT finalize_internal.publication_options('dagster', '{"asset_key": "orders", "partition_key": "{week}"}', :hourly_id);
SELECT finalize_internal.publication_options('dagster', '{"asset_key": "orders", "metadata": [1]}', :hourly_id);

-- A publication to the server: its kind comes from the wrapper.
SELECT finalize.add_publication('dg.hourly', 'to_dagster', 'dagster_local', '{"asset_key": "lake/sales/orders"}') > 0 AS added;
SELECT publication, target_kind, target, options FROM finalize.publications WHERE table_name = 'dg.hourly';
SELECT finalize.drop_publication('dg.hourly', 'to_dagster');
SELECT finalize.untrack_table('dg.hourly', false);
DROP SERVER erp;
DROP USER MAPPING FOR CURRENT_USER SERVER dagster_ok;
DROP SERVER dagster_ok;
DROP SERVER dagster_local;
