"""SQL Server's CDC system procedures (sys.sp_cdc_*) with their documented result sets."""
from . import lsn as L
from . import permissions as P
from . import sqltypes as T
from .catalog import fold
from .errors import SqlError
from .procs import LSN, NV, REQUIRED, SYSNAME, INT, BIT, ProcResult, ResultSet, proc

HELP_COLUMNS = [("source_schema", SYSNAME), ("source_table", SYSNAME), ("capture_instance", SYSNAME),
                ("object_id", INT), ("source_object_id", INT), ("start_lsn", LSN), ("end_lsn", LSN),
                ("supports_net_changes", BIT), ("has_drop_pending", BIT), ("role_name", SYSNAME),
                ("index_name", SYSNAME), ("filegroup_name", SYSNAME), ("create_date", T.DATETIME),
                ("index_column_list", NV), ("captured_column_list", NV)]
CAPTURED_COLUMNS = [("source_schema", SYSNAME), ("source_table", SYSNAME), ("capture_instance", SYSNAME),
                    ("column_name", SYSNAME), ("column_id", INT), ("column_ordinal", INT), ("data_type", SYSNAME),
                    ("character_maximum_length", INT), ("numeric_precision", T.TINYINT),
                    ("numeric_precision_radix", T.SMALLINT), ("numeric_scale", INT),
                    ("datetime_precision", T.SMALLINT)]
DDL_COLUMNS = [("source_schema", SYSNAME), ("source_table", SYSNAME), ("capture_instance", SYSNAME),
               ("required_column_update", BIT), ("ddl_command", NV), ("ddl_lsn", LSN), ("ddl_time", T.DATETIME)]


def bracket(name):
    return "[" + name.replace("]", "]]") + "]"


def _visible(s, inst):
    return P.can_access_instance(s.login, inst)


def _instance_or_22981(s, name):
    s.db.require_cdc()
    inst = s.db.instances.get(fold(name or ""))
    if inst is None or not _visible(s, inst):
        raise SqlError(22981, "Object does not exist or access is denied.", 16, 1)
    return inst


@proc("sys.sp_cdc_help_change_data_capture", [("source_schema", SYSNAME, None), ("source_name", SYSNAME, None)])
def help_change_data_capture(s, source_schema, source_name):
    """Instances the caller may read (all, or those of one source table)."""
    s.db.require_cdc()
    if bool(source_schema) != bool(source_name):
        raise SqlError(22972, "When calling stored procedure [sys].sp_cdc_help_change_data capture, if either "
                       "@source_schema or @source_name is non-null and non-empty, the other parameter must also "
                       "be non-null and non-empty.")
    rows = []
    for inst in sorted(s.db.instances.values(), key=lambda i: (i.source.schema, i.source.name, i.create_lsn)):
        src = inst.source
        if source_schema and (fold(src.schema) != fold(source_schema) or fold(src.name) != fold(source_name)):
            continue
        if not _visible(s, inst):
            continue
        rows.append((src.schema, src.name, inst.name, inst.object_id, src.object_id, inst.start_lsn, None,
                     int(inst.supports_net_changes), 0, inst.role_name, inst.index_name, inst.filegroup,
                     inst.create_date, ", ".join(bracket(c) for c in inst.index_columns),
                     ", ".join(bracket(c.name) for c in inst.captured)))
    return [ResultSet(HELP_COLUMNS, rows)]


def _type_facts(t):
    """(character_maximum_length, numeric_precision, radix, scale, datetime_precision) like INFORMATION_SCHEMA."""
    n = t.name
    if t.is_string or t.is_binary:
        return (-1 if t.length == T.MAX else t.length), None, None, None, None
    ints = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 19, "bit": 1}
    if n in ints:
        return None, ints[n], 10, 0, None
    if n in ("decimal", "numeric"):
        return None, t.precision, 10, t.scale, None
    if n == "float":
        return None, 53, 2, None, None
    if n == "datetime":
        return None, None, None, None, 3
    if n in ("date", "smalldatetime"):
        return None, None, None, None, 0
    if t.is_temporal:
        return None, None, None, None, t.scale
    return None, None, None, None, None


