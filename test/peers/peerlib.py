"""What the peer tests share: the recipes of the documentation, read from the
pages, and a PostgreSQL cluster with finalize in a database "warehouse".

A recipe is the fenced block after a `<!-- recipe: name -->` marker in
README.md or docs/*.md; a recipe given on two pages must be the same on both.
The tests write it to a file as it is printed and run it with the tool itself.

The cluster's worker is off (finalize.enabled = off): the tests move a
table's verdict by hand with finalize.record_range, as the regression tests
do. The orchestrators log in as "orchestrator", a role in finalize_reader and
nothing else, over TCP on 127.0.0.1 (trust, as the throwaway clusters are)."""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "test", "lib"))

from pgcluster import Cluster  # noqa: E402

DB = "warehouse"
READER = "orchestrator"


def pages():
    docs = os.path.join(TOP, "docs")
    return [os.path.join(TOP, "README.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))


def recipe(name, lang=None):
    """The body of the fenced block after the recipe's marker, the same on every page that gives it."""
    found = {}
    for page in pages():
        with open(page) as f:
            text = f.read()
        for m in re.finditer(r"<!-- recipe: %s -->\n```(\w+)\n(.*?)\n```" % re.escape(name), text, re.S):
            found.setdefault((m.group(1), m.group(2)), []).append(os.path.relpath(page, TOP))
    assert found, f"no page (README.md, docs/*.md) has recipe {name}"
    assert len(found) == 1, f"recipe {name} differs between {list(found.values())}"
    (block_lang, body), = found
    assert lang is None or block_lang == lang, f"recipe {name} is {block_lang}, not {lang}"
    return body + "\n"


def write_recipe(name, path, lang=None):
    """Writes a recipe to a file, as printed; returns the path."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(recipe(name, lang))
    return path


class Warehouse:
    """A started cluster with finalize in database warehouse, a source "src" that is never
    contacted, and the login orchestrator in finalize_reader; conf adds settings (with
    "finalize.database": DB its scheduler serves the warehouse: the alerts worker delivers
    publications there, finalize.enabled off or not)."""

    def __init__(self, conf=None):
        self.pg = Cluster(conf={"finalize.enabled": "off", **(conf or {})})
        self.pg.start()
        try:
            self.pg.sql(f"CREATE DATABASE {DB}")
            self.sql("CREATE EXTENSION finalize")
            self.sql("CREATE SERVER src FOREIGN DATA WRAPPER finalize_mssql "
                     "OPTIONS (host '127.0.0.1', database 'demo')")
            self.pg.sql(f"CREATE ROLE {READER} LOGIN IN ROLE finalize_reader")
        except Exception:
            self.pg.cleanup()
            raise
        self.port = self.pg.port

    def sql(self, query, args=None):
        return self.pg.sql(query, args, dbname=DB)

    def uri(self):
        """The reader's login as a URI (an Airflow connection, AIRFLOW_CONN_*)."""
        return f"postgresql://{READER}@127.0.0.1:{self.port}/{DB}"

    def dsn(self):
        """The reader's login as a libpq DSN."""
        return f"host=127.0.0.1 port={self.port} dbname={DB} user={READER}"

    def track(self, table, granularity="1 hour", zone=None):
        if zone:
            self.sql("SELECT finalize.track_table(%s, 'src', 'dbo.orders', %s::interval, period_zone => %s)",
                     (table, granularity, zone))
        else:
            self.sql("SELECT finalize.track_table(%s, 'src', 'dbo.orders', %s::interval)", (table, granularity))
        self._lsn = {}

    def untrack_all(self):
        self.sql("DELETE FROM finalize.tracked_table")

    def capture(self, table, commit_time):
        """Records the next range of SQL Server's capture of the table, committed at commit_time (a
        timestamptz, or an SQL expression when it starts with "now()"): the verdict moves up to it."""
        n = self._lsn.get(table, 0)
        start = None if n == 0 else "0x%020X" % (n * 256)
        end = "0x%020X" % ((n + 1) * 256)
        if str(commit_time).startswith("now()"):
            self.sql(f"SELECT finalize.record_range(%s, %s, %s, {commit_time})", (table, start, end))
        else:
            self.sql("SELECT finalize.record_range(%s, %s, %s, %s)", (table, start, end, commit_time))
        self._lsn[table] = n + 1

    def finalized_until(self, table):
        return self.sql("SELECT finalize.finalized_until(%s)", (table,))[0][0]

    def cleanup(self):
        self.pg.cleanup()
