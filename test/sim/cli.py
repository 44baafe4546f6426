"""Command line of test/mssql-sim."""
import argparse
import logging
import os
import signal
import sys

from .config import Config

DESCRIPTION = """SQL Server 2019/2022 CDC simulator speaking TDS 7.1 to 7.4, with TLS like SQL Server
when given a certificate (--tls-cert; --force-encryption).

Serves database 'demo' with CDC enabled on dbo.orders (capture instance
dbo_orders) to FreeTDS, tedious and other TDS clients; --extra-databases adds
more databases like it to the same instance (one clock, per-database CDC).  Control it over TDS with
EXEC sim.* procedures (see test/sim/README.md)."""


def parse_args(argv):
    d = Config()
    p = argparse.ArgumentParser(prog="mssql-sim", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default=d.host, help="listen address (default %(default)s)")
    p.add_argument("--port", type=int, default=d.port, help="TCP port, 0 = pick a free one (default %(default)s)")
    p.add_argument("--ready-file", help="write the port number to this file once listening")
    p.add_argument("--database", default=d.database, help="database name (default %(default)s)")
    p.add_argument("--extra-databases", default="", metavar="SPEC",
                   help="more databases on the instance, each like --database (dbo.orders with CDC, or empty with "
                   "--no-demo): comma-separated NAME, PATTERN:COUNT or PATTERN:FIRST-LAST, PATTERN with one "
                   "printf integer (shard_%%03d:1000 -> shard_001 .. shard_1000)")
    p.add_argument("--storage-dir", default="", metavar="DIR",
                   help="directory for the sqlite files (a temporary directory inside it, removed at exit; default: "
                   "the system's temporary directory, with --extra-databases /dev/shm if writable with 2 GB free)")
    p.add_argument("--login", default=d.login, help="sysadmin login (default %(default)s)")
    p.add_argument("--password", default=d.password, help="its password (default %(default)s)")
    p.add_argument("--timezone", default=d.timezone, help="IANA zone of the server clock (default %(default)s)")
    p.add_argument("--clock", choices=["real", "sim"], default=d.clock,
                   help="real wall clock, or sim: moved only by EXEC sim.advance (default %(default)s)")
    p.add_argument("--start-time", default="", help="sim clock start, UTC (e.g. 2026-11-01T00:00:00Z)")
    p.add_argument("--pollinginterval", type=float, default=d.pollinginterval,
                   help="capture job: seconds between scan cycles (default %(default)s)")
    p.add_argument("--maxtrans", type=int, default=d.maxtrans, help="capture job: transactions per scan (default "
                   "%(default)s)")
    p.add_argument("--maxscans", type=int, default=d.maxscans, help="capture job: scans per cycle (default "
                   "%(default)s)")
    p.add_argument("--retention", type=int, default=d.retention, help="cleanup: retention minutes (default "
                   "%(default)s)")
    p.add_argument("--threshold", type=int, default=d.threshold, help="cleanup: rows per DELETE (default "
                   "%(default)s)")
    p.add_argument("--cleanup-time", default=d.cleanup_time, help="cleanup: daily local HH:MM, '' = never "
                   "(default %(default)s)")
    p.add_argument("--dummy-interval", type=float, default=d.dummy_interval,
                   help="seconds without a mapping row before capture writes a dummy row, 0 = never "
                   "(default %(default)s)")
    p.add_argument("--dummy-on-idle-log", choices=["yes", "no"], default="yes",
                   help="write dummy rows even when the log had no activity at all (default yes)")
    p.add_argument("--map-absent", choices=["null", "next"], default=d.map_absent,
                   help="fn_cdc_map_lsn_to_time of an LSN not in the mapping table: NULL, or the time of "
                   "the next mapped LSN (default %(default)s)")
    p.add_argument("--traffic", action="store_true", help="run the live transaction generator")
    p.add_argument("--traffic-rate", type=float, default=d.traffic_rate,
                   help="generated transactions per second (default %(default)s)")
    p.add_argument("--traffic-tables", default=d.traffic_tables, help="comma list (default %(default)s)")
    p.add_argument("--lateness", type=_lateness, default=d.lateness, metavar="SPEC",
                   help="event time of generated date/time values: none (up to 2 s before the commit, UTC), "
                   "exp:MEAN_SECONDS, pareto:ALPHA:SCALE_SECONDS, uniform:MAX_SECONDS, optionally ,neg:FRACTION "
                   "(that fraction 0-2 s after the commit); written as the server's local time (default %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="random seed (default %(default)s)")
    p.add_argument("--version", dest="sql_version", choices=["2019", "2022"], default=d.version,
                   help="SQL Server version to announce (default %(default)s)")
    p.add_argument("--no-demo", action="store_true", help="start without dbo.orders and without CDC enabled")
    p.add_argument("--collation", default=d.collation,
                   help="database collation; a name containing _CS_ makes object names and string comparisons "
                   "case-sensitive (default %(default)s)")
    p.add_argument("--commit-time-offset", type=int, default=d.commit_time_offset,
                   help="minutes added to the local clock when stamping tran_begin_time/tran_end_time/ddl_time "
                   "(default %(default)s)")
    p.add_argument("--tls-cert", default=d.tls_cert, metavar="FILE",
                   help="PEM server certificate (chain): the server can encrypt; PRELOGIN answers like a SQL "
                   "Server with a certificate (client OFF -> login-only TLS, ON -> full TLS, NOT_SUP -> plain). "
                   "Without it: ENCRYPT_NOT_SUP, and a client requiring encryption is disconnected")
    p.add_argument("--tls-key", default=d.tls_key, metavar="FILE",
                   help="PEM private key of --tls-cert (default: in the certificate file)")
    p.add_argument("--force-encryption", action="store_true",
                   help="SQL Server's Force Encryption: every session fully encrypted (client OFF -> REQ); a "
                   "client that cannot encrypt (NOT_SUP) gets REQ and is disconnected (needs --tls-cert)")
    p.add_argument("--windows-domain", default=d.windows_domain, metavar="NETBIOS",
                   help="the Windows domain the server belongs to; the simulator is its domain controller for NTLM "
                   "(accounts: EXEC sim.add_windows_account) (default %(default)s)")
    p.add_argument("--windows-realms", default="", metavar="REALM=DOMAIN,...",
                   help="Kerberos realms whose principals log in as DOMAIN\\user (e.g. FINALIZE.TEST=FINALIZE); "
                   "a principal of any other realm is from an untrusted domain (18452)")
    p.add_argument("--kerberos-keytab", default="", metavar="FILE",
                   help="keytab of the service account (its MSSQLSvc SPNs); read at each Kerberos login, with "
                   "KRB5_CONFIG from the environment.  Without it a Kerberos login gets 18452")
    p.add_argument("--kerberos-spn", default="", metavar="SPN",
                   help="accept tickets for this SPN only (MSSQLSvc/host:port); default: any key in the keytab")
    p.add_argument("--kerberos-max-skew", type=int, default=0, metavar="SECONDS",
                   help="Kerberos clock tolerance (the domain's 'Maximum tolerance for computer clock "
                   "synchronization'; MIT clockskew); 0 = krb5.conf's (300 s by default)")
    p.add_argument("--log-level", default="WARNING")
    return p.parse_args(argv)


def _lateness(spec):
    from .commits import parse_lateness
    try:
        parse_lateness(spec)
    except ValueError as e:
        raise argparse.ArgumentTypeError("invalid lateness %r: %s" % (spec, e))
    return spec


def config_from(args):
    return Config(host=args.host, port=args.port, database=args.database, extra_databases=args.extra_databases,
                  storage_dir=args.storage_dir,
                  login=args.login,
                  password=args.password, timezone=args.timezone, clock=args.clock, start_time=args.start_time,
                  pollinginterval=args.pollinginterval, maxtrans=args.maxtrans, maxscans=args.maxscans,
                  retention=args.retention, threshold=args.threshold, cleanup_time=args.cleanup_time,
                  dummy_interval=args.dummy_interval, dummy_on_idle_log=args.dummy_on_idle_log == "yes",
                  map_absent=args.map_absent, traffic=args.traffic, traffic_rate=args.traffic_rate,
                  traffic_tables=args.traffic_tables, lateness=args.lateness, seed=args.seed, version=args.sql_version,
                  demo=not args.no_demo, collation=args.collation, commit_time_offset=args.commit_time_offset,
                  tls_cert=args.tls_cert, tls_key=args.tls_key, force_encryption=args.force_encryption,
                  windows_domain=args.windows_domain, windows_realms=args.windows_realms,
                  kerberos_keytab=args.kerberos_keytab, kerberos_spn=args.kerberos_spn,
                  kerberos_max_skew=args.kerberos_max_skew)


def _raise_open_files():
    """Each database keeps its sqlite files open and each session its own connection to them: allow as many
    descriptors as the hard limit does (1,000 databases and sessions need about 15,000)."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))
    except (ImportError, ValueError, OSError):
        pass


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.WARNING),
                        format="%(asctime)s mssql-sim %(levelname)s %(message)s")
    from .server import Server
    try:
        from . import timeutil
        timeutil.zone(args.timezone)
    except Exception:
        print("mssql-sim: unknown time zone %r" % args.timezone, file=sys.stderr)
        return 2
    if args.force_encryption and not args.tls_cert:
        print("mssql-sim: --force-encryption needs --tls-cert", file=sys.stderr)
        return 2
    if args.tls_key and not args.tls_cert:
        print("mssql-sim: --tls-key needs --tls-cert", file=sys.stderr)
        return 2
    from .server import parse_database_spec
    try:
        names = [args.database] + parse_database_spec(args.extra_databases)
    except ValueError as e:
        print("mssql-sim: --extra-databases: %s" % e, file=sys.stderr)
        return 2
    seen = set()
    for n in names:
        if not n or len(n) > 128 or n.lower() in ("master", "tempdb", "model", "msdb") or n.lower() in seen:
            print("mssql-sim: database name %r is empty, too long, a system database's or given twice" % n,
                  file=sys.stderr)
            return 2
        seen.add(n.lower())
    if args.storage_dir and not os.path.isdir(args.storage_dir):
        print("mssql-sim: --storage-dir %r is not a directory" % args.storage_dir, file=sys.stderr)
        return 2
    _raise_open_files()
    try:
        server = Server(config_from(args))
    except (OSError, ValueError) as e:          # ssl.SSLError is an OSError
        print("mssql-sim: cannot load the TLS certificate/key: %s" % e, file=sys.stderr)
        return 2
    port = server.listen()
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, args.ready_file)
    print("mssql-sim listening on %s:%d" % (args.host, port), flush=True)

    def stop(signum, frame):
        server._stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever()
    finally:
        server.stop()
    return 0
