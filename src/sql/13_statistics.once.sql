-- Last: statistics for the extension's new, empty tables. A table never
-- analyzed is planned as if it spanned 10 pages, so a view that probes
-- several of them per tracked table (finalize.status over 10,000 tables)
-- is costed past jit_above_cost and spends most of a second compiling.
-- ANALYZE records them as empty; autovacuum keeps the figures current as
-- they fill (the workers report their writes to the statistics system).
DO $analyze$
DECLARE
    rel record;
BEGIN
    -- The extension's own tables only (not whatever else the schema holds).
    FOR rel IN
        SELECT n.nspname, c.relname
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_class c ON c.oid = d.objid
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.deptype = 'e'
           AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'finalize')
           AND c.relkind = 'r'
         ORDER BY c.relname
    LOOP
        EXECUTE pg_catalog.format('ANALYZE %I.%I', rel.nspname, rel.relname);
    END LOOP;
END
$analyze$;
