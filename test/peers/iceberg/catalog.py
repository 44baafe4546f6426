"""A real Apache Iceberg REST catalog for the tests: Iceberg's RESTCatalogServer (1.10.1) in a JVM.

    from catalog import start_catalog
    cat = start_catalog(workdir)          # or start_catalog(workdir, port=8181)
    cat.uri, cat.warehouse, cat.log_path  # http://127.0.0.1:PORT, file:///WORKDIR/warehouse, WORKDIR/catalog.log
    cat.stop()

The jars are those of maven.lock beside this file, fetched (once, verified by sha256) into the cache
mavenlib.py uses: ${FINALIZE_CACHE:-/var/cache/finalize-tests}/maven. The backend is what the stock server
builds from its CATALOG_* environment (RCKUtils.environmentCatalogConfig: CATALOG_X_Y -> x.y,
CATALOG_X__Y -> x-y): a JdbcCatalog on the SQLite file WORKDIR/catalog.db, HadoopFileIO (the JdbcCatalog's
default io-impl), the warehouse file:///WORKDIR/warehouse -- local files, which pyiceberg on the same machine
reads and writes too. The stock main (RESTCatalogServer.main) listens on every interface on rest.port
(CATALOG_REST_PORT; the Docker image's REST_PORT is only its health check's); by default this module runs
src/org/apache/iceberg/rest/LoopbackRESTCatalogServer.java instead, the same backend and servlet on
127.0.0.1 and an ephemeral port (or the port given), compiled once into the cache. stock=True runs the stock
main (on every interface).

The server has no authentication: it answers any request, and POST /v1/oauth/tokens hands out a token for
any client (see fault_proxy.py for a catalog that checks)."""
import atexit
import ctypes
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import mavenlib  # noqa: E402

LOCK = os.path.join(HERE, "maven.lock")
LAUNCHER = "org.apache.iceberg.rest.LoopbackRESTCatalogServer"
LAUNCHER_SRC = os.path.join(HERE, "src", "org", "apache", "iceberg", "rest", "LoopbackRESTCatalogServer.java")
STOCK_MAIN = "org.apache.iceberg.rest.RESTCatalogServer"
# A small heap and the client compiler: the server's work is JSON and small files; this starts faster.
JVM_OPTS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS"]


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def java_bin(name="java"):
    """java or javac: $JAVA_HOME/bin first, else the PATH; a clear error when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", name), os.X_OK):
        return os.path.join(home, "bin", name)
    found = shutil.which(name)
    if not found:
        raise RuntimeError("%s not found (the Iceberg catalog needs a JDK 11 or later; Debian: apt-get install "
                           "openjdk-17-jdk-headless)" % name)
    return found


def jars(report=None):
    """The server's class path: every jar of maven.lock, cached."""
    return [path for _, _, _, path in mavenlib.fetch_all(LOCK, report=report or (lambda msg: None))]


