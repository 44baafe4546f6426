"""Windows logins to SQL Server (docs/sql-server.md, "Windows authentication"): sources that log in with
Kerberos (a keytab in the user mapping, tickets from a real MIT KDC on loopback, test/lib/kdc.py) and with
NTLMv2, through real FreeTDS over TCP against simulators that accept them as SQL Server does
(test/sim/winauth.py). A pool of 2 workers serves four sources, so that one worker logs in with two
principals: each simulator records who logged in, and no login ever carries another source's principal.
A ticket that ends is renewed from the keytab without a gap in the verdict; a KDC that goes away is the
source's condition kerberos_failed and an incident (the other sources go on); a KDC whose clock is 10
minutes off, an unknown principal, an SPN nobody holds and a keytab the account's new key made stale each
say what is wrong in MIT Kerberos's own words. No keytab or password ever reaches a message, the log or a
view."""

import base64
import datetime
import os
import shutil
import sys
import tempfile

import pytest

from worker_env import Env, new_cluster, sim_clock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from kdc import Kdc  # noqa: E402

REALM = "FINALIZE.TEST"
DOMAIN = "FINALIZE"
NTLM_PASSWORD = "Ntlm-Passw0rd-7c1e"
# the Kerberos sources: their server names and principals (one simulator each)
KERBEROS = {"krb_a": "alice", "krb_b": "carl", "krb_c": "erin"}
# a ticket this short is renewed several times within a test
SHORT_LIFE = "8 seconds"


@pytest.fixture(scope="module")
def kdc():
    work = tempfile.mkdtemp(prefix="finalize-kdc.")
    os.chmod(work, 0o755)
    k = Kdc(os.path.join(work, "kdc"), realm=REALM)
    saved = os.environ.get("KRB5_CONFIG")
    # PostgreSQL and the simulators started below inherit it (the machine's krb5.conf is not the test's)
    os.environ["KRB5_CONFIG"] = k.krb5_conf
    yield k
    if saved is None:
        os.environ.pop("KRB5_CONFIG", None)
    else:
        os.environ["KRB5_CONFIG"] = saved
    k.close()
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def pg(kdc):
    cluster = new_cluster(**{"finalize.max_source_workers": "2", "finalize.alert_after": "1s",
                             "finalize.login_timeout": "5s"})
    yield cluster
    cluster.cleanup()


def windows_sim(kdc, keytab_dir):
    """A simulator that accepts Kerberos for its own SPN (MSSQLSvc/127.0.0.1:<port>) and NTLMv2 for
    the accounts registered in it, with the login FINALIZE\\<user> for every principal of the test."""
    keytab = os.path.join(keytab_dir, "sim-%d.keytab" % len(os.listdir(keytab_dir)))
    sim = sim_clock(windows_domain=DOMAIN, windows_realms="%s=%s" % (REALM, DOMAIN), kerberos_keytab=keytab,
                    kerberos_max_skew=1).start()
    kdc.keytab(kdc.service_principal("127.0.0.1", sim.port), keytab)
    for user in list(KERBEROS.values()) + ["bob"]:
        sim.call("sim.create_login", login="%s\\%s" % (DOMAIN, user), db_owner=1)
    sim.call("sim.add_windows_account", name="%s\\bob" % DOMAIN, password=NTLM_PASSWORD)
    sim.call("sim.commit", inserts=1)          # a max LSN from the start
    sim.call("sim.advance", seconds=10)
    return sim


@pytest.fixture(scope="module")
def sims(kdc):
    d = tempfile.mkdtemp(prefix="finalize-sims.")
    os.chmod(d, 0o755)
    for user in KERBEROS.values():
        kdc.add_principal(user, maxlife=SHORT_LIFE if user == "alice" else None)
    started = {name: windows_sim(kdc, d) for name in list(KERBEROS) + ["ntlm_d"]}
    yield started
    for sim in started.values():
        sim.stop()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def env(pg):
    e = Env(pg)
    yield e
    e.cleanup()


def keytab_b64(kdc, principal):
    """The principal's keytab as the user mapping holds it (base64 -w0)."""
    return base64.b64encode(kdc.keytab_bytes(principal)).decode()


def add_kerberos_source(env, name, sim, principal, keytab, **options):
    opts = {"host": "127.0.0.1", "port": str(sim.port), "database": sim.database, "encrypt": "off",
            "clock_tolerance": "0 s", "authentication": "kerberos"}
    opts.update(options)
    env.sql('CREATE SERVER "%s" FOREIGN DATA WRAPPER finalize_mssql OPTIONS (%s)'
            % (name, ", ".join("%s '%s'" % kv for kv in opts.items())))
    env.sql('CREATE USER MAPPING FOR CURRENT_USER SERVER "%s" OPTIONS (principal %%s, keytab %%s)' % name,
            ("%s@%s" % (principal, REALM), keytab))
    env.sources[name] = sim


