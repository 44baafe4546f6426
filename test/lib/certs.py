"""Throwaway X.509 certificates for TLS tests, made with the ``openssl`` command line (Debian's openssl 3).

Small API::

    sys.path.insert(0, "test/lib")
    from certs import make_test_pki, make_ca, issue

    pki = make_test_pki(str(tmp_path))          # one call, ~0.5 s
    pki.ca                   # PEM of the test CA: what clients trust (FreeTDS 'ca file', tedious {ca})
    pki.good.cert, .key      # localhost + 127.0.0.1 (SAN DNS and IP), signed by pki.ca
    pki.wrong_ca             # same names, signed by another CA (pki.other_ca) -> "issuer unknown"
    pki.expired              # same names, signed by pki.ca, valid 2020-01-01 .. 2021-01-01 only
    pki.wrong_name           # signed by pki.ca, but only for wrong-name.invalid -> hostname mismatch
    Simulator(tls_cert=pki.good.cert, tls_key=pki.good.key)                 # TLS available
    Simulator(tls_cert=..., tls_key=..., force_encryption=True)            # SQL Server's Force Encryption

    ca = make_ca(d, "myca")                                   # -> Cert(cert, key)
    leaf = issue(ca, d, "db1", dns=["db1.example"], ips=[])   # -> Cert(cert, key)
    leaf = issue(ca, d, "old", not_before="20200101000000Z", not_after="20210101000000Z")

Certificates are written 0644, private keys 0600, into ``directory`` (created 0755 if missing);
the directory must be readable by whoever reads the files (a PostgreSQL server running as another
user needs the CA file).  The leaf certificates of ``make_test_pki`` share one RSA-2048 key (keys
are the slow part).  Command line: ``python3 test/lib/certs.py DIR`` makes the set and prints its
paths as JSON (for Node or shell tests).
"""
import collections
import datetime
import json
import os
import subprocess
import sys

Cert = collections.namedtuple("Cert", "cert key")
PKI = collections.namedtuple("PKI", "dir ca ca_key other_ca good wrong_ca expired wrong_name")

_REQ_CNF = """[ req ]
distinguished_name = dn
prompt = no
[ dn ]
CN = unused
[ v3_ca ]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
"""

_CA_CNF = """[ ca ]
default_ca = test_ca
[ test_ca ]
database = {db}/index.txt
new_certs_dir = {db}
serial = {db}/serial
default_md = sha256
policy = any
unique_subject = no
copy_extensions = none
email_in_dn = no
[ any ]
commonName = supplied
[ leaf ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = {san}
"""


def _openssl(*args):
    p = subprocess.run(["openssl"] + list(args), capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (" ".join(args[:2]), p.stderr.strip()))
    return p.stdout


def _dir(directory):
    if not os.path.isdir(directory):
        os.makedirs(directory)
        os.chmod(directory, 0o755)


def make_key(path, bits=2048):
    """A new RSA private key (PKCS#8 PEM, mode 0600) at ``path``; returns the path."""
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:%d" % bits, "-out", path)
    os.chmod(path, 0o600)
    return path


def make_ca(directory, name="ca", cn=None, days=3650):
    """A self-signed CA: ``directory/name.crt`` and ``.key`` -> Cert(cert, key)."""
    _dir(directory)
    cnf = os.path.join(directory, name + ".req.cnf")
    with open(cnf, "w") as f:
        f.write(_REQ_CNF)
    key = make_key(os.path.join(directory, name + ".key"))
    crt = os.path.join(directory, name + ".crt")
    _openssl("req", "-x509", "-new", "-config", cnf, "-extensions", "v3_ca", "-key", key,
             "-subj", "/CN=%s" % (cn or "finalize test CA %s" % name), "-days", str(days), "-sha256",
             "-set_serial", "0x%s" % os.urandom(8).hex(), "-out", crt)
    os.chmod(crt, 0o644)
    return Cert(crt, key)


