"""Files of a local (file://) store that the server, running as postgres, can read. Kept out of
conftest.py so that tests import it by a name no other test directory uses (pytest runs the
simulator's tests, with a conftest of their own, in the same process)."""

import os


def write_file(root, path, data):
    """Writes a file of a local store, every directory readable by the server."""
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    d = os.path.dirname(full)
    while d.startswith(root) and d != root:
        os.chmod(d, 0o755)
        d = os.path.dirname(d)
    with open(full, "wb") as f:
        f.write(data)
    os.chmod(full, 0o644)