def add_ntlm_source(env, name, sim):
    env.sql('CREATE SERVER "%s" FOREIGN DATA WRAPPER finalize_mssql OPTIONS (host \'127.0.0.1\', port \'%d\', '
            'database \'%s\', encrypt \'off\', clock_tolerance \'0 s\', authentication \'ntlm\')'
            % (name, sim.port, sim.database))
    env.sql('CREATE USER MAPPING FOR CURRENT_USER SERVER "%s" OPTIONS (username %%s, password %%s)' % name,
            ("%s\\bob" % DOMAIN, NTLM_PASSWORD))
    env.sources[name] = sim


def verdict(env, table):
    return env.one("SELECT finalize.finalized_until(%s)", (table,))


def sim_now(sim):
    value = sim.call("sim.state")[0][0]["clock_utc"]
    if isinstance(value, str):
        value = datetime.datetime.fromisoformat(value)
    return value.replace(tzinfo=datetime.timezone.utc) if value.tzinfo is None else value


def commit_hour(sim):
    """A commit in the simulator's next hour (at hh:05), then its clock to (hh+1):05: hour hh becomes
    final. Returns the verdict that makes: (hh+1):00."""
    hour = sim_now(sim).replace(minute=0, second=0, microsecond=0) + datetime.timedelta(hours=1)
    sim.call("sim.commit", at=hour + datetime.timedelta(minutes=5), inserts=1)
    sim.call("sim.advance", to=hour + datetime.timedelta(hours=1, minutes=5))
    return hour + datetime.timedelta(hours=1)


def wait_verdict(env, table, expected, timeout=40):
    env.pg.wait_for(lambda: verdict(env, table) == expected, timeout=timeout,
                    what=lambda: "%s final until %s: %s" % (table, expected, env.source_status(
                        env.one("SELECT server_name FROM finalize.tracked_table WHERE table_name = %s",
                                (table,)))))


def logins(sim):
    """Every login the simulator saw but the test's own (as sa, through sim.call), oldest first
    (auth_scheme, principal, login_name, error)."""
    return [l for l in reversed(sim.call("sim.logins", top=1000)[0])
            if (l["auth_scheme"], l["login_name"]) != ("SQL", "sa")]


def condition(env, source):
    return (env.source_status(source) or {}).get("condition")


def start_all(env, kdc, sims):
    for name, user in KERBEROS.items():
        add_kerberos_source(env, name, sims[name], user, keytab_b64(kdc, user))
    add_ntlm_source(env, "ntlm_d", sims["ntlm_d"])
    for name in sims:
        env.track("t.%s" % name, name)


def test_two_principals_in_one_worker_never_mix(env, kdc, sims):
    start_all(env, kdc, sims)
    for _ in range(2):
        expected = {}
        for name, sim in sims.items():
            expected[name] = commit_hour(sim)
            # a new login each hour: the pool worker serving two sources logs in as each in turn
            sim.call("sim.kill_sessions")
        for name in sims:
            wait_verdict(env, "t.%s" % name, expected[name])
    pids = {}
    for name in sims:
        def healthy():
            st = env.source_status(name)
            if name not in KERBEROS:
                return st["condition"] == "ok" and st["ticket_expires"] is None and st
            return st["condition"] == "ok" and st["ticket_expires"] is not None and \
                st["ticket_expires"] > datetime.datetime.now(datetime.timezone.utc) and st
        # (a cycle late under load may show a ticket ended a moment ago: the next renews it)
        st = env.pg.wait_for(healthy, what=lambda: "%s ok with its ticket: %s" % (name, env.source_status(name)))
        pids.setdefault(st["worker_pid"], []).append(name)
    assert max(len(v) for v in pids.values()) >= 2, pids       # a worker served two sources
    for name, user in KERBEROS.items():
        seen = [l for l in logins(sims[name]) if l["error"] == 0]
        assert len(seen) >= 2, seen
        assert {(l["auth_scheme"], l["principal"], l["login_name"]) for l in seen} == \
            {("KERBEROS", "%s@%s" % (user, REALM), "%s\\%s" % (DOMAIN, user))}, seen
    seen = [l for l in logins(sims["ntlm_d"]) if l["error"] == 0]
    assert seen and {(l["auth_scheme"], l["login_name"]) for l in seen} == {("NTLM", "%s\\bob" % DOMAIN)}, seen
    # no secret anywhere: the log, the views a user reads, the errors
    log = env.pg.log()
    for name, user in KERBEROS.items():
        assert keytab_b64(kdc, user)[:40] not in log
    assert NTLM_PASSWORD not in log
    shown = str(env.pg.rows("SELECT * FROM finalize.source_status")) + str(env.pg.rows("SELECT * FROM finalize.status"))
    assert NTLM_PASSWORD not in shown and "keytab" not in shown


