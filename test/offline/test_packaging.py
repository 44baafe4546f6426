"""Packaging: the version is written once (finalize.control) and everything
else agrees with it; META.json is a valid PGXN distribution file."""

import functools
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
    built = out.split()
    # The install script of the current version, then the update scripts to it that make generates.
    assert built[0] == f"finalize--{control_version()}.sql"
    assert all(re.fullmatch(r"finalize--[\d.]+--" + re.escape(control_version()) + r"\.sql", b) for b in built[1:]), built


def pg_includedir():
    """PostgreSQL's server include directory (pg_config --includedir-server)."""
    pg_config = os.environ.get("PG_CONFIG") or shutil.which("pg_config") or "/usr/lib/postgresql/15/bin/pg_config"
    return subprocess.run([pg_config, "--includedir-server"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_no_header_of_ours_shadows_one_of_postgresql():
    """-I src comes before PostgreSQL's headers: a file of ours with the
    path of one of theirs (src/utils/x.h and utils/x.h) would silently
    replace it in every #include of it."""
    includedir = pg_includedir()
    src = os.path.join(TOP, "src")
    ours = {os.path.join(d, f) for d in os.listdir(src) if os.path.isdir(os.path.join(src, d))
            for f in os.listdir(os.path.join(src, d)) if f.endswith(".h")}
    theirs = {os.path.relpath(os.path.join(root, f), includedir)
              for root, _, files in os.walk(includedir) for f in files if f.endswith(".h")}
    assert ours, "no headers found under src/"
    assert not ours & theirs, sorted(ours & theirs)


def c_condition_names():
    """The condition names of src/core/condition.c's table."""
    src = open(os.path.join(TOP, "src", "core", "condition.c")).read()
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


# The layers of src/ (src/README.md), bottom first: the finalize folders each
# folder's files may include. src/finalize.c (only _PG_init) may include any.
LAYERS = {
    "core": set(),
    "mssql": {"core"},
    "worker": {"core", "mssql"},
    "sensor": {"core"},
    "store": {"core"},
    "gate": {"core", "store"},
    "alert": {"core"},
    "lake": {"core", "store"},
    "publish": {"core", "store", "gate", "lake"},
    "push": {"core", "alert", "store", "gate", "lake", "publish"},
}

# One file per foreign library: the headers only that file includes.
LIBRARY_FILES = {
    "DB-Library": (r"<(sybdb|sybfront)\.h>", "mssql/mssql.c"),
    "libcurl": (r"<curl/", "core/http.c"),
    "libxml2": (r"<libxml/", "store/store_xml.c"),
    "GnuTLS": (r"<gnutls/", "mssql/tls_reason.c"),
    "MIT Kerberos": (r"<(krb5|gssapi)", "mssql/kerberos.c"),
    "Avro": (r"<avro[./]", "lake/avro_manifest.c"),
    "zlib": (r"<zlib\.h>", "lake/avro_codec.c"),
    "liblzma": (r"<lzma\.h>", "lake/avro_codec.c"),
    "snappy": (r"<snappy", "lake/avro_codec.c"),
}

# The limits of the layout (src/README.md).
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80


def c_files():
    """The C sources and headers of src/, as paths relative to src/."""
    src = os.path.join(TOP, "src")
    out = []
    for root, _, files in os.walk(src):
        for f in files:
            if f.endswith((".c", ".h")):
                out.append(os.path.relpath(os.path.join(root, f), src))
    assert out, "no C files found under src/"
    return sorted(out)


def read_src(rel):
    with open(os.path.join(TOP, "src", rel)) as f:
        return f.read()


def folder_of(rel):
    """The folder of a file under src/ ("" for src/finalize.c)."""
    return rel.split(os.sep)[0] if os.sep in rel else ""


def folder_includes():
    """(file, folder it includes) for every #include "folder/..." of ours."""
    folders = "|".join(LAYERS)
    pattern = re.compile(r'^\s*#\s*include\s+"(' + folders + r')/[^"]+"', re.M)
    return [(rel, m.group(1)) for rel in c_files() for m in pattern.finditer(read_src(rel))]


def test_folders_are_the_layers():
    """Every folder of C files under src/ has its row in LAYERS, and the
    Makefile builds exactly those folders."""
    src = os.path.join(TOP, "src")
    folders = {d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d))
               and any(f.endswith(".c") for f in os.listdir(os.path.join(src, d)))}
    assert folders == set(LAYERS), (sorted(folders - set(LAYERS)), sorted(set(LAYERS) - folders))
    out = subprocess.run(["make", "-s", "-C", TOP, "--eval", "show-subsystems: ; @echo $(SUBSYSTEMS)",
                          "show-subsystems"], capture_output=True, text=True, check=True).stdout
    assert set(out.split()) == set(LAYERS)