def launcher_classes(classpath):
    """The directory holding the compiled LoopbackRESTCatalogServer, compiled once per source and lock."""
    h = hashlib.sha256()
    for path in (LAUNCHER_SRC, LOCK):
        with open(path, "rb") as f:
            h.update(f.read())
    out = os.path.join(os.path.dirname(mavenlib.cache_dir()), "iceberg-launcher-" + h.hexdigest()[:16])
    if os.path.exists(os.path.join(out, ".done")):
        return out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = tempfile.mkdtemp(dir=os.path.dirname(out), prefix=".iceberg-launcher-")
    try:
        r = subprocess.run([java_bin("javac"), "-nowarn", "-encoding", "UTF-8", "-d", tmp,
                            "-cp", os.pathsep.join(classpath), LAUNCHER_SRC],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            raise RuntimeError("javac %s failed:\n%s" % (LAUNCHER_SRC, r.stdout))
        open(os.path.join(tmp, ".done"), "w").close()
        try:
            os.rename(tmp, out)
        except OSError:           # another run compiled it meanwhile: theirs is as good
            if not os.path.exists(os.path.join(out, ".done")):
                raise
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _die_with_parent():
    """In the child before exec: SIGTERM when the test process dies (so a killed pytest leaves no JVM).
    Linux's PR_SET_PDEATHSIG follows the thread that started the child: start the catalog from the main
    thread (as the fixtures do), not from a thread that ends before the catalog should."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except OSError:
        pass


def tail(path, lines=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return "(no log: %s)" % e


class Catalog:
    """A running RESTCatalogServer: .uri, .warehouse (file:// URL), .warehouse_path, .port, .log_path,
    .start_seconds (launch to the first answer of GET /v1/config), .stop()."""

    def __init__(self, proc, host, port, warehouse_path, workdir, log_path, start_seconds):
        self.proc = proc
        self.host = host
        self.port = port
        self.uri = "http://%s:%d" % (host, port)
        self.warehouse_path = warehouse_path
        self.warehouse = "file://" + warehouse_path
        self.workdir = workdir
        self.log_path = log_path
        self.start_seconds = start_seconds
        self.setup_seconds = 0.0

    def get(self, path, headers=None, timeout=10):
        """GET uri+path -> (status, headers, parsed JSON or raw bytes), errors included (no raise)."""
        req = urllib.request.Request(self.uri + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, hdrs, body = r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            status, hdrs, body = e.code, dict(e.headers), e.read()
        try:
            return status, hdrs, json.loads(body) if body else None
        except ValueError:
            return status, hdrs, body

    def load_table(self, ident):
        """GET /v1/namespaces/NS/tables/T (ident "ns.t") -> the LoadTableResult JSON; raises unless 200."""
        ns, name = ident.rsplit(".", 1)
        status, _, body = self.get("/v1/namespaces/%s/tables/%s" % (urllib.parse.quote(ns.replace(".", "\x1f")),
                                                                      urllib.parse.quote(name)))
        if status != 200:
            raise RuntimeError("loadTable %s: HTTP %d %s" % (ident, status, body))
        return body

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        """Stops the JVM (SIGTERM: Jetty's shutdown hook; SIGKILL after 10 s); the work directory stays."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            atexit.unregister(self.stop)
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_catalog(workdir, port=None, host="127.0.0.1", env=None, stock=False, timeout=60, report=None):
    """Starts RESTCatalogServer on WORKDIR (catalog.db, warehouse/, catalog.log) -> a Catalog once
    GET /v1/config answers 200. port: None for an ephemeral one. env: more CATALOG_* variables (or
    anything else) for the JVM. stock: run RESTCatalogServer.main itself (every interface; a free port
    is chosen when none is given). Raises RuntimeError with the log's tail when it does not start."""
    t0 = time.monotonic()
    workdir = os.path.abspath(workdir)
    warehouse = os.path.join(workdir, "warehouse")
    os.makedirs(warehouse, exist_ok=True)
    log_path = os.path.join(workdir, "catalog.log")
    port_file = os.path.join(workdir, "catalog.port")
    if os.path.exists(port_file):
        os.unlink(port_file)

    classpath = jars(report)
    if stock:
        main, args = STOCK_MAIN, []
        if port is None:
            port = free_port()
    else:
        classpath = classpath + [launcher_classes(classpath)]
        main, args = LAUNCHER, ["--host", host, "--port-file", port_file]

    child_env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    child_env.update({
        "CATALOG_URI": "jdbc:sqlite:" + os.path.join(workdir, "catalog.db"),
        "CATALOG_WAREHOUSE": "file://" + warehouse,
        "CATALOG_REST_PORT": str(port or 0),
    })
    child_env.update(env or {})

    t_launch = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([java_bin()] + JVM_OPTS + ["-cp", os.pathsep.join(classpath), main] + args,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
                                env=child_env, preexec_fn=_die_with_parent)
    deadline = time.monotonic() + timeout
    bound = None if not stock else port
    cat = None
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError("the Iceberg REST catalog exited (%s) before answering; %s ends:\n%s"
                                   % (proc.returncode, log_path, tail(log_path)))
            if bound is None and os.path.exists(port_file):
                with open(port_file) as f:
                    bound = int(f.read().strip())
            if bound is not None:
                if cat is None:
                    cat = Catalog(proc, host if not stock else "127.0.0.1", bound, warehouse, workdir, log_path, 0)
                try:
                    status, _, _ = cat.get("/v1/config", timeout=2)
                    if status == 200:
                        cat.start_seconds = time.monotonic() - t_launch
                        cat.setup_seconds = t_launch - t0
                        atexit.register(cat.stop)
                        return cat
                except OSError:
                    pass
            time.sleep(0.05)
        raise RuntimeError("the Iceberg REST catalog did not answer GET /v1/config within %ds; %s ends:\n%s"
                           % (timeout, log_path, tail(log_path)))
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise


if __name__ == "__main__":
    # python3 catalog.py [WORKDIR]: a catalog to poke at by hand, until Ctrl-C.
    wd = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="iceberg-catalog-")
    c = start_catalog(wd, report=print)
    print("%s (warehouse %s, log %s), up in %.2fs" % (c.uri, c.warehouse, c.log_path, c.start_seconds))
    try:
        c.proc.wait()
    except KeyboardInterrupt:
        c.stop()