def test_a_ticket_that_ends_is_renewed_without_a_gap(env, kdc, sims):
    """alice's tickets live 8 s: the worker renews them from the keytab before they end, and logins
    after each renewal (the simulator's sessions killed) succeed; the verdict never stops."""
    before = env.one("SELECT coalesce(max(alert_id), 0) FROM finalize.alerts")
    start_all(env, kdc, sims)
    sim = sims["krb_a"]
    wait_verdict(env, "t.krb_a", commit_hour(sim))
    first = env.source_status("krb_a")["ticket_expires"]
    assert first is not None
    seen = {first}
    for _ in range(2):
        expected = commit_hour(sim)
        sim.call("sim.kill_sessions")
        wait_verdict(env, "t.krb_a", expected, timeout=30)
        env.pg.wait_for(lambda: env.source_status("krb_a")["ticket_expires"] not in seen, timeout=20,
                        what=lambda: "a renewed ticket: %s" % env.source_status("krb_a"))
        seen.add(env.source_status("krb_a")["ticket_expires"])
    assert not [l for l in logins(sim) if l["error"] != 0 and l["principal"] == "alice@" + REALM]
    # (CI's load may open other incidents, a login timing out; never a Kerberos one)
    assert env.one("SELECT count(*) FROM finalize.alerts WHERE server_name = 'krb_a' AND kind = 'kerberos_failed' "
                   "AND alert_id > %s", (before,)) == 0


def test_a_kdc_gone_is_a_condition_and_an_incident_and_stops_no_other_source(env, kdc, sims):
    """The KDC's port swallows every request (a firewall dropping packets): MIT's client would wait out
    its own timeouts (about 30 s), so the request is ended at finalize.login_timeout (5 s here), and asked
    again only after a growing wait; the other sources of the pool worker go on meanwhile."""
    start_all(env, kdc, sims)
    expected = {name: commit_hour(sim) for name, sim in sims.items()}
    for name in sims:
        wait_verdict(env, "t.%s" % name, expected[name])
    kdc.blackhole()
    try:
        # alice's short ticket ends and cannot be renewed: source_status shows no ticket, and her next
        # login fails (SQL Server would keep an open session, but the pool may move the source to its
        # other worker, whose process has no ticket of hers: a login all the same)
        env.pg.wait_for(lambda: env.source_status("krb_a")["ticket_expires"] is None, timeout=40,
                        what=lambda: "no ticket: %s" % env.source_status("krb_a"))
        sims["krb_a"].call("sim.kill_sessions")
        env.pg.wait_for(lambda: condition(env, "krb_a") == "kerberos_failed", timeout=40,
                        what=lambda: "kerberos_failed: %s" % env.source_status("krb_a"))
        st = env.source_status("krb_a")
        assert "Cannot contact any KDC for realm '%s'" % REALM in st["last_error"] and \
            "krb5.conf" in st["last_error"], st["last_error"]
        alert = env.pg.wait_for(lambda: env.pg.rows(
            "SELECT * FROM finalize.alerts WHERE kind = 'kerberos_failed' AND server_name = 'krb_a' "
            "AND state = 'open'"), what="the kerberos_failed incident")
        assert alert[0]["severity"] == "critical" and "KDC" in alert[0]["message"], alert
        # the other sources go on (their tickets, or NTLM, need no KDC now)
        for name in ("krb_b", "ntlm_d"):
            wait_verdict(env, "t.%s" % name, commit_hour(sims[name]))
        assert verdict(env, "t.krb_a") == expected["krb_a"]
    finally:
        kdc.start()
    # asked again within its wait (at most a minute)
    env.pg.wait_for(lambda: condition(env, "krb_a") == "ok", timeout=90,
                    what=lambda: "krb_a back: %s" % env.source_status("krb_a"))
    wait_verdict(env, "t.krb_a", commit_hour(sims["krb_a"]))
    env.pg.wait_for(lambda: not env.pg.rows("SELECT 1 FROM finalize.alerts WHERE kind = 'kerberos_failed' "
                                            "AND server_name = 'krb_a' AND state = 'open'"),
                    what="the incident resolved")


