-- The release gate's SQL surface: object-store servers, the catalog view,
-- the comparison, and malformed manifests (errors with SQLSTATE 22023).
\i sql/include/preamble.sql

-- Object stores are finalize_s3 servers; keys go in user mappings.
CREATE SERVER lake FOREIGN DATA WRAPPER finalize_s3
    OPTIONS (endpoint 'http://127.0.0.1:9000', region 'eu-central-1', bucket 'lake-bucket', url_style 'path');
CREATE USER MAPPING FOR CURRENT_USER SERVER lake OPTIONS (access_key_id 'AKIA', secret_access_key 'never-shown');
ALTER SERVER lake OPTIONS (SET endpoint 'ftp://example.com');
ALTER SERVER lake OPTIONS (SET endpoint 'https://');
ALTER SERVER lake OPTIONS (SET bucket 'Lake_Bucket');
ALTER SERVER lake OPTIONS (SET bucket 'ab');
ALTER SERVER lake OPTIONS (SET region 'EU Central');
ALTER SERVER lake OPTIONS (SET url_style 'sideways');
ALTER SERVER lake OPTIONS (ADD secret_access_key 'x');
ALTER USER MAPPING FOR CURRENT_USER SERVER lake OPTIONS (SET secret_access_key '');
ALTER USER MAPPING FOR CURRENT_USER SERVER lake OPTIONS (ADD bucket 'x');
SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'lake';
-- A server without a bucket cannot be listed.
CREATE SERVER nobucket FOREIGN DATA WRAPPER finalize_s3 OPTIONS (endpoint 'http://127.0.0.1:9000');

CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
SELECT finalize.track_table('g.orders', 'erp', 'dbo.orders') > 0 AS tracked;

-- The catalog view: explicit registration, or projection.
SELECT finalize.register_partition('g.orders', 'day=27/hour=08', 'day=27/hour=08/gen-1/');
SELECT finalize.register_partition('g.orders', 'day=27/hour=08', 'day=27/hour=08/gen-2/');
SELECT partition, location FROM finalize.partition_registration;
SELECT finalize.register_partition('g.orders', 'day=27/hour=09', '/abs/path');
SELECT finalize.register_partition('g.orders', 'day=27/hour=09', 'a/../b');
SELECT finalize.register_partition('g.nosuch', 'p', 'l');
SELECT finalize.render_location('year={year}/month={month}/day={day}/hour={hour}/minute={minute}/', '2026-03-07 05:04+00');
SELECT finalize.render_location('dt={year}-{month}-{day}/', '2026-03-07 23:30-02');
-- In a zone: {date} is the local date of the period's start, so a local
-- day of Seoul renders as its own date.
SELECT finalize.render_location('dt={date}/hour={hour}/', '2026-11-27 15:00+00', 'Asia/Seoul') AS seoul,
       finalize.render_location('dt={date}/', '2026-11-27 15:00+00') AS utc;
SELECT finalize.set_projection('g.orders', 'day={day}/hour={hour}/', '2026-11-01', '2026-12-01');
SELECT finalize.set_projection('g.orders', 'day={dag}/', '2026-11-01', '2026-12-01');
SELECT finalize.set_projection('g.orders', 'static/', '2026-11-01', '2026-12-01');
SELECT finalize.set_projection('g.orders', 'day={day}/', '2026-12-01', '2026-11-01');
SELECT location_template, range_start, range_end FROM finalize.projection;

-- The comparison: every code, sorted by path; sizes and checksums.
SELECT jsonb_pretty(finalize.compare_inventories(
    '{"p/a": 1, "p/b": 2, "p/c": {"size": 3, "etag": "\"ABC\""}, "p/e": {"size": 5, "etag": "e5"}, "q/x": 9}',
    '{"p/a": 1, "p/b": 3, "p/c": {"size": 3, "etag": "abc"}, "p/d": 4, "p/e": {"size": 5, "etag": "\"f5\""}}',
    'p'));
SELECT finalize.compare_inventories('{"p/a": 1}', '{"p/a": 1}', 'p/') AS agree;
SELECT finalize.compare_inventories('[{"path": "p/a", "size": 1}, {"path": "p/b", "size": 2}]', '{}', 'p/')
       -> 0 ->> 'code' AS array_form;
SELECT finalize.compare_inventories('[{"path": "p/a", "size": 1}, {"path": "p/a", "size": 2}]', '{}', 'p/');
-- A store's own keys are facts, not input to validate: "p/../x" is a legal
-- S3 key, so it is a stray object, while a manifest path like it is an error.
SELECT finalize.compare_inventories('{"p/a": 1}', '{"p/a": 1, "p/../x": 2}', 'p/') -> 0 ->> 'code' AS odd_key;
SELECT finalize.compare_inventories('{"p/../x": 2}', '{}', 'p/');
SELECT finalize.compare_inventories('{"p/a": 1.5}', '{}', 'p/');
SELECT finalize.compare_inventories('{"p/a": "big"}', '{}', 'p/');
-- Sizes beyond bigint name the entry too (not a bare "bigint out of range").
SELECT finalize.compare_inventories('{"p/a": 1e20}', '{}', 'p/');
SELECT finalize.compare_inventories('{"p/a": -1e20}', '{}', 'p/');
SELECT finalize.compare_inventories('{"p/a": -1}', '{}', 'p/');

