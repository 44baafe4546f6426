-- Roles: readers only read verdicts, admins manage tables, nobody else gets
-- anything; credentials stay behind PostgreSQL's user-mapping rules.
\i sql/include/preamble.sql

CREATE ROLE regress_sensor LOGIN IN ROLE finalize_reader;
CREATE ROLE regress_publisher LOGIN IN ROLE finalize_publisher;
CREATE ROLE regress_admin LOGIN IN ROLE finalize_admin;
CREATE ROLE regress_nobody LOGIN;

CREATE SERVER erp FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
CREATE USER MAPPING FOR PUBLIC SERVER erp OPTIONS (username 'cdc_reader', password 'do-not-leak');
SELECT finalize.track_table('p.orders', 'erp', 'dbo.orders') > 0 AS tracked;
SELECT finalize.record_range('p.orders', NULL, '0x00000000000000000100', '2026-11-29 14:00+00');

-- A sensor reads the verdict and the status, nothing else.
SET ROLE regress_sensor;
SELECT finalize.finalized_until('p.orders'), finalize.is_final('p.orders', '2026-11-29 13:00+00');
SELECT is_final, reason IS NOT NULL AS explained FROM finalize.explain_verdict('p.orders', '2026-11-29 13:00+00');
SELECT table_name, finalized_until FROM finalize.status;
SELECT finalize.record_range('p.orders', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 18:00+00');
SELECT finalize.track_table('p.evil', 'erp', 'dbo.orders');
SELECT finalize.untrack_table('p.orders');
SELECT count(*) FROM finalize.facts;
SELECT count(*) FROM finalize.fact;
UPDATE finalize.watermark SET finalized_until = 'infinity';
INSERT INTO finalize.fact (table_id, kind, end_lsn, end_commit_time) VALUES (1, 'range', '0x00000000000000000200', now());
SELECT umoptions FROM pg_user_mappings WHERE srvname = 'erp';
CREATE SERVER rogue FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host 'h', database 'd');
RESET ROLE;

-- A publisher also reads the facts.
SET ROLE regress_publisher;
SELECT count(*) > 0 AS sees_facts FROM finalize.facts;
SELECT count(*) FROM finalize.changes_by_period('p.orders', '2026-11-29 13:00+00', '2026-11-29 14:00+00');
SELECT finalize.record_range('p.orders', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 18:00+00');
RESET ROLE;

-- A role outside finalize's roles gets nothing.
SET ROLE regress_nobody;
SELECT finalize.is_final('p.orders', '2026-11-29 13:00+00');
SELECT finalize.finalized_until('p.orders');
SELECT * FROM finalize.status;
RESET ROLE;

-- An admin manages sources and tables and may record ranges by hand; its
-- own user mapping is readable by it, the PUBLIC one's secret is not shown
-- to non-owners of the server.
SET ROLE regress_admin;
CREATE SERVER erp2 FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', database 'demo');
CREATE USER MAPPING FOR regress_admin SERVER erp2 OPTIONS (username 'cdc_admin', password 'admins-own');
SELECT srvname, umoptions FROM pg_user_mappings WHERE srvname IN ('erp', 'erp2') ORDER BY srvname;
SELECT finalize.track_table('p.lines', 'erp2', 'dbo.order_lines') > 0 AS tracked;
-- Tracking through a server uses its login: it needs USAGE on the server.
SELECT finalize.track_table('p.borrowed', 'erp', 'dbo.orders');
RESET ROLE;
GRANT USAGE ON FOREIGN SERVER erp TO regress_admin;
SET ROLE regress_admin;
SELECT finalize.track_table('p.borrowed', 'erp', 'dbo.orders') > 0 AS tracked_with_usage;
SELECT finalize.untrack_table('p.borrowed', false);
SELECT finalize.record_range('p.orders', '0x00000000000000000100', '0x00000000000000000200', '2026-11-29 15:00+00');
SELECT created_by FROM finalize.tracked_table WHERE table_name = 'p.lines';
UPDATE finalize.watermark SET finalized_until = 'infinity';
SELECT finalize.untrack_table('p.lines', false);
DROP USER MAPPING FOR regress_admin SERVER erp2;
DROP SERVER erp2;
RESET ROLE;

-- Every privileged function pins search_path, so objects a caller puts on
-- its search_path cannot stand in for the built-ins the function uses.
SELECT p.oid::regprocedure AS definer_without_pinned_search_path
  FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'finalize'
 WHERE p.prosecdef AND NOT coalesce(p.proconfig::text[] && ARRAY['search_path=pg_catalog, pg_temp'], false);
-- And every SQL and PL/pgSQL function, since the definer functions call
-- them as the owner.
SELECT p.oid::regprocedure AS sql_function_without_pinned_search_path
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
  JOIN pg_language l ON l.oid = p.prolang
 WHERE n.nspname = 'finalize' AND l.lanname IN ('sql', 'plpgsql')
   AND NOT coalesce(p.proconfig::text[] && ARRAY['search_path=pg_catalog, pg_temp'], false);
-- So does every C function that runs SQL as the owner.
SELECT p.oid::regprocedure AS owner_runner_without_pinned_search_path
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'finalize' AND p.prosrc IN ('finalize_as_owner', 'finalize_release_gate')
   AND NOT coalesce(p.proconfig::text[] && ARRAY['search_path=pg_catalog, pg_temp'], false);
SELECT count(*) AS functions_run_as_owner_for_their_caller
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'finalize' AND p.prosrc = 'finalize_as_owner';
SELECT count(*) > 0 AS has_definer_functions
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'finalize' AND p.prosecdef;
-- Nothing in the schema is executable by PUBLIC.
SELECT p.oid::regprocedure AS executable_by_public
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'finalize' AND has_function_privilege('regress_nobody', p.oid, 'EXECUTE');
CREATE SCHEMA evil;
GRANT USAGE ON SCHEMA evil TO regress_admin;
CREATE FUNCTION evil.upper(text) RETURNS text LANGUAGE sql AS $$ SELECT '0xFFFFFFFFFFFFFFFFFFFF' $$;
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT 'infinity'::timestamptz $$;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA evil TO regress_admin;
SET ROLE regress_admin;
SET search_path = evil, pg_catalog, public;
SELECT finalize.record_range('p.orders', '0x00000000000000000200', '0x000000000000000002aa', '2026-11-29 15:30+00');
SELECT offset_lsn, advanced_at < 'infinity' AS real_now FROM finalize.watermark;
RESET search_path;
RESET ROLE;

SELECT finalize.untrack_table('p.orders', false);
DROP SCHEMA evil CASCADE;
DROP SERVER erp CASCADE;
DROP ROLE regress_sensor, regress_publisher, regress_admin, regress_nobody;