@proc("sys.sp_cdc_get_captured_columns", [("capture_instance", SYSNAME, REQUIRED)])
def get_captured_columns(s, capture_instance):
    """Captured columns of an instance (Msg 22981 without access)."""
    inst = _instance_or_22981(s, capture_instance)
    rows = []
    for ordinal, c in enumerate(inst.captured, 1):
        rows.append((inst.source.schema, inst.source.name, inst.name, c.name, c.column_id, ordinal,
                     c.type.name if not c.type.alias else c.type.alias) + _type_facts(c.type))
    return [ResultSet(CAPTURED_COLUMNS, rows)]


@proc("sys.sp_cdc_get_ddl_history", [("capture_instance", SYSNAME, REQUIRED)])
def get_ddl_history(s, capture_instance):
    """DDL recorded for an instance's source table since the instance was created."""
    inst = _instance_or_22981(s, capture_instance)
    cur = s.db.conn.execute("SELECT required_column_update, ddl_command, ddl_lsn, ddl_time FROM cdc.ddl_history "
                            "WHERE object_id = ? ORDER BY ddl_lsn", (inst.object_id,))
    rows = [(inst.source.schema, inst.source.name, inst.name) + tuple(r) for r in cur]
    return [ResultSet(DDL_COLUMNS, rows)]


@proc("sys.sp_cdc_enable_db", [], privilege="sysadmin")
def enable_db(s):
    """Enable CDC on the current database."""
    s.db.enable_db()


@proc("sys.sp_cdc_disable_db", [], privilege="sysadmin")
def disable_db(s):
    """Disable CDC: every instance, change table and the mapping table go away."""
    s.db.disable_db()


@proc("sys.sp_cdc_enable_table", [("source_schema", SYSNAME, REQUIRED), ("source_name", SYSNAME, REQUIRED),
                                  ("role_name", SYSNAME, REQUIRED), ("capture_instance", SYSNAME, None),
                                  ("supports_net_changes", BIT, None), ("index_name", SYSNAME, None),
                                  ("captured_column_list", NV, None), ("filegroup_name", SYSNAME, None),
                                  ("allow_partition_switch", BIT, 1)], privilege="db_owner")
def enable_table(s, source_schema, source_name, role_name, capture_instance, supports_net_changes, index_name,
                 captured_column_list, filegroup_name, allow_partition_switch):
    """Create a capture instance (at most two per source table)."""
    s.db.enable_table(source_schema, source_name, role_name, capture_instance, bool(supports_net_changes),
                      index_name, captured_column_list, filegroup_name)


@proc("sys.sp_cdc_disable_table", [("source_schema", SYSNAME, REQUIRED), ("source_name", SYSNAME, REQUIRED),
                                   ("capture_instance", SYSNAME, REQUIRED)], privilege="db_owner")
def disable_table(s, source_schema, source_name, capture_instance):
    """Drop a capture instance ('all' drops every instance of the table)."""
    s.db.disable_table(source_schema, source_name, capture_instance)


def _job_type(job_type):
    jt = (job_type or "capture").lower()
    if jt not in ("capture", "cleanup"):
        raise SqlError(22992, "The specified @job_type, %s, is not supported. The value specified for the parameter "
                       "@job_type must be N'capture' to indicate a capture job, or N'cleanup' to indicate a cleanup "
                       "job." % job_type)
    return jt


@proc("sys.sp_cdc_start_job", [("job_type", SYSNAME, "capture")], privilege="db_owner")
def start_job(s, job_type):
    """Start the capture job (cleanup runs on its schedule)."""
    if _job_type(job_type) == "capture":
        s.db.capture_running = True
        s.server.scheduler.reset_capture(s.db)


@proc("sys.sp_cdc_stop_job", [("job_type", SYSNAME, "capture")], privilege="db_owner")
def stop_job(s, job_type):
    """Stop the capture job: commits continue, max LSN freezes."""
    if _job_type(job_type) == "capture":
        s.db.capture_running = False


@proc("sys.sp_cdc_change_job", [("job_type", SYSNAME, "capture"), ("maxtrans", INT, None), ("maxscans", INT, None),
                                ("continuous", BIT, None), ("pollinginterval", T.BIGINT, None),
                                ("retention", T.BIGINT, None), ("threshold", T.BIGINT, None)],
      privilege="db_owner")