def test_no_folder_of_ours_is_one_of_postgresql():
    """A folder of ours named like a folder of PostgreSQL's headers (as
    src/common was) makes its #include lines read like PostgreSQL's, and
    one header name away from shadowing theirs."""
    includedir = pg_includedir()
    theirs = {d for d in os.listdir(includedir) if os.path.isdir(os.path.join(includedir, d))}
    assert not set(LAYERS) & theirs, sorted(set(LAYERS) & theirs)


def test_includes_follow_the_layers():
    """Each file includes only the folders its own folder may (LAYERS): the
    bottom layer (core) no other finalize folder, alert not worker."""
    wrong = [(rel, inc) for rel, inc in folder_includes()
             if folder_of(rel) and inc != folder_of(rel) and inc not in LAYERS[folder_of(rel)]]
    assert not wrong, wrong
    assert not [rel for rel, inc in folder_includes() if folder_of(rel) == "core" and inc != "core"]
    assert not [rel for rel, inc in folder_includes() if folder_of(rel) == "alert" and inc == "worker"]


def test_no_include_circle_between_folders():
    """The folders' #include lines (as found, not as LAYERS allows) form no
    circle: every folder can be built and read on top of the ones below."""
    edges = {}
    for rel, inc in folder_includes():
        if folder_of(rel) and inc != folder_of(rel):
            edges.setdefault(folder_of(rel), set()).add(inc)
    done, path = set(), []

    def visit(folder):
        assert folder not in path, " -> ".join(path + [folder])
        if folder in done:
            return
        path.append(folder)
        for below in sorted(edges.get(folder, ())):
            visit(below)
        path.pop()
        done.add(folder)

    for folder in sorted(edges):
        visit(folder)


def make_args():
    """make in the checkout, against PG_CONFIG's PostgreSQL when it is set."""
    args = ["make", "-s", "-C", TOP]
    if os.environ.get("PG_CONFIG"):
        args.append("PG_CONFIG=" + os.environ["PG_CONFIG"])
    return args


