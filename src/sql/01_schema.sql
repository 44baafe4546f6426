
-- Four group roles, created once per cluster and kept when the extension is
-- dropped (roles are cluster-wide; other databases may use them):
--   finalize_reader     sensors: verdict functions and the status views only
--   finalize_pipeline   pipelines that write the lake: report_progress and
--                       report_processed, nothing else that writes; includes
--                       finalize_reader (a pipeline waits on its inputs)
--   finalize_publisher  release gate; includes finalize_reader
--   finalize_admin      sources, tracked tables, facts; includes the others
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'finalize_reader') THEN
        CREATE ROLE finalize_reader NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'finalize_publisher') THEN
        CREATE ROLE finalize_publisher NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'finalize_admin') THEN
        CREATE ROLE finalize_admin NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'finalize_pipeline') THEN
        CREATE ROLE finalize_pipeline NOLOGIN;
    END IF;
END
$roles$;
GRANT finalize_reader TO finalize_publisher;
GRANT finalize_publisher TO finalize_admin;
GRANT finalize_reader TO finalize_pipeline;
GRANT finalize_pipeline TO finalize_admin;

-- Nothing in the schema is usable by PUBLIC; the grants at the end of the
-- script open exactly what each role needs.
REVOKE ALL ON SCHEMA @extschema@ FROM PUBLIC;
GRANT USAGE ON SCHEMA @extschema@ TO finalize_reader;
GRANT USAGE ON SCHEMA @extschema@ TO finalize_pipeline;
-- The internal functions: the same roles may reach them (the status views
-- and the C sensors call some as the caller); EXECUTE on each is granted
-- in 12_privileges.sql, exactly as before 0.3.0.
REVOKE ALL ON SCHEMA finalize_internal FROM PUBLIC;
GRANT USAGE ON SCHEMA finalize_internal TO finalize_reader;
GRANT USAGE ON SCHEMA finalize_internal TO finalize_pipeline;