-- Malformed manifests are errors with SQLSTATE 22023 that name the field.
\set VERBOSITY sqlstate
SELECT * FROM finalize.release_gate('[1, 2]');
SELECT * FROM finalize.release_gate('"text"');
SELECT * FROM finalize.release_gate(NULL);
\set VERBOSITY default
SELECT * FROM finalize.release_gate('{"partition": "p", "generation": "g", "store": "lake", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "generation": "g", "store": "lake", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "store": "lake", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake"}');
SELECT * FROM finalize.release_gate('{"table": 7, "partition": "p", "generation": "g", "store": "lake", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "", "generation": "g", "store": "lake", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "/p", "generation": "g", "store": "lake", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "prefix": "p/../q/", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "files": {"p/a": -1}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "files": {"p/../etc/passwd": 1}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "files": {"/etc/passwd": 1}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "files": {"p//a": 1}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "files": [{"path": "p/a", "size": 1}, {"path": "p/a", "size": 1}]}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "files": {"p/a": {"etag": "x"}}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "files": {"p/a": {"size": 1, "etag": 5}}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "files": 3}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "period_start": "yesterday-ish", "files": {}}');
-- Only ISO 8601 with an offset: the session's TimeZone or DateStyle must not pick the period.
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "period_start": "2026-11-27 08:00", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "period_start": "03/04/2026 08:00+00", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "period_start": "2026-13-45 08:00+00", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "empty": "yes", "files": {}}');
-- Fields the gate does not know are refused, not ignored: a misspelt
-- period_end would have it check one period of a whole day.
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "period_start": "2026-11-28T00:00:00Z", "periodend": "2026-11-29T00:00:00Z", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "period_end": "2026-11-29T00:00:00Z", "files": {}}');
-- A partition holds whole periods of its table (hours of UTC here): a
-- start or an end inside a period names the nearest boundaries, before
-- anything goes over the network.
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "period_start": "2026-11-28T00:00:00+09:30", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "period_start": "2026-11-28T00:00:00Z", "period_end": "2026-11-28T10:15:00Z", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "period_start": "2026-11-28T10:00:00Z", "period_end": "2026-11-28T10:00:00Z", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.nosuch", "partition": "p", "generation": "g", "store": "lake", "period_start": "2026-11-28T00:30:00Z", "files": {}}');
-- Registrations hold whole periods too.
SELECT finalize.register_partition('g.orders', 'day=28', 'day=28/', '2026-11-28 00:00+00', '2026-11-29 00:00+00');
SELECT finalize.register_partition('g.orders', 'day=28', 'day=28/', '2026-11-28 00:20+00');
SELECT finalize.register_partition('g.orders', 'day=28', 'day=28/', '2026-11-28 00:00+00', '2026-11-28 23:59+00');
SELECT finalize.register_partition('g.orders', 'day=28', 'day=28/', period_end => '2026-11-29 00:00+00');
SELECT partition, location, period_start, period_end FROM finalize.partition_registration WHERE partition = 'day=28';
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "empty": true, "period_start": "2026-11-27 08:00+00", "files": {"p/a": 1}}');
-- Stores: unknown servers, servers of another wrapper, bad file URLs.
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "nosuch", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "erp", "files": {}}');
CREATE USER MAPPING FOR CURRENT_USER SERVER nobucket OPTIONS (access_key_id 'AKIA', secret_access_key 's');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "nobucket", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "file://relative/path", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "file:///nonexistent/finalize/store", "files": {}}');
SELECT * FROM finalize.release_gate('{"table": "g.nosuch", "partition": "p", "generation": "g", "store": "file:///", "files": {}}');
-- Nothing was stored by any of these.
SELECT count(*) AS attempts FROM finalize.release;

-- Readers see published generations; only publishers release.
CREATE ROLE regress_gate_reader LOGIN IN ROLE finalize_reader;
CREATE ROLE regress_gate_publisher LOGIN IN ROLE finalize_publisher;
SET ROLE regress_gate_reader;
SELECT finalize.released_generation('g.orders', 'day=27/hour=08') IS NULL AS nothing_released;
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "files": {}}');
SELECT count(*) FROM finalize.releases;
RESET ROLE;
SET ROLE regress_gate_publisher;
SELECT count(*) AS visible_releases FROM finalize.releases;
SELECT finalize.set_projection('g.orders', 'x={day}/', '2026-01-01', '2027-01-01');
-- A publisher lists with its own user mapping, which it does not have here.
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "files": {}}');
-- Local stores need pg_read_server_files.
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "file:///tmp", "files": {}}');
RESET ROLE;
GRANT USAGE ON FOREIGN SERVER lake TO regress_gate_publisher;
SET ROLE regress_gate_publisher;
SELECT * FROM finalize.release_gate('{"table": "g.orders", "partition": "p", "generation": "g", "store": "lake", "files": {}}');
RESET ROLE;

SELECT finalize.untrack_table('g.orders', false);
DROP USER MAPPING FOR CURRENT_USER SERVER lake;
DROP USER MAPPING FOR CURRENT_USER SERVER nobucket;
DROP SERVER lake, nobucket;
DROP SERVER erp;
DROP ROLE regress_gate_reader, regress_gate_publisher;