@functools.lru_cache(maxsize=None)
def built_objects():
    """The objects of the shared library (the Makefile's OBJS, relative to
    the checkout), built first: a no-op after test/run-tests' build."""
    subprocess.run(make_args() + ["all"], check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run(make_args() + ["--eval", "show-objs: ; @echo $(OBJS)", "show-objs"],
                         capture_output=True, text=True, check=True).stdout
    objs = out.split()
    assert objs, "the Makefile names no objects"
    return tuple(objs)


def symbol_uses():
    """{object: {object it uses: [symbols]}}: for each object, the objects
    of ours that define the global symbols it leaves undefined (nm)."""
    defined, undefined = {}, {}
    for obj in built_objects():
        out = subprocess.run(["nm", os.path.join(TOP, obj)], capture_output=True, text=True, check=True).stdout
        undefined[obj] = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                undefined[obj].add(parts[1])
            elif len(parts) == 3 and parts[1].isupper() and parts[1] not in "UVW":
                defined[parts[2]] = obj
    uses = {}
    for obj, names in undefined.items():
        for name in sorted(names):
            if name in defined and defined[name] != obj:
                uses.setdefault(obj, {}).setdefault(defined[name], []).append(name)
    return uses


def test_no_circle_between_files():
    """No two files use each other, directly or through others (which file
    defines each symbol another one uses, read from the objects with nm):
    every file can be read, tested and changed on top of the ones it uses,
    as the folders are (test_no_include_circle_between_folders)."""
    uses = symbol_uses()
    assert uses, "no object uses another"
    done, path = set(), []

    def visit(obj):
        if obj in path:
            circle = path[path.index(obj):] + [obj]
            raise AssertionError("a circle between files: " + circle[0][:-2] + ".c" + "".join(
                " -> %s (%s)" % (b[:-2] + ".c", ", ".join(uses[a][b][:3])) for a, b in zip(circle, circle[1:])))
        if obj in done:
            return
        path.append(obj)
        for used in sorted(uses.get(obj, ())):
            visit(used)
        path.pop()
        done.add(obj)

    for obj in sorted(uses):
        visit(obj)


def source_names(pattern):
    """The names a regular expression's group 1 finds in src/'s C files."""
    return {m.group(1) for rel in c_files() for m in re.finditer(pattern, read_src(rel), re.M)}


def sql_symbols():
    """Every C symbol an SQL script of ours names (AS 'MODULE_PATHNAME',
    'symbol'): the install parts, the upgrade scripts and the released
    install scripts, each of which PostgreSQL may run against this library."""
    out = set()
    for root, _, files in os.walk(os.path.join(TOP, "src", "sql")):
        for f in files:
            if f.endswith(".sql"):
                with open(os.path.join(root, f)) as sql:
                    out |= set(re.findall(r"'MODULE_PATHNAME'\s*,\s*'(\w+)'", sql.read()))
    assert out, "no SQL script names a C symbol"
    return out


def test_library_exports_only_what_postgresql_looks_up():
    """finalize.so's dynamic symbols (nm -D --defined-only) are what
    PostgreSQL looks up in it by name, no more: _PG_init, Pg_magic_func, the
    SQL-callable functions and their pg_finfo_ records, and the entry
    points the background workers are started with (bgw_function_name).
    Every other symbol stays inside the library (on 15, where PGDLLEXPORT
    marks nothing, the Makefile's SHLIB_EXPORTS keeps it there), and every
    symbol an SQL script names is there."""
    built_objects()
    out = subprocess.run(["nm", "-D", "--defined-only", os.path.join(TOP, "finalize.so")],
                         capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    callable_ = source_names(r"^PG_FUNCTION_INFO_V1\((\w+)\);")
    workers = source_names(r'(?:bgw_function_name,\s*|start_dynamic_worker\(\s*)"(\w+)"')
    assert callable_ and len(workers) >= 5, (callable_, workers)
    expected = {"_PG_init", "Pg_magic_func"} | callable_ | {"pg_finfo_" + f for f in callable_} | workers
    assert exported == expected, ("exported, not looked up", sorted(exported - expected),
                                  "looked up, not exported", sorted(expected - exported))
    assert not sql_symbols() - exported, sorted(sql_symbols() - exported)


def test_one_file_per_foreign_library():
    """Each foreign library's headers are included by one file only, the one
    src/README.md names: its rules are kept in one place."""
    for library, (pattern, owner) in LIBRARY_FILES.items():
        rx = re.compile(r"^\s*#\s*include\s+" + pattern, re.M)
        users = [rel for rel in c_files() if rx.search(read_src(rel))]
        if owner is None:
            assert len(users) <= 1, (library, users)
        else:
            assert users == [owner.replace("/", os.sep)], (library, users)


def blocks(text):
    """(first line number, lines) of every block from a line starting with
    "{" (a function's body, at column 0 in this tree's style) to the next
    line starting with "}", both counted."""
    start = None
    for i, line in enumerate(text.split("\n"), 1):
        if line.startswith("{"):
            start = i
        elif line.startswith("}") and start is not None:
            yield start, i - start + 1
            start = None


def test_files_and_functions_within_limits():
    """No C file (or header) of src/ over MAX_FILE_LINES lines, no function
    body over MAX_FUNCTION_LINES lines: a longer one is split, by job."""
    long_files = [(rel, n) for rel in c_files() if (n := read_src(rel).count("\n")) > MAX_FILE_LINES]
    assert not long_files, long_files
    long_functions = [(rel, line, n) for rel in c_files() for line, n in blocks(read_src(rel))
                      if n > MAX_FUNCTION_LINES]
    assert not long_functions, long_functions


# The one file where PostgreSQL's majors may differ (src/README.md).
COMPAT_HEADER = os.path.join("core", "pg_compat.h")


def version_tests(text):
    """The lines of a C file that test PostgreSQL's version (comments
    removed first: a comment may name PG_VERSION_NUM)."""
    code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    code = re.sub(r"//[^\n]*", "", code)
    return [line.strip() for line in code.split("\n")
            if re.search(r"\bPG_VERSION_NUM\b|\bPG_MAJORVERSION(_NUM)?\b", line)]


def test_version_differences_only_in_the_compat_header():
    """Every difference between PostgreSQL's majors lives in
    src/core/pg_compat.h: an #if PG_VERSION_NUM anywhere else scatters
    them through the subsystems, where a new major's review would miss one."""
    assert version_tests(read_src(COMPAT_HEADER)), "the compat header tests no version"
    scattered = [(rel, line) for rel in c_files() if rel != COMPAT_HEADER for line in version_tests(read_src(rel))]
    assert not scattered, scattered
    unit = os.path.join(TOP, "test", "unit")
    scattered = [(f, line) for f in sorted(os.listdir(unit)) if f.endswith((".c", ".h"))
                 for line in version_tests(open(os.path.join(unit, f)).read())]
    assert not scattered, scattered