def wait_error(env, source, timeout=40):
    env.pg.wait_for(lambda: condition(env, source) == "kerberos_failed", timeout=timeout,
                    what=lambda: "kerberos_failed: %s" % env.source_status(source))
    return env.source_status(source)["last_error"]


def test_each_kerberos_failure_in_the_librarys_words(env, kdc, sims):
    sim = sims["krb_b"]
    kdc.add_principal("frank")
    stale = keytab_b64(kdc, "frank")
    kdc.rotate_key("frank")                     # the account's key changed: the keytab is stale
    kdc.add_principal("gone")
    gone = keytab_b64(kdc, "gone")
    kdc.kadmin("delprinc -force gone@" + REALM)  # the account deleted in the directory
    add_kerberos_source(env, "k_unknown", sim, "gone", gone)
    add_kerberos_source(env, "k_otherkeys", sim, "nosuch", keytab_b64(kdc, "carl"))
    add_kerberos_source(env, "k_nospn", sim, "carl", keytab_b64(kdc, "carl"),
                        server_spn="MSSQLSvc/nosuch.finalize.test:1433")
    add_kerberos_source(env, "k_stale", sim, "frank", stale)
    names = ("k_unknown", "k_otherkeys", "k_nospn", "k_stale")
    for name in names:
        env.track("t.%s" % name, name, check_source=False)
    error = wait_error(env, "k_unknown")
    assert "not found in Kerberos database" in error and "gone@" + REALM in error and \
        "check its spelling" in error, error
    error = wait_error(env, "k_otherkeys")
    assert "Keytab contains no suitable keys for nosuch@" + REALM in error, error
    error = wait_error(env, "k_nospn")
    assert "Server MSSQLSvc/nosuch.finalize.test:1433@" + REALM + " not found in Kerberos database" in error and \
        "setspn -S" in error, error
    error = wait_error(env, "k_stale")
    assert "export a new keytab" in error, error
    for name in names:
        assert verdict(env, "t.%s" % name) is None
        shown = env.source_status(name)["last_error"]
        assert stale[:40] not in shown and keytab_b64(kdc, "carl")[:40] not in shown
    log = env.pg.log()
    assert stale[:40] not in log and keytab_b64(kdc, "carl")[:40] not in log


def test_a_kdc_clock_ten_minutes_off_is_the_skew_error(env, kdc, sims):
    kdc.stop()
    kdc.start(clock_offset_seconds=600)
    try:
        add_kerberos_source(env, "k_skew", sims["krb_c"], "erin", keytab_b64(kdc, "erin"))
        env.track("t.k_skew", "k_skew", check_source=False)
        error = wait_error(env, "k_skew")
        assert "Clock skew too great" in error and "NTP" in error, error
    finally:
        kdc.stop()
        kdc.start()


def test_keytab_and_tickets_files_live_in_postgresqls_temporary_directory(env, kdc, sims, pg):
    """A Kerberos source's tickets (a credential cache every process serving the source shares) and,
    for a moment, its keytab are files of base/pgsql_tmp: never in a base backup, and PostgreSQL removes
    them when it starts (a keytab file a process left by dying between writing and removing it too)."""
    add_kerberos_source(env, "k_files", sims["krb_c"], "erin", keytab_b64(kdc, "erin"))
    env.track("t.k_files", "k_files")
    oid = env.one("SELECT oid FROM pg_foreign_server WHERE srvname = 'k_files'")
    dbid = env.one("SELECT oid FROM pg_database WHERE datname = current_database()")
    tmp = os.path.join(pg.data, "base", "pgsql_tmp")
    cache = os.path.join(tmp, "pgsql_tmp_finalize_%d_%d.ccache" % (dbid, oid))
    pg.wait_for(lambda: os.path.exists(cache), what="the source's credential cache")
    assert oct(os.stat(cache).st_mode & 0o777) == "0o600"
    assert not [f for f in os.listdir(tmp) if ".keytab" in f]          # the keytab went at once
    left = os.path.join(tmp, "pgsql_tmp_finalize_%d_%d.keytab.4194000" % (dbid, oid))
    with open(left, "wb") as f:
        f.write(b"\x05\x02secret")
    if os.geteuid() == 0:
        shutil.chown(left, "postgres", "postgres")
    pg.restart()
    assert not os.path.exists(left)
    env.pg.wait_for(lambda: condition(env, "k_files") == "ok", what="k_files after the restart")
