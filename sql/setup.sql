-- Installation: the extension, its roles and what it needs from the server.
CREATE EXTENSION finalize;

-- The installed version is the control file's default version.
SELECT e.extversion = a.default_version AS version_matches_control
  FROM pg_extension e JOIN pg_available_extensions a ON a.name = e.extname
 WHERE e.extname = 'finalize';

-- The library is preloaded (the worker needs it; sensors work either way).
SELECT current_setting('shared_preload_libraries') ~ 'finalize' AS preloaded;

-- Three group roles, none can log in; admin includes publisher includes reader.
SELECT rolname, rolcanlogin, rolsuper FROM pg_roles WHERE rolname LIKE 'finalize\_%' ORDER BY rolname;
SELECT pg_has_role('finalize_admin', 'finalize_publisher', 'MEMBER') AS admin_is_publisher,
       pg_has_role('finalize_publisher', 'finalize_reader', 'MEMBER') AS publisher_is_reader,
       pg_has_role('finalize_reader', 'finalize_admin', 'MEMBER') AS reader_is_admin;

-- The extension cannot be moved to another schema.
CREATE SCHEMA elsewhere;
ALTER EXTENSION finalize SET SCHEMA elsewhere;
DROP SCHEMA elsewhere;

-- Settings.
SHOW finalize.facts_retention;
SELECT finalize_internal.facts_retention();
SET finalize.facts_retention = '7d';
SET finalize.no_such_setting = 1;
