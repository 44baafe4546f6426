"""The test side (/usr/bin/python3) of writer.py: one pyiceberg writer process, driven over a pipe.

    w = Writer(venv_python, cat.uri, cat.warehouse)                  # or token=..., credential="id:secret"
    w.call("create_namespace", ns="ns")
    s = w.call("append", table="ns.t", rows=[{"id": 1}], properties={"finalize.watermark": "..."})
    w.close()

call() raises WriterError (with the writer's exception text and traceback) when the command failed, and
WriterDied when the process is gone. Keyword arguments of Writer other than the URI and the warehouse are
pyiceberg catalog properties; an underscore in a name stands for a dash (oauth2_server_uri ->
oauth2-server-uri), so Writer(..., token="t") is load_catalog("rest", uri=..., warehouse=..., token="t")."""
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WRITER = os.path.join(HERE, "writer.py")
SETUP_VENV = os.path.join(os.path.dirname(HERE), "setup-venv")


class WriterError(RuntimeError):
    """A command the writer answered with an error: .type is the exception's class, .text its message."""

    def __init__(self, cmd, answer):
        self.cmd = cmd
        self.type = answer.get("type")
        self.text = answer.get("error")
        self.traceback = answer.get("traceback")
        super().__init__("writer %s: %s%s" % (cmd, self.text, "\n" + self.traceback if self.traceback else ""))


class WriterDied(RuntimeError):
    pass


def venv_python():
    """The interpreter of test/peers/setup-venv iceberg (installed on first use, then cached)."""
    r = subprocess.run([SETUP_VENV, "iceberg"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError("test/peers/setup-venv iceberg failed:\n%s" % r.stderr[-4000:])
    return os.path.join(r.stdout.strip().splitlines()[-1], "bin", "python")


class Writer:
    def __init__(self, python, uri, warehouse=None, timeout=120, env=None, **props):
        self.timeout = timeout
        catalog = {"uri": uri}
        if warehouse is not None:
            catalog["warehouse"] = warehouse
        catalog.update({k.replace("_", "-") if not k.startswith("header.") else k: v for k, v in props.items()})
        self.props = catalog
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_")}
        # No ~/.pyiceberg.yaml of whoever runs the tests: an empty home of pyiceberg's own.
        self._home = tempfile.mkdtemp(prefix="pyiceberg-home-")
        child_env["PYICEBERG_HOME"] = self._home
        child_env.update(env or {})
        self._stderr = tempfile.TemporaryFile(mode="w+b")
        self.proc = subprocess.Popen([python, WRITER, json.dumps(catalog)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr, env=child_env)
        self._lock = threading.Lock()
        ready = self._read("(start)", timeout)
        if "error" in ready:
            err = WriterError("load_catalog", ready)
            self.close()
            raise err

    def stderr(self):
        """What the writer wrote to stderr so far (pyiceberg's warnings, tracebacks)."""
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def _read(self, cmd, timeout):
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("writer %s: no answer in %ds; stderr ends:\n%s" % (cmd, timeout,
                                                                                     self.stderr()[-3000:]))
            r, _, _ = select.select([fd], [], [], min(left, 1.0))
            if r:
                line = fd.readline()
                if not line:
                    self.proc.wait(5)
                    raise WriterDied("writer %s: the process ended (%s); stderr ends:\n%s"
                                     % (cmd, self.proc.returncode, self.stderr()[-3000:]))
                return json.loads(line)

    def call(self, cmd, timeout=None, **args):
        """Runs one command -> its result; raises WriterError on an error answer."""
        with self._lock:
            if self.proc.poll() is not None:
                raise WriterDied("writer %s: the process has ended (%s); stderr ends:\n%s"
                                 % (cmd, self.proc.returncode, self.stderr()[-3000:]))
            self.proc.stdin.write((json.dumps(dict(args, cmd=cmd)) + "\n").encode())
            self.proc.stdin.flush()
            answer = self._read(cmd, timeout or self.timeout)
        if "error" in answer:
            raise WriterError(cmd, answer)
        return answer["result"]

    def try_call(self, cmd, **args):
        """call() that returns (result, None) or (None, WriterError) instead of raising."""
        try:
            return self.call(cmd, **args), None
        except WriterError as e:
            return None, e

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdout, self._stderr):
            try:
                f.close()
            except OSError:
                pass
        shutil.rmtree(self._home, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


if __name__ == "__main__":
    print(venv_python(), file=sys.stderr)
