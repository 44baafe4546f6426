"""An update run the way operators run them: by another superuser than the
one that created the extension (the objects it creates must still belong to
the extension's owner, or that role could replace code the owner's functions
run), and with the new library loaded against the old catalog (the worker
records nothing until the catalog is updated)."""

import pytest


def test_an_update_by_another_superuser_leaves_every_member_with_the_extension_owner(pg):
    pg.sql('DROP DATABASE IF EXISTS "own_up"')
    pg.sql('CREATE DATABASE "own_up"')
    pg.sql("DROP ROLE IF EXISTS dba_up")
    pg.sql("CREATE ROLE dba_up SUPERUSER LOGIN")
    try:
        pg.sql("CREATE EXTENSION finalize VERSION '0.1.0'", dbname="own_up")
        default = pg.sql("SELECT default_version FROM pg_catalog.pg_available_extensions "
                         "WHERE name = 'finalize'")[0][0]
        if default == "0.1.0":
            pytest.skip("no version to update to")
        pg.sql("ALTER EXTENSION finalize UPDATE", dbname="own_up", user="dba_up")
        foreign = pg.sql("""
            SELECT pg_catalog.pg_describe_object(d.classid, d.objid, 0)
              FROM pg_catalog.pg_depend d
              JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'finalize'
              LEFT JOIN pg_catalog.pg_proc p ON d.classid = 'pg_catalog.pg_proc'::regclass AND p.oid = d.objid
              LEFT JOIN pg_catalog.pg_class c ON d.classid = 'pg_catalog.pg_class'::regclass AND c.oid = d.objid
              LEFT JOIN pg_catalog.pg_type t ON d.classid = 'pg_catalog.pg_type'::regclass AND t.oid = d.objid
             WHERE d.deptype = 'e'
               AND coalesce(p.proowner, c.relowner, t.typowner, e.extowner) <> e.extowner
             ORDER BY 1""", dbname="own_up")
        assert foreign == [], f"members not owned by the extension's owner after the update: {foreign}"
        acl = pg.sql("SELECT count(*) FROM pg_catalog.pg_proc p WHERE p.proacl::text LIKE '%dba_up%'",
                     dbname="own_up")[0][0]
        assert acl == 0, "a function's ACL still names the role that ran the update"
    finally:
        pg.sql('DROP DATABASE IF EXISTS "own_up"')
    # Nothing in any database depends on the role that ran the update.
    pg.sql("DROP ROLE dba_up")
