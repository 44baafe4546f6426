"""Objects the simulated database knows: tables, columns, capture instances, logins."""
from dataclasses import dataclass, field

from . import sqltypes as T

# The database collation decides whether object names compare case-sensitively
# ("_CS_" collations).  One simulated database per process, so a module flag.
CASE_SENSITIVE = False


def set_case_sensitive(flag):
    """Switch identifier comparison to the database collation (called once at start)."""
    global CASE_SENSITIVE
    CASE_SENSITIVE = bool(flag)


def fold(name):
    """The lookup key of an identifier under the database collation."""
    return name if CASE_SENSITIVE else name.lower()


def q(name):
    """Quote any name as a sqlite identifier (doubling embedded double quotes)."""
    return '"' + name.replace('"', '""') + '"'


@dataclass
class Column:
    name: str
    type: T.SqlType
    nullable: bool = True
    column_id: int = 0
    computed: bool = False


@dataclass(eq=False)
class Table:
    """A table the SQL engine can read.  ``kind``: user, cdc_meta, change_table, sys."""
    object_id: int
    schema: str
    name: str
    columns: list
    kind: str = "user"
    phys: str = ""                 # sqlite reference, e.g. cdc."dbo_orders_CT"
    key: int = 0                   # index of the key column (user tables)
    instance: object = None        # the capture instance of a change table
    key_list: list = field(default_factory=list)   # current keys (user tables), for generated updates
    key_pos: dict = field(default_factory=dict)
    next_key: int = 1
    create_date: str = ""
    dynamic: bool = False          # a sys view computed per statement (sysviews.dynamic_sql)

    @property
    def display(self):
        return "%s.%s" % (self.schema, self.name)

    def column(self, name):
        """The column called ``name`` under the database collation (or None)."""
        ln = fold(name)
        for c in self.columns:
            if fold(c.name) == ln:
                return c
        return None

    def add_key(self, k):
        self.key_pos[k] = len(self.key_list)
        self.key_list.append(k)

    def remove_key(self, k):
        i = self.key_pos.pop(k)
        last = self.key_list.pop()
        if i < len(self.key_list):
            self.key_list[i] = last
            self.key_pos[last] = i


@dataclass(eq=False)
class Instance:
    """A capture instance: its change table, captured columns and validity start."""
    name: str
    source: Table
    ct: Table
    captured: list                 # Columns of the source captured (copies, in ordinal order)
    role_name: str = None
    index_name: str = None
    index_columns: list = field(default_factory=list)
    supports_net_changes: bool = False
    filegroup: str = None
    create_lsn: int = 0            # LSN of the enable record in the log
    start_lsn: bytes = None        # NULL until capture processes the enable record
    create_date: str = ""
    all_mask: bytes = b""

    @property
    def object_id(self):
        return self.ct.object_id


@dataclass
class Login:
    """A SQL login and (``user``) the database user it maps to: privileges for the permission model.

    ``user`` None means the login has no user in the database (it cannot open it).
    Grants and roles belong to that database user."""
    name: str
    password: str
    sysadmin: bool = False
    db_owner: bool = False
    roles: set = field(default_factory=set)      # database roles (fold()ed names)
    grants: set = field(default_factory=set)     # 'schema::cdc' or object ids with SELECT
    default_db: str = ""
    user: str = None
    role_grants: dict = field(default_factory=dict)   # the database's {role: grants}, shared by every login
    windows: bool = False          # CREATE LOGIN [DOMAIN\\user] FROM WINDOWS (no password; SSPI logins only)

    def effective_grants(self):
        """Grants of the user plus those of its roles (and of public)."""
        out = set(self.grants)
        for r in list(self.roles) + ["public"]:
            out |= self.role_grants.get(r, set())
        return out

    def drop_user(self):
        """DROP USER: the login stays, its database privileges go."""
        self.user = None
        self.db_owner = False
        self.roles.clear()
        self.grants.clear()


