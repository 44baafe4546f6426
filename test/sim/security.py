"""T-SQL security statements: CREATE/DROP LOGIN, CREATE/DROP USER, CREATE/DROP ROLE, ALTER ROLE, GRANT, REVOKE.

Mapped onto the simulator's principal model (model.py): a login is a server
principal; CREATE USER ... FOR LOGIN maps it into the current user database; grants
and role memberships belong to that user (each database has its own).  Only SELECT (on an object or a
schema) has an effect; other permissions are accepted and recorded nowhere.
Who may run them and the errors otherwise follow SQL Server:
CREATE LOGIN needs ALTER ANY LOGIN (sysadmin here, else Msg 15247); user, role
and permission statements need db_owner (else 15247 / 15151 / 4613)."""
from . import dmviews
from . import permissions as P
from .catalog import fold
from .errors import SqlError

FIXED_ROLES = ("db_owner", "db_datareader", "public")


def no_permission():
    """Msg 15247, what SQL Server says to CREATE LOGIN/USER/ROLE without the permission."""
    return SqlError(15247, "User does not have permission to perform this action.", 16, 1)


def not_found(verb, kind, name):
    """Msg 15151 "Cannot <verb> the <kind> '<name>', because it does not exist or you do not have permission."."""
    return SqlError(15151, "Cannot %s the %s '%s', because it does not exist or you do not have permission."
                    % (verb, kind, name), 16, 1)


def run(s, st):
    """Execute a Security statement for session ``s``."""
    handler = {"CREATE LOGIN": create_login, "DROP LOGIN": drop_login, "CREATE USER": create_user,
               "DROP USER": drop_user, "CREATE ROLE": create_role, "DROP ROLE": drop_role,
               "ALTER ROLE": alter_role, "GRANT": grant, "REVOKE": revoke}[st.action]
    with s.db.lock:
        handler(s, st.args)


def _in_user_database(s):
    """Users, roles and grants exist in the user database only (master is not modelled)."""
    if s.database.lower() != s.db.name.lower():
        raise SqlError(50000, "The simulator models users, roles and permissions only in database '%s' "
                       "(USE [%s] first)." % (s.db.name, s.db.name), 16, 1)


def _is_dbo(s):
    """The caller may manage users, roles and permissions (db_owner or sysadmin)."""
    return P.is_owner(s.login)


def create_login(s, a):
    """CREATE LOGIN name WITH PASSWORD = '...' [, DEFAULT_DATABASE = db, CHECK_POLICY = ...], or
    CREATE LOGIN [DOMAIN\\user] FROM WINDOWS [WITH DEFAULT_DATABASE = db] (the name checked as winprocs says)."""
    if not s.login.sysadmin:
        raise no_permission()
    opts = a["options"]
    default_db = str(opts.get("DEFAULT_DATABASE") or "master")
    target = s.server.instance.database(default_db)
    if default_db.lower() != "master" and target is None:
        raise SqlError(15010, "The database '%s' does not exist. Supply a valid database name. To see available "
                       "databases, use sys.databases." % default_db, 16, 1)
    default_db = target.name if target is not None else "master"
    if a.get("windows"):
        from .winprocs import windows_login_name
        s.db.create_login(windows_login_name(s, a["name"]), None, user=False, default_db=default_db, windows=True)
        return
    s.db.create_login(a["name"], str(opts["PASSWORD"]), user=False, default_db=default_db)


def drop_login(s, a):
    """DROP LOGIN name (its database user goes too in this model; SQL Server would orphan it)."""
    lg = s.db.login(a["name"])
    if not s.login.sysadmin or lg is None:
        raise not_found("drop", "login", a["name"])
    key = lg.name.lower()
    if any(x.login is not None and x.login.name.lower() == key for x in list(s.server.sessions.values())):
        raise SqlError(15434, "Could not drop login '%s' as the user is currently logged in." % a["name"], 16, 1)
    s.db.drop_login(lg.name)


def create_user(s, a):
    """CREATE USER name [FOR LOGIN login]: maps the login into the database."""
    _in_user_database(s)
    if not _is_dbo(s):
        raise no_permission()
    name, login = a["name"], a["login"]
    if s.db.user(name) is not None or s.db.role_exists(name) or fold(name) in ("dbo", "guest", "cdc"):
        raise SqlError(15023, "User, group, or role '%s' already exists in the current database." % name, 16, 1)
    if login is None:
        raise SqlError(50000, "The simulator does not model users WITHOUT LOGIN.", 16, 1)
    lg = s.db.login(login)
    if lg is None:
        raise SqlError(15007, "'%s' is not a valid login or you do not have permission." % login, 16, 1)
    if lg.user is not None:
        raise SqlError(15063, "The login already has an account under a different user name.", 16, 1)
    lg.user = name


