-- Publications to Airflow (docs/publishing.md, "Airflow"): the
-- finalize_airflow wrapper's options (the API server's URL and timeout on
-- the server; a token, or a username and password, in the user mapping,
-- never echoed) and the options of an airflow publication. Delivery is
-- test/peers/test_airflow_publish.py's, against Airflow itself.
\i sql/include/preamble.sql

-- The server: https anywhere, plain http only to this machine, no query.
CREATE SERVER af FOREIGN DATA WRAPPER finalize_airflow OPTIONS (url 'https://airflow.example.com/', timeout '5 seconds');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_airflow OPTIONS (url 'http://airflow.example.com');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_airflow OPTIONS (url 'https://airflow.example.com/?x=1');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_airflow OPTIONS (url 'https://admin:pw@airflow.example.com');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_airflow;
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_airflow OPTIONS (url 'http://127.0.0.1:8080', timeout '2 minutes');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_airflow OPTIONS (url 'http://127.0.0.1:8080', asset_uri 'x');
CREATE SERVER bad FOREIGN DATA WRAPPER finalize_airflow OPTIONS (url 'http://127.0.0.1:8080', password 's3cret-passw0rd');
ALTER SERVER af OPTIONS (DROP url);

-- The user mapping: a token, or a username and password; no secret is echoed.
CREATE USER MAPPING FOR CURRENT_USER SERVER af OPTIONS (token 'tok3n-value', username 'finalize', password 's3cret-passw0rd');
CREATE USER MAPPING FOR CURRENT_USER SERVER af OPTIONS (username 'finalize');
CREATE USER MAPPING FOR CURRENT_USER SERVER af OPTIONS (username 'finalize', password 'short');
CREATE USER MAPPING FOR CURRENT_USER SERVER af OPTIONS (token E'tok3n\nX-Injected: 1');
CREATE USER MAPPING FOR CURRENT_USER SERVER af OPTIONS (url 'https://airflow.example.com');
CREATE USER MAPPING FOR CURRENT_USER SERVER af OPTIONS (username 'finalize', password 's3cret-passw0rd');
ALTER USER MAPPING FOR CURRENT_USER SERVER af OPTIONS (DROP password);
SELECT array(SELECT split_part(o, '=', 1) FROM unnest(umoptions) o) AS kept FROM pg_user_mappings WHERE srvname = 'af';

-- An airflow publication names its asset by URI; the partition key is
-- {start} unless a template says otherwise.
CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
SELECT finalize.track_table('af.orders', 'erp', 'dbo.orders') > 0 AS tracked;
SELECT finalize.add_publication('af.orders', 'to_airflow', 'af', '{}');
SELECT finalize.add_publication('af.orders', 'to_airflow', 'af', '{"asset_uri": 7}');
SELECT finalize.add_publication('af.orders', 'to_airflow', 'af', '{"asset_uri": "s3://lake/sales orders"}');
SELECT finalize.add_publication('af.orders', 'to_airflow', 'af', '{"asset_uri": "s3://lake/orders", "dag_id": "x"}');
SELECT finalize.add_publication('af.orders', 'to_airflow', 'af', '{"asset_uri": "s3://lake/orders", "partition_key": "   "}');
SELECT finalize.add_publication('af.orders', 'to_airflow', 'af', '{"asset_uri": "s3://lake/orders", "partition_key": "{dt}"}');
SELECT finalize.add_publication('af.orders', 'to_airflow', 'af', '{"asset_uri": "s3://lake/orders"}') > 0 AS added;
SELECT finalize.add_publication('af.orders', 'daily', 'af', '{"asset_uri": "s3://lake/orders", "partition_key": "{date}"}') > 0 AS added;
SELECT publication, target_kind, target, options FROM finalize.publications WHERE table_name = 'af.orders' ORDER BY publication;

SELECT finalize.untrack_table('af.orders', keep_facts => false);
DROP SERVER erp;
DROP SERVER af CASCADE;
