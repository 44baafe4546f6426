"""Windows authentication against the simulator as SQL Server does it (winauth.py): real FreeTDS tsql with
Kerberos (a ticket from a real MIT KDC, test/lib/kdc.py) and NTLMv2, a raw client with python3-gssapi for
SPNEGO, mutual authentication and an expired ticket.  One KDC and one simulator for the module."""
import os
import re
import subprocess
import time

import pytest

from simproc import Simulator
from kdc import Kdc
from tdsraw import Raw

gssapi = pytest.importorskip("gssapi")

REALM = "FINALIZE.TEST"
PW = "Corr3ct horse!"
SKEW = 1               # the simulator's Kerberos clock tolerance (--kerberos-max-skew): expiry is seen quickly


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """(kdc, sim, tmp): alice and dave (no login) in the KDC; bob (login) and carol (none) NTLM accounts."""
    tmp = tmp_path_factory.mktemp("winauth")
    kdc = Kdc(str(tmp / "kdc"), realm=REALM)
    saved = os.environ.get("KRB5_CONFIG")
    os.environ["KRB5_CONFIG"] = kdc.krb5_conf          # this process's gssapi (the raw client) and the children
    keytab = str(tmp / "mssql.keytab")
    sim = Simulator(clock="sim", start_time="2026-03-01T00:00:00Z", cleanup_time="",
                    windows_domain="FINALIZE", windows_realms="%s=FINALIZE" % REALM, kerberos_keytab=keytab,
                    kerberos_max_skew=SKEW).start()
    try:
        kdc.keytab(kdc.service_principal("127.0.0.1", sim.port), keytab)
        for p in ("alice", "dave"):
            kdc.add_principal(p)
        kdc.add_principal("brief", maxlife="2 seconds")
        kdc.add_principal("MSSQLSvc/other.finalize.test:1433")        # another server's SPN
        sim.call("sim.add_windows_account", name="FINALIZE\\bob", password=PW)
        sim.call("sim.add_windows_account", name="carol", password=PW)
        sim.execute("CREATE LOGIN [FINALIZE\\alice] FROM WINDOWS WITH DEFAULT_DATABASE = demo;\n"
                    "CREATE USER [FINALIZE\\alice] FOR LOGIN [FINALIZE\\alice];\n"
                    "GRANT SELECT ON SCHEMA::cdc TO [FINALIZE\\alice]")
        sim.call("sim.create_login", login="FINALIZE\\bob", cdc_select=1)
        sim.call("sim.create_login", login="FINALIZE\\brief")
        yield kdc, sim, tmp
    finally:
        sim.stop()
        kdc.close()
        if saved is None:
            os.environ.pop("KRB5_CONFIG", None)
        else:
            os.environ["KRB5_CONFIG"] = saved


def tsql(sim, user=None, password=None, ccache=None, conf=None, sql="SELECT SUSER_SNAME() AS who\ngo\n"):
    """tsql -H 127.0.0.1 (Kerberos without -U: FreeTDS's GSSAPI with the ccache; NTLM with DOMAIN\\user)."""
    argv = ["tsql", "-H", "127.0.0.1", "-p", str(sim.port), "-D", "demo"]
    if user is not None:
        argv += ["-U", user, "-P", password]
    e = dict(os.environ)
    if ccache:
        e["KRB5CCNAME"] = ccache
    if conf:
        e["FREETDSCONF"] = conf
    p = subprocess.run(argv, input=sql, capture_output=True, text=True, timeout=30, env=e)
    return p.stdout + p.stderr


def last_login(sim):
    return sim.call("sim.logins", top=1)[0][0]


def ccache_of(kdc, tmp, principal):
    cc = "FILE:%s/%s.cc" % (tmp, principal)
    r = kdc.kinit(principal, cc)
    assert r.returncode == 0, r.stderr
    return cc


MSG_18452 = "Login failed. The login is from an untrusted domain and cannot be used with Integrated authentication."


