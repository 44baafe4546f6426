"""The CDC table-valued functions for the translator: ``cdc.fn_cdc_get_all_changes_<ci>(from, to, option)``
and ``cdc.fn_cdc_get_net_changes_<ci>`` as derived tables over the change table (learn.microsoft.com,
"cdc.fn_cdc_get_all_changes_" and "cdc.fn_cdc_get_net_changes_": argument checks are Msg 313, access Msg 229)."""
from .. import permissions as P
from .. import sqltypes as T
from ..catalog import fold, q
from ..errors import SqlError, insufficient_args, invalid_object, permission_denied

ALL_CHANGES = "fn_cdc_get_all_changes_"
NET_CHANGES = "fn_cdc_get_net_changes_"


def _lit(v):
    """A Python value as a sqlite literal (translate.lit_value, imported late: translate imports this module)."""
    from .translate import lit_value
    return lit_value(v)


def tvf(tr, node, scope, scope_cls, source_cls):
    """cdc.fn_cdc_get_all_changes_<ci>(from, to, option) as a derived table."""
    schema, name, written = tr.resolve_parts(node.parts)
    lname = fold(name)
    inst = None
    if fold(schema) == "cdc" and tr.db.cdc_enabled and tr.ctx.database.lower() == tr.db.name.lower():
        for prefix in (ALL_CHANGES, NET_CHANGES):
            if lname.startswith(prefix):
                inst = tr.db.instances.get(lname[len(prefix):])
                if inst is not None and prefix == NET_CHANGES and not inst.supports_net_changes:
                    inst = None
                kind = prefix
                break
    if inst is None:
        raise invalid_object(written)
    fname = kind + inst.name
    if not P.can_access_instance(tr.ctx.login, inst):
        raise permission_denied(fname, tr.db.name, "cdc")
    tr.check_snapshot()
    if len(node.args) != 3:
        raise SqlError(216 if len(node.args) < 3 else 8144,
                       "Parameters were not supplied for the function 'cdc.%s'." % fname
                       if len(node.args) < 3 else
                       "Procedure or function cdc.%s has too many arguments specified." % fname, 16, 1)
    args_sql = [tr.expr(a, scope_cls())[0] for a in node.args]
    lo, hi, opt = tr.ctx.evaluate("SELECT " + ", ".join(args_sql), tr.params)
    opt = (opt or "").strip().lower() if isinstance(opt, str) else None
    max_lsn = tr.ctx.evaluate("SELECT MAX(start_lsn) FROM cdc.lsn_time_mapping", {})[0]
    fn313 = insufficient_args("cdc.%s ... " % kind)     # SQL Server: "... cdc.fn_cdc_get_all_changes_ ... ."
    ok_opts = ("all", "all update old") if kind == ALL_CHANGES else ("all", "all with mask", "all with merge")
    if (opt not in ok_opts or not isinstance(lo, bytes) or not isinstance(hi, bytes) or max_lsn is None
            or inst.start_lsn is None):
        raise fn313
    lo, hi = lo.ljust(10, b"\0")[:10], hi.ljust(10, b"\0")[:10]
    if lo < inst.start_lsn or hi > max_lsn or lo > hi:
        raise fn313
    tr.reads.append(inst)
    ct = inst.ct.phys
    cap = [c.name for c in inst.captured]
    if kind == ALL_CHANGES:
        cols = [("__$start_lsn", T.LSN.null(False)), ("__$seqval", T.LSN.null(False)),
                ("__$operation", T.INT.null(False)), ("__$update_mask", T.varbinary(128))]
        cols += [(c.name, c.type.null(True)) for c in inst.captured]
        where = '"__$start_lsn" >= %s AND "__$start_lsn" <= %s' % (_lit(lo), _lit(hi))
        if opt == "all":
            where += ' AND "__$operation" <> 3'
        sql = ('SELECT "__$start_lsn", "__$seqval", "__$operation", "__$update_mask"%s FROM %s WHERE %s '
               'ORDER BY "__$start_lsn", "__$seqval", "__$operation"'
               % ("".join(", " + q(n) for n in cap), ct, where))
    else:
        sql, cols = net_changes(inst, lo, hi, opt)
    alias = tr.new_alias()
    tr.add_source(scope, source_cls(node.alias or fname, alias, cols))
    return "(%s) AS %s" % (sql, alias)

def net_changes(inst, lo, hi, opt):
    """Net changes per key: the last image of each row changed in [lo, hi]."""
    key = q(inst.index_columns[0])
    cap = [q(c.name) for c in inst.captured]
    rng = '"__$start_lsn" >= %s AND "__$start_lsn" <= %s' % (_lit(lo), _lit(hi))
    ct = inst.ct.phys
    op = ('CASE WHEN f."__$operation" = 2 AND l."__$operation" = 1 THEN NULL '
          'WHEN l."__$operation" = 1 THEN 1 WHEN f."__$operation" = 2 THEN %s ELSE %s END'
          % ("5" if opt == "all with merge" else "2", "5" if opt == "all with merge" else "4"))
    mask = 'l."__$update_mask"' if opt == "all with mask" else "NULL"
    sql = ("SELECT * FROM (SELECT l.\"__$start_lsn\" AS \"__$start_lsn\", %s AS \"__$operation\", "
           "%s AS \"__$update_mask\"%s FROM "
           "(SELECT %s AS k, MIN(\"__$start_lsn\" || \"__$seqval\") AS fk, MAX(\"__$start_lsn\" || \"__$seqval\") "
           "AS lk FROM %s WHERE %s AND \"__$operation\" <> 3 GROUP BY %s) AS g "
           "JOIN %s AS f ON f.%s = g.k AND (f.\"__$start_lsn\" || f.\"__$seqval\") = g.fk "
           "AND f.\"__$operation\" <> 3 "
           "JOIN %s AS l ON l.%s = g.k AND (l.\"__$start_lsn\" || l.\"__$seqval\") = g.lk "
           "AND l.\"__$operation\" <> 3) WHERE \"__$operation\" IS NOT NULL ORDER BY \"__$start_lsn\""
           % (op, mask, "".join(", l.%s AS %s" % (c, c) for c in cap), key, ct, rng, key, ct, key, ct, key))
    cols = [("__$start_lsn", T.LSN.null(False)), ("__$operation", T.INT), ("__$update_mask", T.varbinary(128))]
    cols += [(c.name, c.type.null(True)) for c in inst.captured]
    return sql, cols