def drop_user(s, a):
    """DROP USER [IF EXISTS] name: the login stays, its grants and memberships go."""
    _in_user_database(s)
    lg = s.db.user(a["name"])
    if not _is_dbo(s) or lg is None or lg.sysadmin:
        if lg is None and a["if_exists"] and _is_dbo(s):
            return
        raise not_found("drop", "user", a["name"])
    lg.drop_user()


def create_role(s, a):
    """CREATE ROLE name."""
    _in_user_database(s)
    if not _is_dbo(s):
        raise no_permission()
    name = a["name"]
    if s.db.role_exists(name) or s.db.user(name) is not None:
        raise SqlError(15023, "User, group, or role '%s' already exists in the current database." % name, 16, 1)
    s.db.roles.add(fold(name))


def drop_role(s, a):
    """DROP ROLE [IF EXISTS] name (it must have no members)."""
    _in_user_database(s)
    name = a["name"]
    key = fold(name)
    if not _is_dbo(s) or key not in s.db.roles:
        if key not in s.db.roles and a["if_exists"] and _is_dbo(s):
            return
        raise not_found("drop", "role", name)
    if any(key in lg.roles for lg in s.db.logins.values()):
        raise SqlError(15144, "The role has members. It must be empty before it can be dropped.", 16, 1)
    s.db.roles.discard(key)
    s.db.role_grants.pop(key, None)


def alter_role(s, a):
    """ALTER ROLE role ADD|DROP MEMBER user (fixed roles db_owner/db_datareader, created and gating roles)."""
    _in_user_database(s)
    role = a["role"]
    if not _is_dbo(s) or not s.db.role_exists(role) or role.lower() == "public":
        raise not_found("alter", "role", role)
    member = s.db.user(a["member"])
    if member is None:
        raise not_found("add" if a["op"] == "ADD" else "drop", "principal", a["member"])
    if role.lower() == "db_owner":
        member.db_owner = a["op"] == "ADD"
        return
    key = fold(role) if role.lower() != "db_datareader" else fold("db_datareader")
    if a["op"] == "ADD":
        member.roles.add(key)
    else:
        member.roles.discard(key)


def _grantee_sets(s, names):
    """GRANT ... TO names -> the grant sets to change (a user's own, or a role's)."""
    out = []
    for n in names:
        lg = s.db.user(n)
        if lg is not None:
            out.append(lg.grants)
        elif s.db.role_exists(n) and n.lower() not in ("db_owner", "db_datareader"):
            out.append(s.db.role_grants.setdefault(fold(n) if n.lower() != "public" else "public", set()))
        else:
            raise not_found("find", "user", n)
    return out


def _securable(s, cls, target):
    """ON [class::]securable -> a grant key ('schema::x' or an object id), or None for database scope."""
    if target is None or cls == "DATABASE":
        return None
    name = ".".join(target)
    if cls == "SCHEMA":
        if len(target) != 1 or fold(target[0]) not in s.db.schemas:
            raise not_found("find", "schema", name)
        return "schema::" + fold(target[0])
    if cls not in (None, "OBJECT"):
        raise SqlError(50000, "The simulator does not model permissions on %s:: securables." % cls, 16, 1)
    parts = list(target)
    if len(parts) == 3:
        if parts[0].lower() != s.database.lower():
            raise not_found("find", "object", target[-1])
        parts = parts[1:]
    if len(parts) == 1:
        parts = ["dbo"] + parts
    t = s.db.table(parts[0], parts[1]) if len(parts) == 2 else None
    if t is None or t.kind == "sys" or (not _is_dbo(s) and not P.can_see(s.login, t)):
        raise not_found("find", "object", target[-1])
    return t.object_id


def _permission_change(s, a):
    """Shared checks of GRANT/REVOKE -> (key or None, grant sets, SELECT named?)."""
    _in_user_database(s)
    key = _securable(s, a["class"], a["target"])
    if not _is_dbo(s):
        raise SqlError(4613, "Grantor does not have GRANT permission.", 16, 1)
    return key, _grantee_sets(s, a["grantees"]), any(p in ("SELECT", "ALL") for p in a["perms"])


def grant(s, a):
    """GRANT SELECT ON object | SCHEMA::name TO principal (other permissions: accepted, no effect)."""
    key, sets, select = _permission_change(s, a)
    if key is not None and select:
        for g in sets:
            g.add(key)
    if key is None and "VIEW DATABASE STATE" in a["perms"]:
        for g in sets:
            g.add(dmviews.VIEW_DATABASE_STATE)


def revoke(s, a):
    """REVOKE SELECT ON object | SCHEMA::name FROM principal."""
    key, sets, select = _permission_change(s, a)
    if key is not None and select:
        for g in sets:
            g.discard(key)
    if key is None and "VIEW DATABASE STATE" in a["perms"]:
        for g in sets:
            g.discard(dmviews.VIEW_DATABASE_STATE)