def test_tsql_kerberos_login_is_the_windows_login(env):
    kdc, sim, tmp = env
    out = tsql(sim, ccache=ccache_of(kdc, tmp, "alice"),
               sql="SELECT SUSER_SNAME() AS who, SYSTEM_USER AS su, COUNT(*) AS n FROM cdc.lsn_time_mapping\ngo\n")
    assert re.search(r"FINALIZE\\alice\s+FINALIZE\\alice\s+\d+", out), out
    rec = last_login(sim)
    assert (rec["auth_scheme"], rec["login_name"], rec["principal"], rec["error"]) == \
        ("KERBEROS", "FINALIZE\\alice", "alice@FINALIZE.TEST", 0)
    p = sim.query("SELECT name, type, type_desc FROM sys.server_principals WHERE name = N'FINALIZE\\alice'")
    assert p == [{"name": "FINALIZE\\alice", "type": "U", "type_desc": "WINDOWS_LOGIN"}]


def test_tsql_ntlmv2_login_and_auth_scheme(env):
    kdc, sim, tmp = env
    out = tsql(sim, "FINALIZE\\bob", PW, sql="SELECT SUSER_SNAME() AS who, @@SPID AS spid\ngo\n"
               "WAITFOR DELAY '00:00:00'\ngo\n")
    m = re.search(r"FINALIZE\\bob\s+(\d+)", out)
    assert m, out
    rec = last_login(sim)
    assert (rec["auth_scheme"], rec["login_name"], rec["error"]) == ("NTLM", "FINALIZE\\bob", 0)
    assert rec["session_id"] == int(m.group(1))


def test_ntlm_wrong_password_unknown_account_and_v1_are_18452(env, tmp_path):
    kdc, sim, tmp = env
    out = tsql(sim, "FINALIZE\\bob", "wrong")
    assert "Msg 18452" in out and MSG_18452 in out, out
    assert last_login(sim)["principal"] == "FINALIZE\\bob"
    assert MSG_18452 in tsql(sim, "FINALIZE\\nobody", PW)
    assert MSG_18452 in tsql(sim, "OTHERDOM\\bob", PW)
    # FreeTDS's NTLMv1 path (an NTLM2 session response, 24 bytes): refused though the password is right
    conf = tmp_path / "v1.conf"
    conf.write_text("[global]\n\ttds version = 7.4\n\tencryption = off\n\tuse ntlmv2 = no\n")
    out = tsql(sim, "FINALIZE\\bob", PW, conf=str(conf))
    assert MSG_18452 in out, out
    rec = last_login(sim)
    assert (rec["auth_scheme"], rec["principal"], rec["error"]) == ("NTLM", "FINALIZE\\bob", 18452)


def test_authenticated_principal_without_login_is_18456(env):
    kdc, sim, tmp = env
    out = tsql(sim, "FINALIZE\\carol", PW)
    assert "Msg 18456" in out and "Login failed for user 'FINALIZE\\carol'." in out, out
    out = tsql(sim, ccache=ccache_of(kdc, tmp, "dave"))
    assert "Login failed for user 'FINALIZE\\dave'." in out, out
    rec = last_login(sim)
    assert (rec["auth_scheme"], rec["login_name"], rec["principal"], rec["error"]) == \
        ("KERBEROS", "FINALIZE\\dave", "dave@FINALIZE.TEST", 18456)


def test_ticket_for_another_spn_is_refused(env, tmp_path):
    kdc, sim, tmp = env
    conf = tmp_path / "spn.conf"
    conf.write_text("[global]\n\ttds version = 7.4\n\tencryption = off\n\tspn = MSSQLSvc/other.finalize.test:1433\n")
    out = tsql(sim, ccache=ccache_of(kdc, tmp, "alice"), conf=str(conf))
    assert MSG_18452 in out, out
    assert last_login(sim)["error"] == 18452


