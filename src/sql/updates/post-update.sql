-- Last, after every update: objects the update created belong to whoever
-- ran it. Hand them to the extension's owner, as a fresh install has them:
-- a role that ran the update must not own code that the owner's functions
-- run.
DO $owner$
DECLARE
    ext oid := (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'finalize');
    owner oid := (SELECT e.extowner FROM pg_catalog.pg_extension e WHERE e.extname = 'finalize');
    obj record;
BEGIN
    FOR obj IN
        SELECT p.oid::pg_catalog.regprocedure::text AS name, 'ROUTINE' AS kind
          FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_proc p ON p.oid = d.objid
         WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.deptype = 'e'
           AND d.refobjid = ext AND p.proowner OPERATOR(pg_catalog.<>) owner
        UNION ALL
        SELECT c.oid::pg_catalog.regclass::text, 'TABLE'
          FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_class c ON c.oid = d.objid
         WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.deptype = 'e'
           AND c.relkind IN ('r', 'v', 'p') AND d.refobjid = ext AND c.relowner OPERATOR(pg_catalog.<>) owner
        UNION ALL
        -- Domains and types; an array type follows its element's owner, a
        -- table's row type its table's.
        SELECT t.oid::pg_catalog.regtype::text, CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END
          FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_type t ON t.oid = d.objid
         WHERE d.classid = 'pg_catalog.pg_type'::pg_catalog.regclass AND d.deptype = 'e'
           AND d.refobjid = ext AND t.typowner OPERATOR(pg_catalog.<>) owner
           AND NOT (t.typtype = 'b' AND t.typelem OPERATOR(pg_catalog.<>) 0 AND t.typlen = -1)
           AND NOT EXISTS (SELECT FROM pg_catalog.pg_class r WHERE r.oid = t.typrelid AND r.relkind OPERATOR(pg_catalog.<>) 'c')
    LOOP
        -- ALTER TABLE also hands over views and a table's identity sequences.
        EXECUTE pg_catalog.format('ALTER %s %s OWNER TO %I', obj.kind, obj.name, pg_catalog.pg_get_userbyid(owner));
    END LOOP;
END
$owner$;
