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
    FOR rel IN
        SELECT c.oid::pg_catalog.regclass::text AS name
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = '@extschema@'::pg_catalog.regnamespace AND c.relkind = 'r'
         ORDER BY c.relname
    LOOP
        EXECUTE pg_catalog.format('ANALYZE %s', rel.name);
    END LOOP;
END
$analyze$;