def ct_columns(captured):
    """Columns of cdc.<ci>_CT: the __$ metadata columns around the captured columns."""
    cols = [Column("__$start_lsn", T.LSN.null(False), False), Column("__$end_lsn", T.LSN, True),
            Column("__$seqval", T.LSN.null(False), False), Column("__$operation", T.INT.null(False), False),
            Column("__$update_mask", T.varbinary(128), True)]
    cols += [Column(c.name, c.type.null(True), True) for c in captured]
    cols.append(Column("__$command_id", T.INT, True))
    for i, c in enumerate(cols, 1):
        c.column_id = i
    return cols


def _cols(spec):
    out = []
    for i, (n, t) in enumerate(spec, 1):
        out.append(Column(n, t, t.nullable, i))
    return out


LSN_N = T.LSN
META_TABLES = {
    "lsn_time_mapping": _cols([("start_lsn", T.LSN.null(False)), ("tran_begin_time", T.DATETIME),
                               ("tran_end_time", T.DATETIME), ("tran_id", T.varbinary(10)),
                               ("tran_begin_lsn", T.LSN)]),
    "change_tables": _cols([("object_id", T.INT.null(False)), ("version", T.INT),
                            ("source_object_id", T.INT), ("capture_instance", T.SYSNAME.null(False)),
                            ("start_lsn", T.LSN), ("end_lsn", T.LSN), ("supports_net_changes", T.BIT),
                            ("has_drop_pending", T.BIT), ("role_name", T.SYSNAME), ("index_name", T.SYSNAME),
                            ("filegroup_name", T.SYSNAME), ("create_date", T.DATETIME),
                            ("partition_switch", T.BIT.null(False))]),
    "captured_columns": _cols([("object_id", T.INT.null(False)), ("column_name", T.SYSNAME.null(False)),
                               ("column_id", T.INT), ("column_type", T.SYSNAME.null(False)),
                               ("column_ordinal", T.INT.null(False)), ("is_computed", T.BIT)]),
    "index_columns": _cols([("object_id", T.INT.null(False)), ("column_name", T.SYSNAME.null(False)),
                            ("index_ordinal", T.TINYINT.null(False)), ("column_id", T.INT.null(False))]),
    "ddl_history": _cols([("source_object_id", T.INT), ("object_id", T.INT.null(False)),
                          ("required_column_update", T.BIT), ("ddl_command", T.NVARCHAR_MAX),
                          ("ddl_lsn", T.LSN.null(False)), ("ddl_time", T.DATETIME)]),
}

SYS_VIEWS = {
    "databases": _cols([("name", T.SYSNAME.null(False)), ("database_id", T.INT.null(False)),
                        ("is_cdc_enabled", T.BIT.null(False)), ("snapshot_isolation_state", T.TINYINT),
                        ("snapshot_isolation_state_desc", T.nvarchar(60)),
                        ("is_read_committed_snapshot_on", T.BIT)]),
    "schemas": _cols([("name", T.SYSNAME.null(False)), ("schema_id", T.INT.null(False))]),
    "tables": _cols([("name", T.SYSNAME.null(False)), ("object_id", T.INT.null(False)),
                     ("schema_id", T.INT.null(False)), ("is_tracked_by_cdc", T.BIT.null(False))]),
}


def sqlite_decl(t):
    """sqlite column type for a T-SQL type; strings compare like the database collation."""
    decl = t.sqlite_decl()
    return decl.replace(" COLLATE NOCASE", "") if CASE_SENSITIVE else decl


def create_sql(phys, columns, extra=""):
    """CREATE TABLE statement for sqlite with affinities matching the T-SQL types."""
    cols = ", ".join("%s %s" % (q(c.name), sqlite_decl(c.type)) for c in columns)
    return "CREATE TABLE %s (%s%s)" % (phys, cols, extra)


def update_mask(ordinals, ncols):
    """__$update_mask: bit (ordinal-1) set, most significant byte first (as SQL Server)."""
    nbytes = max(1, (ncols + 7) // 8)
    v = 0
    for o in ordinals:
        v |= 1 << (o - 1)
    return v.to_bytes(nbytes, "big")