def change_job(s, job_type, maxtrans, maxscans, continuous, pollinginterval, retention, threshold):
    """Change job settings (applied at once; SQL Server needs a job restart)."""
    cfg = s.db.cfg
    if _job_type(job_type) == "capture":
        if retention is not None:
            raise SqlError(22995, "A value for the parameter @retention cannot be specified when the job type is "
                           "'capture'. Specify NULL for the parameter, or omit the parameter from the statement.")
        if maxtrans is not None:
            if maxtrans <= 0:
                raise SqlError(22991, "The value specified for the parameter @maxtrans must be greater than 0.")
            cfg.maxtrans = maxtrans
        if maxscans is not None:
            if maxscans <= 0:
                raise SqlError(22970, "The value for parameter @maxscans specified for the Change Data Capture job "
                               "must be greater than 0.")
            cfg.maxscans = maxscans
        if pollinginterval is not None:
            if not 0 <= pollinginterval <= 86399:
                raise SqlError(22990, "The value specified for the parameter @pollinginterval must be greater than "
                               "or equal to 0 and less than 24 hours(Max: 86399 seconds).")
            cfg.pollinginterval = pollinginterval
    else:
        if any(v is not None for v in (maxtrans, maxscans, continuous, pollinginterval)):
            raise SqlError(22996, "When adding or modifying the CDC cleanup job, @pollinginterval, @maxtrans, "
                           "@maxscans, and @continuous may not be assigned non-null values.")
        if retention is not None:
            if not 0 < retention <= 52594800:
                raise SqlError(22994, "The retention value specified for the Change Data Capture cleanup process "
                               "must be greater than 0 and less than or equal to 52594800.")
            cfg.retention = retention
        if threshold is not None:
            cfg.threshold = threshold


@proc("sys.sp_cdc_help_jobs", [], privilege="db_owner")
def help_jobs(s):
    """Job settings (msdb.dbo.cdc_jobs shape); "Requires membership in the db_owner fixed database role"
    (learn.microsoft.com sys.sp_cdc_help_jobs), else Msg 22904."""
    cfg = s.db.cfg
    cols = [("job_id", T.nvarchar(36)), ("job_type", T.nvarchar(20)), ("job_name", SYSNAME), ("maxtrans", INT),
            ("maxscans", INT), ("continuous", BIT), ("pollinginterval", T.BIGINT), ("retention", T.BIGINT),
            ("threshold", T.BIGINT)]
    name = s.db.name
    return [ResultSet(cols, [
        ("00000000-0000-0000-0000-000000000001", "capture", "cdc.%s_capture" % name, cfg.maxtrans, cfg.maxscans, 1,
         int(cfg.pollinginterval), 0, 0),
        ("00000000-0000-0000-0000-000000000002", "cleanup", "cdc.%s_cleanup" % name, 0, 0, 0, 0, cfg.retention,
         cfg.threshold)])]


@proc("sys.sp_cdc_cleanup_change_table", [("capture_instance", SYSNAME, REQUIRED),
                                          ("low_water_mark", LSN, REQUIRED), ("threshold", T.BIGINT, None)],
      privilege="db_owner")
def cleanup_change_table(s, capture_instance, low_water_mark, threshold):
    """Raise one instance's low end point to an LSN of the mapping table and delete below it."""
    inst = _instance_or_22981(s, capture_instance)
    db = s.db
    exists = db.conn.execute("SELECT 1 FROM cdc.lsn_time_mapping WHERE start_lsn = ?", (low_water_mark,)).fetchone()
    if not exists:
        raise SqlError(22964, "LSN %s, specified as the new low end point for change table cleanup must represent "
                       "the start_lsn value of a current entry in the cdc.lsn_time_mapping table. Choose an LSN value "
                       "that satisfies this requirement." % L.hexlit(low_water_mark))
    if inst.start_lsn is None or low_water_mark > inst.start_lsn:
        db.conn.execute("UPDATE cdc.change_tables SET start_lsn = ? WHERE object_id = ?",
                        (low_water_mark, inst.object_id))
        inst.start_lsn = low_water_mark
    n = db.conn.execute('DELETE FROM %s WHERE "__$start_lsn" < ?' % inst.ct.phys, (low_water_mark,)).rowcount
    return ProcResult(messages=[(0, "%d change rows deleted." % n)])

