"""Least-privilege model (reference 1.7), as SQL Server documents it: who may read what.

* sysadmin and db_owner may do everything;
* a login needs a user in the database to use it at all (CREATE USER ... FOR LOGIN);
* SELECT comes from grants on an object or on a whole schema ('schema::cdc'), or
  from membership in db_datareader;
* reading cdc.<ci>_CT directly is an ordinary table read: SELECT on that table or
  on SCHEMA::cdc (the gating role does not apply to direct reads);
* the CDC query functions, fn_cdc_get_min_lsn and the metadata procedures need
  SELECT on every captured column of the source table and, when the instance
  has a gating role, membership in it (learn.microsoft.com, "cdc.fn_cdc_get_all_changes_",
  Permissions).  Without access fn_cdc_get_min_lsn returns zeros, the help
  procedure omits the instance and the query functions raise Msg 229;
* metadata visibility: OBJECT_ID & co. see an object only with some permission on it."""
from .catalog import fold


def is_owner(login):
    """sysadmin or db_owner: every permission in the database."""
    return login.sysadmin or login.db_owner


def has_database_user(login):
    """The login maps to a user of the (single) user database."""
    return login.sysadmin or login.user is not None


def can_open_database(login, name, db_name):
    """May the login use database ``name``?  master admits everyone (guest)."""
    if name.lower() == "master":
        return True
    return name.lower() == db_name.lower() and has_database_user(login)


def can_select(login, table):
    """SELECT on a table (direct grant, schema grant, db_datareader, or ownership)."""
    if is_owner(login) or table.kind == "sys":
        return True
    if not has_database_user(login):
        return False
    grants = login.effective_grants()
    return (table.object_id in grants or ("schema::" + fold(table.schema)) in grants
            or fold("db_datareader") in login.roles)


def can_see(login, table):
    """Metadata visibility: any permission on the object (here: SELECT)."""
    return can_select(login, table)


def can_access_instance(login, inst):
    """Documented rule for a capture instance's change data (query functions, min LSN, help)."""
    if is_owner(login):
        return True
    if not can_select(login, inst.source):
        return False
    return inst.role_name is None or fold(inst.role_name) in login.roles


def can_read_change_table(login, inst):
    """Reading cdc.<ci>_CT directly: SELECT on it (object or SCHEMA::cdc), nothing more."""
    return can_select(login, inst.ct)
