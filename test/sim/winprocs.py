"""Control procedures of Windows authentication (winauth.py): the domain's NTLM accounts and the record of
logins (which principal and scheme each session used)."""
import datetime as _dt

from . import sqltypes as T
from .errors import SqlError
from .procs import INT, NV, REQUIRED, SYSNAME, ResultSet, proc

SYS = "sysadmin"


def windows_login_name(s, name):
    """CREATE LOGIN [name] FROM WINDOWS's checks -> the name: DOMAIN\\user (Msg 15407) of the server's domain or
    of a trusted realm's (Msg 15401, as SQL Server when the domain cannot resolve the name)."""
    dom, sep, user = (name or "").partition("\\")
    if not sep or not dom or not user or "\\" in user:
        raise SqlError(15407, "'%s' is not a valid Windows NT name. Give the complete name: <domain\\username>."
                       % name, 16, 1)
    if not s.server.winauth.trusted(dom):
        raise SqlError(15401, "Windows NT user or group '%s' not found. Check the name again." % name, 16, 1)
    return "%s\\%s" % (dom.upper(), user)


@proc("sim.add_windows_account", [("name", SYSNAME, REQUIRED), ("password", NV, REQUIRED)], SYS)
def add_windows_account(s, name, password):
    """An account of the simulator's domain (--windows-domain) with its password, for NTLM: @name =
    N'DOMAIN\\user' or N'user'.  (Kerberos principals live in the KDC.)  Registering it again changes the
    password.  It still needs a login (CREATE LOGIN [DOMAIN\\user] FROM WINDOWS) to log in."""
    full = s.server.winauth.add_account(name, password)
    return [ResultSet([("account", SYSNAME)], [(full,)])]


LOGIN_COLS = [("attempt_time", T.datetime2(3)), ("session_id", INT), ("auth_scheme", T.nvarchar(40)),
              ("login_name", SYSNAME), ("principal", T.nvarchar(256)), ("error", INT)]


@proc("sim.logins", [("top", INT, 100)], SYS)
def logins(s, top):
    """The latest login attempts, newest first: UTC time, session id, auth_scheme (SQL, NTLM, KERBEROS), the
    login name it was admitted as (DOMAIN\\user; NULL when the SSPI exchange failed), the principal that
    authenticated (the SQL login, user@REALM, or DOMAIN\\user as the NTLM client sent it) and the error number
    sent (0 = logged in; 18452, 18456, 4060...)."""
    wa = s.server.winauth
    with wa.lock:
        recent = list(wa.recent)
    rows = []
    for t, spid, scheme, name, principal, error in reversed(recent[-max(0, top or 0):] if top else recent):
        when = _dt.datetime.fromtimestamp(t, _dt.timezone.utc).replace(tzinfo=None)
        rows.append((when.isoformat(sep=" ", timespec="milliseconds"), spid, scheme, name, principal, error))
    return [ResultSet(LOGIN_COLS, rows)]