def issue(ca, directory, name, dns=("localhost",), ips=("127.0.0.1",), cn=None, days=825,
          not_before=None, not_after=None, key=None):
    """A server certificate signed by ``ca`` (a Cert) for the DNS names and IP addresses given (as
    subjectAltName; CN = ``cn`` or the first name): ``directory/name.crt`` (+ ``name.key`` unless an
    existing ``key`` path is given) -> Cert(cert, key).  ``not_before``/``not_after``: openssl dates
    (``YYYYMMDDHHMMSSZ``) instead of now .. now + ``days``."""
    _dir(directory)
    san = ", ".join(["DNS:%s" % d for d in dns] + ["IP:%s" % i for i in ips])
    if not san:
        raise ValueError("a server certificate needs at least one DNS name or IP address")
    db = os.path.join(directory, os.path.basename(ca.cert) + ".db")
    if not os.path.isdir(db):
        os.makedirs(db)
        open(os.path.join(db, "index.txt"), "w").close()
        with open(os.path.join(db, "serial"), "w") as f:
            f.write(os.urandom(8).hex().upper() + "\n")
    cnf = os.path.join(directory, name + ".ca.cnf")
    with open(cnf, "w") as f:
        f.write(_CA_CNF.format(db=db, san=san))
    req_cnf = os.path.join(directory, name + ".req.cnf")
    with open(req_cnf, "w") as f:
        f.write(_REQ_CNF)
    if key is None:
        key = make_key(os.path.join(directory, name + ".key"))
    csr = os.path.join(directory, name + ".csr")
    _openssl("req", "-new", "-config", req_cnf, "-key", key, "-subj", "/CN=%s" % (cn or (list(dns) + list(ips))[0]),
             "-out", csr)
    crt = os.path.join(directory, name + ".crt")
    if not not_before:              # an hour back: a client clock slightly behind still accepts it
        start = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
        not_before = start.strftime("%Y%m%d%H%M%SZ")
    dates = ["-startdate", not_before] + (["-enddate", not_after] if not_after else ["-days", str(days)])
    _openssl("ca", "-batch", "-notext", "-config", cnf, "-extensions", "leaf", "-cert", ca.cert,
             "-keyfile", ca.key, "-in", csr, "-out", crt, *dates)
    os.chmod(crt, 0o644)
    return Cert(crt, key)


def make_test_pki(directory):
    """The usual set for TLS tests (see the module doc) -> PKI(dir, ca, ca_key, other_ca, good, wrong_ca,
    expired, wrong_name); ``ca``/``other_ca`` are certificate paths, the others Cert(cert, key)."""
    _dir(directory)
    ca = make_ca(directory, "ca", "finalize test CA")
    other = make_ca(directory, "other-ca", "finalize test CA (untrusted)")
    key = make_key(os.path.join(directory, "server.key"))
    good = issue(ca, directory, "good", dns=("localhost",), ips=("127.0.0.1",), key=key)
    wrong_ca = issue(other, directory, "wrong-ca", dns=("localhost",), ips=("127.0.0.1",), key=key)
    expired = issue(ca, directory, "expired", dns=("localhost",), ips=("127.0.0.1",), key=key,
                    not_before="20200101000000Z", not_after="20210101000000Z")
    wrong_name = issue(ca, directory, "wrong-name", dns=("wrong-name.invalid",), ips=(), key=key)
    return PKI(directory, ca.cert, ca.key, other.cert, good, wrong_ca, expired, wrong_name)


def as_json(pki):
    """The PKI's paths as a JSON-friendly dict."""
    return {k: (v._asdict() if isinstance(v, Cert) else v) for k, v in pki._asdict().items()}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: certs.py DIR   (makes the test certificates there, prints their paths as JSON)",
              file=sys.stderr)
        sys.exit(2)
    print(json.dumps(as_json(make_test_pki(sys.argv[1])), indent=1))
