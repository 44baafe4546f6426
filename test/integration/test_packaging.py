"""Packaging: the version is written once (finalize.control) and everything
else agrees with it; META.json is a valid PGXN distribution file."""

import json
import os
import re
import shutil
import subprocess

TOP = os.path.join(os.path.dirname(__file__), "..", "..")


def control_version():
    with open(os.path.join(TOP, "finalize.control")) as f:
        return re.search(r"^default_version\s*=\s*'([^']+)'", f.read(), re.M).group(1)


def test_meta_json_matches_control():
    with open(os.path.join(TOP, "META.json")) as f:
        meta = json.load(f)
    version = control_version()
    assert meta["version"] == version, "run `make meta` after changing default_version"
    assert meta["provides"]["finalize"]["version"] == version
    # The fields PGXN requires, with the shapes it requires.
    for field in ("name", "abstract", "version", "maintainer", "license", "provides", "meta-spec"):
        assert field in meta, field
    assert meta["name"] == "finalize"
    assert meta["meta-spec"]["version"] == "1.0.0"
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    for ext in meta["provides"].values():
        assert os.path.exists(os.path.join(TOP, ext["file"])), ext["file"]


def test_make_derives_install_script_name():
    out = subprocess.run(["make", "-s", "-C", TOP, "--eval", "show-data: ; @echo $(DATA_built)", "show-data"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"finalize--{control_version()}.sql"


def test_no_header_of_ours_shadows_one_of_postgresql():
    """src/common/ shares its prefix with PostgreSQL's common/ headers (and
    -I src comes first): a file of ours named like one of theirs would
    silently replace it in every #include "common/..."."""
    pg_config = os.environ.get("PG_CONFIG") or shutil.which("pg_config") or "/usr/lib/postgresql/15/bin/pg_config"
    includedir = subprocess.run([pg_config, "--includedir-server"],
                                capture_output=True, text=True, check=True).stdout.strip()
    src = os.path.join(TOP, "src")
    ours = {os.path.join(d, f) for d in os.listdir(src) if os.path.isdir(os.path.join(src, d))
            for f in os.listdir(os.path.join(src, d)) if f.endswith(".h")}
    theirs = {os.path.relpath(os.path.join(root, f), includedir)
              for root, _, files in os.walk(includedir) for f in files if f.endswith(".h")}
    assert ours, "no headers found under src/"
    assert not ours & theirs, sorted(ours & theirs)


def c_condition_names():
    """The condition names of src/common/condition.c's table."""
    src = open(os.path.join(TOP, "src", "common", "condition.c")).read()
    return set(re.findall(r'\[COND_[A-Z_]+\] = "([a-z_]+)"', src))


def sql_check_names(constraint):
    """The names a CHECK constraint of the install script allows."""
    parts = sorted(p for p in os.listdir(os.path.join(TOP, "src", "sql")) if p.endswith(".sql"))
    sql = "".join(open(os.path.join(TOP, "src", "sql", p)).read() for p in parts)
    m = re.search(r"CONSTRAINT\s+" + constraint + r"\s+CHECK\s*\((.*?)\)\s*\)?\s*[,;\n]", sql, re.S)
    assert m, f"no CHECK constraint {constraint} in src/sql"
    return set(re.findall(r"'([a-z_]+)'", m.group(1)))


def test_condition_codes_agree_between_c_and_sql():
    """The C name table and the SQL CHECK constraints list the same codes,
    so the worker can never write a condition the tables refuse (its write
    would fail and the table's reason would be lost), and no SQL code lacks
    a C name."""
    c = c_condition_names()
    table = sql_check_names("table_condition_condition_check")
    source = sql_check_names("source_status_condition_check")
    consumer = sql_check_names("consumer_condition_check")
    assert len(c) >= 20
    assert table | source | consumer == c, (sorted(c - (table | source | consumer)),
                                            sorted((table | source | consumer) - c))
    assert not table & source and not table & consumer and not source & consumer
