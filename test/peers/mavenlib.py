"""Jars from Maven Central, pinned by sha256 and cached: what the Java peers (jdbc/, debezium/, iceberg/) share.

A lock file lists one artifact per line, ``groupId:artifactId:version sha256-of-the-jar`` (``#`` starts a
comment); ``groupId:artifactId:version:classifier sha256`` names a classified jar,
``artifactId-version-classifier.jar`` (Iceberg's ``test-fixtures`` and ``tests`` jars). ``fetch_all(lock)``
puts each jar into ${FINALIZE_CACHE:-/var/cache/finalize-tests}/maven, in Maven's repository layout,
downloading only what is missing or does not have its hash, and returns the paths in the lock's order. A jar
whose download does not have the locked hash is refused (and not kept)."""
import glob
import hashlib
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request

CENTRAL = "https://repo1.maven.org/maven2"


def cache_dir():
    """The local Maven repository the peers share, under the cache setup-venv uses."""
    if os.environ.get("FINALIZE_CACHE"):
        top = os.environ["FINALIZE_CACHE"]
    elif os.geteuid() == 0:
        top = "/var/cache/finalize-tests"
    else:
        top = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "finalize-tests")
    return os.path.join(top, "maven")


class Locked(tuple):
    """One line of a lock: the tuple (group, artifact, version, sha256), and .classifier (None for a plain jar)."""

    def __new__(cls, group, artifact, version, sha, classifier=None):
        self = super().__new__(cls, (group, artifact, version, sha))
        self.classifier = classifier
        return self


def read_lock(path):
    """A lock file -> [(group, artifact, version, sha256)], each with .classifier (None unless the line gives one)."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            coords, sha = line.split()
            parts = coords.split(":")
            if len(parts) not in (3, 4) or not all(parts):
                raise ValueError("%s:%d: %r is not group:artifact:version[:classifier]" % (path, n, coords))
            out.append(Locked(parts[0], parts[1], parts[2], sha.lower(), parts[3] if len(parts) == 4 else None))
    return out


def sha256(path):
    """The hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(cache, group, artifact, version, sha, classifier=None):
    """The jar in the cache (downloaded and verified if missing or wrong) -> (path, downloaded?)."""
    rel = "%s/%s/%s/%s-%s%s.jar" % (group.replace(".", "/"), artifact, version, artifact, version,
                                    "-" + classifier if classifier else "")
    name = "%s:%s:%s%s" % (group, artifact, version, ":" + classifier if classifier else "")
    path = os.path.join(cache, rel)
    if os.path.exists(path) and sha256(path) == sha:
        return path, False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for stale in glob.glob(os.path.join(os.path.dirname(path), ".part-*")):
        if time.time() - os.path.getmtime(stale) > 3600:      # left by a download that was killed
            os.unlink(stale)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out:
            download("%s/%s" % (CENTRAL, rel), out, name)
        got = sha256(tmp)
        if got != sha:
            raise RuntimeError("%s: sha256 %s, the lock says %s" % (name, got, sha))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path, True


def download(url, out, name, attempts=3):
    """Copies url into the open file out, trying again (after 2 s, then 4 s) on a network error."""
    for attempt in range(attempts):
        try:
            out.seek(0)
            out.truncate()
            with urllib.request.urlopen(url, timeout=60) as r:
                shutil.copyfileobj(r, out)
            return
        except (OSError, urllib.error.URLError) as e:
            if attempt == attempts - 1:
                raise RuntimeError("downloading %s from %s failed: %s" % (name, url, e)) from e
            time.sleep(2 ** (attempt + 1))


def fetch_all(lock_path, report=print):
    """Every jar of a lock file, cached -> [(group, artifact, version, path)] (a classified jar's classifier is
    in its path's name); reports what it did."""
    cache = cache_dir()
    out = []
    fetched = 0
    for entry in read_lock(lock_path):
        group, artifact, version, sha = entry
        path, new = fetch(cache, group, artifact, version, sha, entry.classifier)
        fetched += new
        out.append((group, artifact, version, path))
    report("# %d jars of %s: %d downloaded, %d cached" % (len(out), os.path.basename(os.path.dirname(lock_path))
                                                          + "/" + os.path.basename(lock_path), fetched,
                                                          len(out) - fetched))
    return out