def test_create_login_from_windows_checks_the_name(env):
    kdc, sim, tmp = env
    with pytest.raises(Exception, match="15407"):
        sim.execute("CREATE LOGIN [alice] FROM WINDOWS")
    with pytest.raises(Exception, match="15401"):
        sim.execute("CREATE LOGIN [ELSEWHERE\\alice] FROM WINDOWS")
    with pytest.raises(Exception, match="15025"):
        sim.execute("CREATE LOGIN [finalize\\ALICE] FROM WINDOWS")


def initiator_token(spn, ccache, spnego=False):
    """A GSSAPI initiator (mutual authentication) for ``spn`` with the ticket of ``ccache`` -> (ctx, token)."""
    creds = gssapi.Credentials(usage="initiate", store={"ccache": ccache})
    mech = gssapi.Mechanism.from_sasl_name("SPNEGO") if spnego else gssapi.MechType.kerberos
    ctx = gssapi.SecurityContext(name=gssapi.Name(spn, gssapi.NameType.kerberos_principal), creds=creds,
                                 usage="initiate", mech=mech,
                                 flags=gssapi.RequirementFlag.mutual_authentication)
    return ctx, ctx.step()


def sspi_token(payload):
    """The SSPI token (0xED) at the start of a login response -> its data, else None."""
    if payload[:1] != b"\xed":
        return None
    n = int.from_bytes(payload[1:3], "little")
    return payload[3:3 + n]


def test_raw_spnego_login_gets_the_ap_rep_for_mutual_authentication(env):
    kdc, sim, tmp = env
    spn = "MSSQLSvc/127.0.0.1:%d" % sim.port
    for spnego in (False, True):
        ctx, token = initiator_token(spn, ccache_of(kdc, tmp, "alice"), spnego=spnego)
        assert not ctx.complete
        raw = Raw(sim.port)
        try:
            _, payload = raw.login(user="", password="", sspi=token)
        finally:
            raw.close()
        assert b"\xad" in payload and sspi_token(payload) is not None, payload[:40]
        ctx.step(sspi_token(payload))       # the AP-REP completes the client's context: the server proved itself
        assert ctx.complete


def test_expired_ticket_is_refused(env):
    """An AP-REQ made while brief's 2-second ticket was valid, presented after it expired (plus the simulator's
    1 s tolerance): refused (with the default 300 s tolerance it would still be accepted)."""
    kdc, sim, tmp = env
    spn = "MSSQLSvc/127.0.0.1:%d" % sim.port
    for attempt in range(3):        # a loaded machine may let the 2 s ticket lapse before the token is made
        try:
            _ctx, token = initiator_token(spn, ccache_of(kdc, tmp, "brief"))
            break
        except gssapi.exceptions.GSSError:
            if attempt == 2:
                raise
    time.sleep(2 + SKEW + 0.5)
    raw = Raw(sim.port)
    _, payload = raw.login(user="", password="", sspi=token)
    raw.close()
    assert MSG_18452.encode("utf-16-le") in payload
    rec = last_login(sim)
    assert (rec["auth_scheme"], rec["error"]) == ("KERBEROS", 18452)


def test_kdc_stale_keytab_and_a_clock_ten_minutes_ahead(tmp_path):
    kdc = Kdc(str(tmp_path / "kdc"))
    try:
        kdc.add_principal("eve")
        old = kdc.keytab("eve", str(tmp_path / "old.keytab"))
        assert kdc.kinit("eve", "FILE:%s/ok.cc" % tmp_path, keytab=old).returncode == 0
        kdc.rotate_key("eve")                   # the AD account's password changed: the old keytab is stale
        r = kdc.kinit("eve", "FILE:%s/stale.cc" % tmp_path, keytab=old)
        assert r.returncode != 0 and "Preauthentication failed" in r.stderr, r.stderr
        kdc.stop()
        kdc.start(clock_offset_seconds=600)
        r = kdc.kinit("eve", "FILE:%s/skew.cc" % tmp_path)
        assert r.returncode != 0 and "Clock skew too great" in r.stderr, r.stderr
    finally:
        kdc.close()
