"""Stored procedure framework: definitions, argument binding, result sets.

System procedures (sysprocs.py) and control procedures (control.py) register
here; the executor calls them the same way for ``EXEC`` in a batch and for
RPC requests (FreeTDS dbrpcsend, tedious callProcedure)."""
from dataclasses import dataclass, field

from . import sqltypes as T
from .errors import SqlError
from .functions import convert

REQUIRED = object()
REGISTRY = {}


@dataclass
class ResultSet:
    columns: list                  # [(name, SqlType)]
    rows: list


@dataclass
class ProcResult:
    resultsets: list = field(default_factory=list)
    status: int = 0
    messages: list = field(default_factory=list)     # (number, text) informational messages


@dataclass
class ProcDef:
    name: str                      # canonical 'schema.name'
    params: list                   # [(name, SqlType, default or REQUIRED)]
    func: object
    privilege: str = "public"      # public | db_owner | sysadmin
    doc: str = ""


def proc(name, params=(), privilege="public"):
    """Decorator registering ``func(ctx, **args) -> ProcResult | list[ResultSet] | None``."""
    def deco(f):
        REGISTRY[name.lower()] = ProcDef(name, list(params), f, privilege, (f.__doc__ or "").strip())
        return f
    return deco


def lookup(parts, database):
    """[db.]schema.name or a bare name -> ProcDef (None if unknown)."""
    parts = [p for p in parts]
    if len(parts) == 3:
        if parts[0].lower() not in (database.lower(), "master"):
            return None
        parts = parts[1:]
    if len(parts) == 2:
        return REGISTRY.get(("%s.%s" % (parts[0] or "dbo", parts[1])).lower())
    if len(parts) == 1:
        n = parts[0].lower()
        return REGISTRY.get("sys." + n) or REGISTRY.get("dbo." + n)
    return None


def bind(pdef, args):
    """[(name or None, value, SqlType)] -> {param: value} converted to declared types."""
    out = {}
    pos = 0
    names = {p[0].lower(): p for p in pdef.params}
    for name, value, vtype in args:
        if name is None:
            if pos >= len(pdef.params):
                raise SqlError(8144, "Procedure or function %s has too many arguments specified." % pdef.name.split(".")[-1],
                               16, 2)
            p = pdef.params[pos]
            pos += 1
        else:
            p = names.get(name.lower())
            if p is None:
                raise SqlError(8145, "@%s is not a parameter for procedure %s." % (name, pdef.name.split(".")[-1]),
                               16, 1)
        if value is DEFAULT:
            continue
        out[p[0].lower()] = coerce(value, vtype, p[1], pdef.name)
    for pname, ptype, default in pdef.params:
        if pname.lower() not in out:
            if default is REQUIRED:
                raise SqlError(201, "Procedure or function '%s' expects parameter '@%s', which was not supplied."
                               % (pdef.name.split(".")[-1], pname), 16, 4)
            out[pname.lower()] = default
    return out


class _Default:
    def __repr__(self):
        return "DEFAULT"


DEFAULT = _Default()


def coerce(value, vtype, ptype, pname):
    """Convert an argument to the parameter's type like SQL Server's implicit conversion."""
    if value is None:
        return None
    if ptype.is_string:
        if isinstance(value, bytes):
            return value.decode("utf-16-le", "replace")
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)
    if ptype.name == "float":
        return float(value)
    if not pname.lower().startswith("sim."):
        T.check_implicit(vtype, ptype)
    try:
        return convert(value, ptype, vtype, 1 if ptype.is_binary and isinstance(value, str) else None)
    except SqlError:
        raise SqlError(8114, "Error converting data type %s to %s." % (
            vtype.type_name() if vtype else T.value_type_name(value), ptype.type_name()), 16, 1)


SYSNAME, INT, BIT, LSN, NV = T.SYSNAME, T.INT, T.BIT, T.LSN, T.NVARCHAR_MAX
