"""Least-privilege model (reference 1.7): who may read what.

* sysadmin and db_owner may do everything;
* SELECT comes from grants on an object or on a whole schema ('schema::cdc');
* a capture instance is accessible with SELECT on its source table and, when
  it has a gating role, membership in that role.  Without access,
  fn_cdc_get_min_lsn returns zeros, the help procedure omits the instance, and
  the query functions and the change table raise Msg 229."""


def is_owner(login):
    return login.sysadmin or login.db_owner


def can_select(login, table):
    """SELECT on a table (direct grant, schema grant, or ownership)."""
    if is_owner(login) or table.kind == "sys":
        return True
    return table.object_id in login.grants or ("schema::" + table.schema.lower()) in login.grants


def can_access_instance(login, inst):
    """Gating rule for a capture instance's change data."""
    if is_owner(login):
        return True
    if not can_select(login, inst.source):
        return False
    return inst.role_name is None or inst.role_name.lower() in login.roles


def can_read_change_table(login, inst):
    """Reading cdc.<ci>_CT directly: SELECT on it (cdc schema) and access to the instance."""
    return can_select(login, inst.ct) and can_access_instance(login, inst)
