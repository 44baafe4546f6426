#!/usr/bin/python3
"""Windows logins against a SQL login, in the same run, one process per source
(finalize.max_source_workers = 0, so that each source's CPU is its process's), each source on its own
simulator (real FreeTDS over TCP), Kerberos tickets from a throwaway MIT KDC (test/lib/kdc.py):

  idle     three idle sources (sql, kerberos, ntlm) polled every --poll for --seconds: CPU per cycle of
           each worker (schedstat over the cycles counted in finalize.source_status), as ratios to the
           SQL source's. The Kerberos worker checks its ticket every cycle (kerberos.c); its tickets live
           8 s, so they are renewed from the keytab several times meanwhile.
  memory   the Kerberos worker's PSS and its memory contexts' grand total, after the first and at the
           end of the idle run: growth per 1,000 cycles.
  login    --logins times: the simulator's sessions killed, the wall time until the source's next
           successful login (sim.logins), per authentication, as ratios to the SQL login's.

Ratios are printed, not asserted. Run as root after the extension is installed:
    test/bench/auth_bench.py [--seconds 30] [--poll 100ms] [--logins 20]
"""
import argparse
import base64
import datetime
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from kdc import Kdc  # noqa: E402
from sources_bench import cpu_seconds, pss_kb  # noqa: E402
from worker_env import Env, memory_total, new_cluster, sim_clock  # noqa: E402

REALM, DOMAIN, PW = "FINALIZE.TEST", "FINALIZE", "Bench-Passw0rd-1"
KINDS = ("sql", "kerberos", "ntlm")


def start_sim(kdc, tmp):
    keytab = os.path.join(tmp, "sim-%d.keytab" % len(os.listdir(tmp)))
    sim = sim_clock(windows_domain=DOMAIN, windows_realms="%s=%s" % (REALM, DOMAIN), kerberos_keytab=keytab,
                    kerberos_max_skew=1).start()
    kdc.keytab(kdc.service_principal("127.0.0.1", sim.port), keytab)
    for user in ("alice", "bob"):
        sim.call("sim.create_login", login="%s\\%s" % (DOMAIN, user), db_owner=1)
    sim.call("sim.create_login", login="finalize_sql", password=PW, db_owner=1)
    sim.call("sim.add_windows_account", name="%s\\bob" % DOMAIN, password=PW)
    sim.call("sim.commit", inserts=1)          # a max LSN to read
    sim.call("sim.advance", seconds=10)
    return sim


def add_source(env, kind, sim, kdc):
    env.sql("CREATE SERVER src_%s FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host '127.0.0.1', port '%d', "
            "database '%s', encrypt 'off', clock_tolerance '0 s', authentication '%s')"
            % (kind, sim.port, sim.database, kind))
    if kind == "sql":
        opts, args = "username %s, password %s", ("finalize_sql", PW)
    elif kind == "ntlm":
        opts, args = "username %s, password %s", ("%s\\bob" % DOMAIN, PW)
    else:
        opts, args = "principal %s, keytab %s", ("alice@" + REALM, base64.b64encode(kdc.keytab_bytes("alice")).decode())
    env.sql("CREATE USER MAPPING FOR CURRENT_USER SERVER src_%s OPTIONS (%s)" % (kind, opts), args)
    env.sources["src_" + kind] = sim
    env.track("b.%s" % kind, "src_" + kind)


def status(env, kind):
    return env.source_status("src_" + kind)


def idle(env, seconds):
    time.sleep(10)                             # warm: every cache of the workers filled, several tickets had
    pids = {k: status(env, k)["worker_pid"] for k in KINDS}
    c0 = {k: status(env, k)["cycles"] for k in KINDS}
    t0 = {k: cpu_seconds(pids[k]) for k in KINDS}
    mem0 = {k: (pss_kb(pids[k]), memory_total(env.pg, pids[k])) for k in KINDS}
    time.sleep(seconds)
    per = {}
    for k in KINDS:
        cycles = status(env, k)["cycles"] - c0[k]
        per[k] = (cpu_seconds(pids[k]) - t0[k]) / max(cycles, 1)
        print("idle %-9s %6d cycles, %7.1f us CPU per cycle, %.2fx sql" % (k, cycles, per[k] * 1e6,
                                                                         per[k] / per["sql"] if k != "sql" else 1))
    for k in KINDS:
        cycles = status(env, k)["cycles"] - c0[k]
        mem1 = (pss_kb(pids[k]), memory_total(env.pg, pids[k]))
        print("memory %-9s PSS %d -> %d kB, contexts %d -> %d bytes over %d cycles: %.1f kB PSS and %d bytes of "
              "contexts per 1,000 cycles" % (k, mem0[k][0], mem1[0], mem0[k][1], mem1[1], cycles,
                                            (mem1[0] - mem0[k][0]) * 1000.0 / max(cycles, 1),
                                            (mem1[1] - mem0[k][1]) * 1000 // max(cycles, 1)))
    print("kerberos ticket now ends %s" % status(env, "kerberos")["ticket_expires"])


def source_logins(sim):
    """How many logins of finalize (not the bench's own, as sa) the simulator accepted so far."""
    return sum(1 for l in sim.call("sim.logins", top=100000)[0] if l["error"] == 0 and l["login_name"] != "sa")


def logins(env, sims, n):
    took = {k: [] for k in KINDS}
    for _ in range(n):
        for k in KINDS:
            sim = sims[k]
            before = source_logins(sim)
            t = time.monotonic()
            sim.call("sim.kill_sessions")
            env.pg.wait_for(lambda: source_logins(sim) > before, timeout=30, interval=0.05,
                            what="a new login of %s" % k)
            took[k].append(time.monotonic() - t)
    base = statistics.median(took["sql"])
    for k in KINDS:
        m = statistics.median(took[k])
        print("login %-9s median %6.1f ms after the kill (poll included), %.2fx sql" % (k, m * 1000, m / base))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--poll", default="100ms")
    ap.add_argument("--logins", type=int, default=20)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="finalize-authbench.")
    os.chmod(tmp, 0o755)
    kdc = Kdc(os.path.join(tmp, "kdc"), realm=REALM)
    os.environ["KRB5_CONFIG"] = kdc.krb5_conf
    simdir = os.path.join(tmp, "sims")
    os.mkdir(simdir)
    kdc.add_principal("alice", maxlife="8 seconds")
    sims = {k: start_sim(kdc, simdir) for k in KINDS}
    pg = new_cluster(**{"finalize.max_source_workers": "0", "finalize.poll_interval": a.poll})
    env = Env(pg)
    try:
        for k in KINDS:
            add_source(env, k, sims[k], kdc)
        pg.wait_for(lambda: all((status(env, k) or {}).get("condition") == "ok" for k in KINDS), timeout=60,
                    what="every source ok")
        idle(env, a.seconds)
        logins(env, sims, a.logins)
    finally:
        env.cleanup()
        pg.cleanup()
        for s in sims.values():
            s.stop()
        kdc.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
