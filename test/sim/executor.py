"""Runs requests of one session: SQL batches, RPCs, stored procedures; streams typed results.

Response shape follows SQL Server: per statement a DONE (DONEINPROC inside a
procedure or sp_executesql) with MORE on every token but the last; errors are
an ERROR token followed by a DONE with the error bit; procedure calls end with
RETURNSTATUS + DONEPROC."""
import contextlib
import itertools
import logging
import sqlite3
import time

from . import permissions as P
from . import procs as PR
from . import security
from . import sqltypes as T
from . import tokens as K
from . import timeutil
from .errors import SqlError
from .functions import UdfFailure, convert
from .catalog import Column, Table, create_sql
from .tsql import ast as A
from .tsql.parser import parse_batch, parse_type_text
from .tsql.translate import Translator

log = logging.getLogger("mssql-sim")
CMD_INSERT = 0xC3
# sp_prepare & co. (MS-TDS 2.2.6.6 ProcIDs 11-15; learn.microsoft.com "sp_prepare", "sp_prepexec", "sp_execute",
# "sp_unprepare"): the leading parameters of each, the statement's own parameters follow.
PREPARED_PROCS = {"sp_prepare": ("handle", "params", "stmt", "options"), "sp_prepexec": ("handle", "params", "stmt"),
                  "sp_execute": ("handle",), "sp_unprepare": ("handle",)}

FETCH = 20000          # rows fetched from sqlite at a time
WRITE_ROWS = 1000      # rows encoded per write (token boundaries for attention)
_SET_OPTIONS = {"ANSI_NULLS", "ANSI_NULL_DFLT_ON", "ANSI_NULL_DFLT_OFF", "ANSI_PADDING", "ANSI_WARNINGS",
                "ARITHABORT", "ARITHIGNORE", "CONCAT_NULL_YIELDS_NULL", "DATEFIRST", "DATEFORMAT",
                "IMPLICIT_TRANSACTIONS", "LANGUAGE", "NUMERIC_ROUNDABORT", "QUOTED_IDENTIFIER", "TEXTSIZE",
                "TRANSACTION", "XACT_ABORT", "NOCOUNT", "LOCK_TIMEOUT", "DEADLOCK_PRIORITY", "ANSI_DEFAULTS",
                "CURSOR_CLOSE_ON_COMMIT", "ROWCOUNT", "NOEXEC", "FMTONLY", "STATISTICS", "SHOWPLAN_ALL",
                "CONTEXT_INFO", "QUERY_GOVERNOR_COST_LIMIT"}


# How far an error reaches (Erland Sommarskog, "Error and Transaction Handling in SQL Server", part 2;
# learn.microsoft.com "Deferred name resolution"): most errors end only their statement; compile errors
# found when a statement is compiled at run time (deferred name resolution: 207, 208, ...) abort the
# current scope (batch, procedure, sp_executesql/EXEC() body) and the caller goes on; conversion errors
# and 601 abort the whole batch, every scope.
SCOPE_ABORT = {207, 208, 209, 4104, 4121, 137, 8155, 8156, 8158, 8159, 239, 1033, 205, 116, 141, 1087}
BATCH_ABORT = {241, 242, 245, 8114, 601, 102, 105}


def abort_level(err):
    """'statement', 'scope' or 'batch': what an error ends besides its statement."""
    if err.batch_abort or err.number in BATCH_ABORT:
        return "batch"
    if err.number in SCOPE_ABORT:
        return "scope"
    return "statement"


class ScopeAbort(Exception):
    """Unwinds the statements of one scope (nested IF / BEGIN...END blocks) after a scope-aborting error."""


def reads_table(node):
    """Whether a statement reads a table (a FROM item anywhere): such a SELECT starts an implicit
    transaction, ``SELECT 1`` or ``SELECT @@TRANCOUNT`` does not (SET IMPLICIT_TRANSACTIONS)."""
    if isinstance(node, A.TableRef):
        return True
    if isinstance(node, (list, tuple)):
        return any(reads_table(x) for x in node)
    if isinstance(node, A.Node):
        return any(reads_table(getattr(node, f, None)) for f in node.__slots__ if f != "text")
    return False


def system_proc(parts):
    """'sp_executesql', 'sp_prepare', ... for [master.][sys.]name of those system procedures, else None."""
    parts = [p.lower() for p in parts if p is not None]
    if not parts:
        return None
    base = parts[-1]
    if base != "sp_executesql" and base not in PREPARED_PROCS:
        return None
    if len(parts) >= 2 and parts[-2] not in ("sys", ""):
        return None
    return base


class BatchAbort(Exception):
    """Unwinds every scope of a request after a batch-aborting error was reported."""

    def __init__(self, nested):
        super().__init__("batch aborted")
        self.nested = nested


class Response:
    """Token writer for one response message; holds back the last DONE to set MORE correctly."""

    def __init__(self, channel):
        self.ch = channel
        self.pending = None
        self.any = False
        self.error = False

    def _flush(self, more):
        if self.pending is not None:
            tok, status, cmd, count = self.pending
            status = (status | K.MORE) if more else (status & ~K.MORE)
            self.ch.write(K.done(status, cmd, count, tok, self.ch.tds))
            self.pending = None

    def token(self, data):
        self._flush(True)
        self.ch.write(data)
        self.any = True

    def done(self, tok=K.DONE, status=0, cmd=K.CMD_NONE, count=0):
        self._flush(True)
        self.pending = (tok, status, cmd, count)
        self.any = True

    def error_msg(self, err, server="MSSQLSIM"):
        for first in getattr(err, "preceding", ()):
            self.error_msg(first, server)
        log.debug("session %s: Msg %d, Level %d, State %d: %s", getattr(self.ch, "spid", "?"), err.number,
                  err.cls, err.state, err.message)
        self.token(K.message(err.number, err.message, err.cls, err.state, server, err.proc, err.line, self.ch.tds))
        if err.cls > 10:
            self.error = True

    def finish(self):
        if self.pending is None and not self.any:
            self.pending = (K.DONE, 0, K.CMD_NONE, 0)
        self._flush(False)
        self.ch.end_message()


class Executor:
    """Executes requests for ``session`` (which provides db, login, channel, sqlite connection)."""

    def __init__(self, session):
        self.s = session

    @property
    def db(self):
        """The session's current database (USE changes it)."""
        return self.s.db

    # --- requests --------------------------------------------------------------------

    def sql_batch(self, text):
        """A SQL batch request (packet type 0x01)."""
        resp = Response(self.s.channel)
        self.s.variables = {}
        self.s.table_vars = {}
        try:
            self.run_batch(text, resp, in_proc=False)
        except BatchAbort as e:
            if e.nested:
                resp.done(K.DONE, K.ERROR, K.CMD_NONE, 0)
        finally:
            self.end_request()
        resp.finish()

    def rpc(self, call):
        """An RPC request: sp_executesql (ProcID 10 or by name), sp_prepare/sp_prepexec/sp_execute/sp_unprepare
        (ProcIDs 11-13, 15 or by name) or a named procedure."""
        resp = Response(self.s.channel)
        self.s.variables = {}
        self.s.table_vars = {}
        name = call.name
        args = [(p.name or None, p.value, p.type, p.output) for p in call.params]
        try:
            self.check_faults(name)
            from .tsql.lexer import tokenize
            parts = [t.value for t in tokenize(name) if t.kind in ("word", "qid")]
            base = system_proc(parts)
            if call.proc_id == 10 or base == "sp_executesql":
                self.executesql(args, resp, rpc=True)
            elif base in PREPARED_PROCS:
                self.prepared_proc(base, args, resp, rpc=True)
            else:
                self.call_proc(parts, [a[:3] for a in args], resp, display=name)
        except SqlError as e:
            resp.error_msg(e)
            resp.done(K.DONEPROC, K.ERROR, K.CMD_NONE, 0)
        except BatchAbort:
            resp.done(K.DONEPROC, K.ERROR, K.CMD_NONE, 0)
        finally:
            self.end_request()
        resp.finish()

    def end_request(self):
        """Drop the temp tables of the request's table variables (they live as long as their batch)."""
        s = self.s
        s.table_vars = {}
        if s.tv_tables and s.conn is not None:
            with self.writable():
                for phys in s.tv_tables:
                    s.conn.execute("DROP TABLE IF EXISTS %s" % phys)
        s.tv_tables = []

    @contextlib.contextmanager
    def writable(self):
        """Let the session's read-only sqlite connection write its temp schema (table variables)."""
        self.s.conn.execute("PRAGMA query_only=0")
        try:
            yield
        finally:
            self.s.conn.execute("PRAGMA query_only=1")

    # --- batches -----------------------------------------------------------------------

    def run_batch(self, text, resp, in_proc):
        """Parse a whole batch (syntax errors fail it before anything runs), then run statements.

        Returns False if an error occurred; stops early after a scope-aborting error and raises
        BatchAbort after a batch-aborting one (see abort_level)."""
        try:
            stmts = parse_batch(text)
        except SqlError as e:
            resp.error_msg(e)
            resp.done(K.DONEINPROC if in_proc else K.DONE, K.ERROR, K.CMD_NONE, 0)
            return False
        try:
            return self.run_list(stmts, resp, in_proc)
        except ScopeAbort:
            return False

    def run_list(self, stmts, resp, in_proc):
        """Run statements of one scope (a batch, a procedure body, the branch of an IF, a BEGIN...END);
        False if an error occurred.  Raises ScopeAbort / BatchAbort as abort_level says."""
        ok = True
        for st in stmts:
            try:
                if self.statement(st, resp, in_proc) is False:
                    ok = False
            except SqlError as e:
                ok = False
                resp.error_msg(e)
                resp.done(K.DONEINPROC if in_proc else K.DONE, K.ERROR, K.CMD_NONE, 0)
                level = abort_level(e)
                if level == "batch":
                    raise BatchAbort(in_proc)
                if level == "scope":
                    raise ScopeAbort()
        return ok

    def check_faults(self, text):
        """Apply armed faults to a statement (control procedures are exempt)."""
        if text.lower().lstrip("[").startswith(("exec sim.", "execute sim.", "sim.", "exec [sim]", "sim]")):
            return
        faults = self.s.server.faults
        database = self.s.database
        f = faults.take("stall", text, database=database)
        if f:
            try:
                self.sleep(f.seconds, f.released)
            finally:
                faults.done(f)
        f = faults.take("error", text, database=database)
        if f:
            raise SqlError(f.number, f.message or "Injected error", f.cls, f.state)
        f = faults.take("drop", text, database=database)
        if f:
            self.s.drop_after_rows = f.after_rows

    def sleep(self, seconds, released=None):
        """Wait (WAITFOR, stall fault) while still honouring an ATTENTION from the client; a stall also ends
        when sim.fault_clear releases it (``released``)."""
        end = time.monotonic() + seconds
        while True:
            self.s.channel.poll()
            left = end - time.monotonic()
            if left <= 0 or (released is not None and released.is_set()):
                return
            time.sleep(min(0.02, left))

    def statement(self, st, resp, in_proc):
        done_tok = K.DONEINPROC if in_proc else K.DONE
        text = st.text or ""
        if isinstance(st, A.Declare):
            # Declarations are compile-time on SQL Server: the variables exist
            # (NULL) for the rest of the batch even when an initializer fails.
            for name, type_text, _ in st.decls:
                self.s.variables[name] = (None, self.parse_type(type_text))
        if not isinstance(st, A.ExecStmt) or not (st.parts and st.parts[0].lower() == "sim"):
            self.check_faults(text)
        if isinstance(st, A.SelectStmt):
            if reads_table(st.select):
                self.implicit_begin(resp)
            return self.select(st.select, resp, done_tok)
        if isinstance(st, A.ExecStmt):
            return self.exec_stmt(st, resp)
        if isinstance(st, A.If):
            value, _ = self.scalar(st.cond)
            branch = st.then if value not in (None, 0, False) else st.else_
            return self.run_list([branch], resp, in_proc) if branch is not None else None
        if isinstance(st, A.Block):
            return self.run_list(st.stmts, resp, in_proc)
        if isinstance(st, A.DeclareTable):
            self.declare_table(st)
            resp.done(done_tok, 0, K.CMD_NONE, 0)
            return
        if isinstance(st, A.InsertVar):
            self.implicit_begin(resp)
            n = self.insert_var(st, resp)
            resp.done(done_tok, K.COUNT, CMD_INSERT, n)
            return
        if isinstance(st, A.AlterDb):
            self.alter_database(st)
            resp.done(done_tok, 0, K.CMD_NONE, 0)
            return
        if isinstance(st, A.Declare):
            for name, type_text, init in st.decls:
                t = self.parse_type(type_text)
                value = None
                if init is not None:
                    value, vt = self.scalar(init)
                    value = self.assign_convert(value, vt, t)
                self.s.variables[name] = (value, t)
            resp.done(done_tok, 0, K.CMD_NONE, 0)
            return
        if isinstance(st, A.SetVar):
            if st.name not in self.s.variables:
                raise SqlError(137, 'Must declare the scalar variable "@%s".' % st.name, 15, 2)
            t = self.s.variables[st.name][1]
            value, vt = self.scalar(st.expr)
            self.s.variables[st.name] = (self.assign_convert(value, vt, t), t)
            resp.done(done_tok, 0, K.CMD_NONE, 0)
            return
        if isinstance(st, A.SetOption):
            opt = st.words[0].upper()
            if opt not in _SET_OPTIONS:
                raise SqlError(195, "'%s' is not a recognized SET option." % st.words[0], 15, 1)
            if opt == "TEXTSIZE":
                self.s.set_textsize(st.words[1:])
            elif opt == "LOCK_TIMEOUT":
                self.s.set_lock_timeout(st.words[1:])
            elif opt == "TRANSACTION":
                self.s.set_isolation(st.words[1:])
            elif opt in ("IMPLICIT_TRANSACTIONS", "ANSI_DEFAULTS"):
                # SET ANSI_DEFAULTS ON includes IMPLICIT_TRANSACTIONS ON (learn.microsoft.com SET ANSI_DEFAULTS)
                self.s.implicit_transactions = self.s.set_on_off(st.words[1:])
            resp.done(done_tok, 0, K.CMD_NONE, 0)
            return
        if isinstance(st, A.Use):
            self.use(st.database, resp)
            resp.done(done_tok, 0, K.CMD_NONE, 0)
            return
        if isinstance(st, A.Print):
            value, _ = self.scalar(st.expr)
            resp.token(K.message(0, "" if value is None else str(value), 0, 1, tds=resp.ch.tds))
            resp.done(done_tok, 0, K.CMD_NONE, 0)
            return
        if isinstance(st, A.WaitFor):
            value, _ = self.scalar(st.delay)
            try:
                days, ns, _ = timeutil.parse("1900-01-01 " + str(value).strip())
            except ValueError:
                raise SqlError(148, "Incorrect time syntax in time string '%s' used with WAITFOR." % value, 15, 1)
            self.sleep(ns / 1e7)
            resp.done(done_tok, 0, K.CMD_NONE, 0)
            return
        if isinstance(st, A.Tran):
            self.transaction(st.action, resp, st.name)
            resp.done(done_tok, 0, K.CMD_NONE, 0)
            return
        if isinstance(st, A.Security):
            self.implicit_begin(resp)
            security.run(self.s, st)
            resp.done(done_tok, 0, K.CMD_NONE, 0)
            return
        if isinstance(st, A.Unsupported):
            raise SqlError(50000, "The simulator does not run %s statements (only SELECT, EXEC, DECLARE, SET, USE, "
                           "PRINT, WAITFOR); change data with EXEC sim.commit." % st.keyword, 16, 1)
        raise SqlError(102, "Incorrect syntax near '%s'." % text[:20], 15, 1)

    def implicit_begin(self, resp):
        """SET IMPLICIT_TRANSACTIONS ON: a statement that needs a transaction starts one when @@TRANCOUNT
        is 0 (learn.microsoft.com SET IMPLICIT_TRANSACTIONS), with the ENVCHANGE a BEGIN TRANSACTION sends."""
        s = self.s
        if s.implicit_transactions and s.trancount == 0:
            s.trancount = 1
            s.tran_id = (s.tran_id or 0) + 1
            s.tran_name, s.savepoints = None, []
            resp.token(K.env_transaction(8, s.tran_id.to_bytes(8, "little")))

    def transaction(self, action, resp, name=None):
        """BEGIN/COMMIT/ROLLBACK/SAVE TRANSACTION: nothing to make atomic (SQL is read-only here), but the
        ENVCHANGE tokens, @@TRANCOUNT and savepoints behave like SQL Server's (learn.microsoft.com BEGIN/COMMIT/
        ROLLBACK/SAVE TRANSACTION): BEGIN under IMPLICIT_TRANSACTIONS at @@TRANCOUNT 0 opens two nested
        transactions; ROLLBACK TRAN savepoint keeps the transaction open (no ENVCHANGE); SAVE TRAN needs an
        open transaction (Msg 628); ROLLBACK TRAN of an unknown name is Msg 6401."""
        s = self.s
        if name is not None and name.startswith("@"):
            value, _ = s.variable(name[1:])
            name = None if value is None else str(value)
        if action == "BEGIN":
            self.implicit_begin(resp)
            s.trancount += 1
            if s.trancount == 1:
                s.tran_id = (s.tran_id or 0) + 1
                s.tran_name, s.savepoints = name, []
                resp.token(K.env_transaction(8, s.tran_id.to_bytes(8, "little")))
            return
        if action == "SAVE":
            if s.trancount == 0:
                raise SqlError(628, "Cannot issue SAVE TRANSACTION when there is no active transaction.", 16, 0)
            s.savepoints.append(name)
            return
        if s.trancount == 0:
            raise SqlError(3902 if action == "COMMIT" else 3903,
                           "The %s TRANSACTION request has no corresponding BEGIN TRANSACTION." % action, 16, 1)
        if action == "ROLLBACK" and name is not None:
            folded = [sp.lower() for sp in s.savepoints]
            if name.lower() in folded:
                k = len(folded) - 1 - folded[::-1].index(name.lower())
                del s.savepoints[k + 1:]
                return
            if s.tran_name is None or s.tran_name.lower() != name.lower():
                raise SqlError(6401, "Cannot roll back %s. No transaction or savepoint of that name was found."
                               % name, 16, 1)
        s.trancount = s.trancount - 1 if action == "COMMIT" else 0
        if s.trancount == 0:
            s.savepoints, s.tran_name = [], None
            resp.token(K.env_transaction(9 if action == "COMMIT" else 10, s.tran_id.to_bytes(8, "little")))

    def alter_database(self, st):
        """ALTER DATABASE ... SET ALLOW_SNAPSHOT_ISOLATION ON|OFF (sysadmin or db_owner; Msg 5011 otherwise or for
        an unknown database)."""
        name = self.s.database if st.database.upper() == "CURRENT" else st.database
        target = self.s.server.instance.database(name)
        login = target.login(self.s.login.name) if target is not None else None
        if target is None or not (login.sysadmin or login.db_owner):
            raise SqlError(5011, "User does not have permission to alter database '%s', the database does not "
                           "exist, or the database is not in a state that allows access checks." % name, 14, 9)
        with target.lock:
            target.allow_snapshot_isolation = st.value == "ON"

    # --- table variables ------------------------------------------------------------------

    def declare_table(self, st):
        """DECLARE @t TABLE (...): a sqlite temp table, visible to this scope of the batch."""
        s = self.s
        cols = []
        for i, (name, type_text, nullable) in enumerate(st.columns, 1):
            cols.append(Column(name, self.parse_type(type_text).null(nullable), nullable, i))
        s.tv_counter += 1
        phys = 'temp."tv_%d"' % s.tv_counter
        with self.writable():
            s.conn.execute(create_sql(phys, cols))
        s.tv_tables.append(phys)
        s.table_vars[st.name] = Table(-s.tv_counter, "", "@" + st.name, cols, kind="tablevar", phys=phys)

    def table_var(self, name):
        tv = self.s.table_vars.get(name)
        if tv is None:
            raise SqlError(1087, 'Must declare the table variable "@%s".' % name, 15, 2)
        return tv

    def insert_var(self, st, resp):
        """INSERT [INTO] @t [(cols)] EXEC proc ... | SELECT ... | VALUES ...: the rows, converted to the columns'
        types; Msg 213 when a row does not have one value per column.  Returns the row count."""
        tv = self.table_var(st.name)
        if st.columns is None:
            cols = tv.columns
        else:
            cols = []
            for c in st.columns:
                col = tv.column(c)
                if col is None:
                    raise SqlError(207, "Invalid column name '%s'." % c, 16, 1)
                cols.append(col)
        sets = []
        if isinstance(st.source, A.ExecStmt):
            sets = self.exec_rows(st.source, resp)
        elif isinstance(st.source, list):
            rows, types = [], None
            for row in st.source:
                vals = [self.scalar(e) for e in row]
                rows.append([v for v, _ in vals])
                types = [t for _, t in vals]
            sets = [(types or [], rows)]
        else:
            tr = Translator(self.s)
            with self.db.lock:
                c = tr.compile_select(st.source)
            sets = [([t for _, t in c.columns], self.query(c.sql, c.params).fetchall())]
        out = []
        for types, rows in sets:
            for row in rows:
                if len(row) != len(cols):
                    raise SqlError(213, "Column name or number of supplied values does not match table "
                                   "definition.", 16, 1)
                out.append(tuple(self.storage_value(self.assign_convert(v, t, col.type))
                                 for v, t, col in zip(row, types, cols)))
        if out:
            sql = "INSERT INTO %s (%s) VALUES (%s)" % (tv.phys, ", ".join('"%s"' % c.name.replace('"', '""')
                                                                          for c in cols), ", ".join("?" * len(cols)))
            with self.writable():
                self.s.conn.executemany(sql, out)
        return len(out)

    @staticmethod
    def storage_value(v):
        """A converted value as sqlite stores the simulator's columns."""
        if isinstance(v, bool):
            return int(v)
        if hasattr(v, "as_tuple"):          # Decimal
            return float(v)
        return v

    def exec_rows(self, st, resp):
        """The result sets of EXEC proc ... as INSERT ... EXEC takes them: [(types, rows)], not sent to the
        client (informational messages still are)."""
        args = []
        for name, val, _out in st.args:
            if val == "DEFAULT":
                args.append((name, PR.DEFAULT, None))
                continue
            v, t = self.scalar(val)
            args.append((name, v, t))
        if st.dynamic is not None or system_proc(st.parts):
            raise SqlError(50000, "The simulator runs INSERT ... EXEC of stored procedures only.", 16, 1)
        pdef, result = self.invoke_proc(st.parts, args, ".".join(st.parts))
        for number, text in result.messages:
            resp.token(K.message(number, text, 0, 1, proc=pdef.name.split(".")[-1], tds=resp.ch.tds))
        return [([t for _, t in rs.columns], list(rs.rows)) for rs in result.resultsets]

    def use(self, name, resp):
        target = self.s.server.instance.database(name)
        new = "master" if name.lower() == "master" else target.name if target is not None else None
        if new is None:
            raise SqlError(911, "Database '%s' does not exist. Make sure that the name is entered correctly." % name,
                           16, 1)
        if target is not None and not P.can_open_database(target.login(self.s.login.name), new, target.name):
            raise SqlError(916, 'The server principal "%s" is not able to access the database "%s" under the '
                           'current security context.' % (self.s.login.name, new), 14, 1)
        old = self.s.database
        with self.s.server.instance.lock:
            self.s.switch_database(new)
        resp.token(K.env_database(new, old))
        resp.token(K.message(5701, "Changed database context to '%s'." % new, 0, 2, tds=resp.ch.tds))

    # --- expressions and variables --------------------------------------------------------

    def parse_type(self, text):
        try:
            return T.parse_type(text)
        except T.UnknownType:
            raise SqlError(2715, "Column, parameter, or variable #1: Cannot find data type %s." % text, 16, 6)

    def assign_convert(self, value, vt, t):
        """Implicit conversion of ``value`` (type ``vt``) to a variable or parameter of type ``t``."""
        if value is None:
            return None
        T.check_implicit(vt, t)
        if t.is_string and not isinstance(value, bytes):
            return str(value)
        return convert(value, t, vt, None)

    def scalar(self, expr):
        """Evaluate a scalar expression (no FROM) -> (value, SqlType)."""
        tr = Translator(self.s)
        c = tr.compile_expr(expr)
        row = self.query(c.sql, c.params).fetchone()
        return row[0], c.columns[0][1]

    def query(self, sql, params):
        """Run translated SQL on the session's sqlite connection, mapping errors to SQL Server's."""
        self.s.udf_error = None
        try:
            return self.s.conn.execute(sql, params)
        except (sqlite3.Error, UdfFailure, OverflowError) as e:
            raise self.map_error(e, sql)

    def map_error(self, e, sql):
        if self.s.udf_error is not None:
            err, self.s.udf_error = self.s.udf_error, None
            return err
        msg = str(e)
        if "no such column" in msg:
            return SqlError(207, "Invalid column name '%s'." % msg.split(":")[-1].strip().split(".")[-1], 16, 1)
        if "no such table" in msg:
            return SqlError(208, "Invalid object name '%s'." % msg.split(":")[-1].strip(), 16, 1)
        if "integer overflow" in msg or isinstance(e, OverflowError):
            return SqlError(8115, "Arithmetic overflow error converting expression to data type int.", 16, 2)
        if "misuse of aggregate" in msg or "aggregate functions are not allowed" in msg:
            return SqlError(147, "An aggregate may not appear in the WHERE clause unless it is in a subquery "
                            "contained in a HAVING clause or a select list, and the column being aggregated is an "
                            "outer reference.", 15, 1)
        return SqlError(50000, "The simulator could not run this statement: %s" % msg, 16, 1)

    # --- SELECT ---------------------------------------------------------------------------

    def select(self, sel, resp, done_tok):
        tr = Translator(self.s)
        with self.db.lock:
            c = tr.compile_select(sel)
        cur = self.query(c.sql, c.params)
        if c.assigns:
            last = None
            n = 0
            for row in cur:
                last, n = row, n + 1
            if last is not None:
                for name, v, (_, t) in zip(c.assigns, last, c.columns):
                    if name not in self.s.variables:
                        raise SqlError(137, 'Must declare the scalar variable "@%s".' % name, 15, 2)
                    vt = self.s.variables[name][1]
                    self.s.variables[name] = (self.assign_convert(v, t, vt), vt)
            resp.done(done_tok, K.COUNT, K.CMD_SELECT, n)
            return
        self.stream(resp, c.columns, cur, done_tok, reads=c.reads)

    def stream(self, resp, columns, cur, done_tok, reads=()):
        """COLMETADATA + ROWs fetched in chunks + DONE(COUNT).  Applies the purge and drop faults."""
        try:
            first = cur.fetchmany(FETCH)
        except (sqlite3.Error, UdfFailure) as e:
            raise self.map_error(e, "")
        if reads and self.s.server.faults.has("purge"):
            f = self.s.server.faults.take("purge", None, lambda f: f.capture_instance is None or any(
                i.name.lower() == f.capture_instance.lower() for i in reads), database=self.s.database)
            if f:
                self.s.server.purge_now(f, self.db)
        columns = [(n, t) for n, t in columns]
        resp.token(T.colmetadata(columns, self.s.wire))
        encode = T.row_encoder([t for _, t in columns], self.s.wire)
        count = 0
        drop = self.s.drop_after_rows
        self.s.drop_after_rows = None
        rows = first
        write = resp.ch.write
        while rows:
            if drop is not None and count + len(rows) >= drop:
                rows = rows[:max(0, drop - count)]
                write(encode(rows))
                self.s.drop_connection()
            for i in range(0, len(rows), WRITE_ROWS):
                write(encode(rows[i:i + WRITE_ROWS]))
            count += len(rows)
            if len(rows) < FETCH:
                break
            try:
                rows = cur.fetchmany(FETCH)
            except (sqlite3.Error, UdfFailure) as e:
                raise self.map_error(e, "")
        if drop is not None:
            self.s.drop_connection()
        resp.done(done_tok, K.COUNT, K.CMD_SELECT, count)

    # --- procedures ---------------------------------------------------------------------

    def exec_stmt(self, st, resp):
        if st.dynamic is not None:
            value, _ = self.scalar(st.dynamic)
            saved = self.s.variables, self.s.table_vars
            self.s.variables, self.s.table_vars = {}, {}
            try:
                self.run_batch(str(value or ""), resp, in_proc=True)
            finally:
                self.s.variables, self.s.table_vars = saved
            return
        args = []
        for name, val, out in st.args:
            if val == "DEFAULT":
                args.append((name, PR.DEFAULT, None, out))
                continue
            v, t = self.scalar(val)
            args.append((name, v, t, out))
        base = system_proc(st.parts)
        status = 0
        if base == "sp_executesql":
            self.assign_outputs(st, self.executesql(args, resp, rpc=False))
        elif base in PREPARED_PROCS:
            self.assign_outputs(st, self.prepared_proc(base, args, resp, rpc=False))
        else:
            status = self.call_proc(st.parts, [a[:3] for a in args], resp, display=".".join(st.parts))
        if st.ret is not None:
            if st.ret not in self.s.variables:
                raise SqlError(137, 'Must declare the scalar variable "@%s".' % st.ret, 15, 2)
            vt = self.s.variables[st.ret][1]
            self.s.variables[st.ret] = (self.assign_convert(status, T.INT, vt), vt)

    def assign_outputs(self, st, outs):
        """EXEC ... @p = @v OUTPUT in a batch: the values of output parameters go back to the variables."""
        for index, _name, t, value in outs or ():
            if index < len(st.args) and isinstance(st.args[index][1], A.Var) and st.args[index][2]:
                var = st.args[index][1].name
                if var not in self.s.variables:
                    raise SqlError(137, 'Must declare the scalar variable "@%s".' % var, 15, 2)
                vt = self.s.variables[var][1]
                self.s.variables[var] = (self.assign_convert(value, t, vt), vt)

    def send_outputs(self, resp, outs):
        """RETURNVALUE tokens of an RPC's output parameters (after RETURNSTATUS, before DONEPROC)."""
        for ordinal, name, t, value in outs:
            resp.token(T.returnvalue(ordinal, name, t, value, self.s.wire))

    def run_parameterized(self, stmt, decl_text, value_args, resp, proc):
        """The body of sp_executesql / sp_prepexec / sp_execute: ``stmt`` with the parameters ``decl_text``
        declares ('@a int, @b binary(10) OUTPUT') bound to ``value_args`` [(name|None, value, type, output)]
        (positional ones in declaration order).  -> (ok, outputs [(index in value_args, '@name', type, value)])
        for the arguments passed as output; Msg 8162 when one is passed as output but not declared OUTPUT."""
        decls = parse_type_text(str(decl_text)) if decl_text else []
        values, pos = {}, 0
        for i, a in enumerate(value_args):
            name, v, t = a[0], a[1], a[2]
            out = a[3] if len(a) > 3 else False
            if name is None:
                if pos >= len(decls):
                    raise SqlError(8144, "Procedure or function %s has too many arguments specified." % proc, 16, 2)
                name = decls[pos][0]
                pos += 1
            values[name.lstrip("@").lower()] = (v, t, out, i)
        variables, declared = {}, {}
        for name, type_text, decl_out in decls:
            t = self.parse_type(type_text)
            declared[name] = (t, decl_out)
            if name not in values:
                raise SqlError(8178, "The parameterized query '(%s)' expects the parameter '@%s', which was not "
                               "supplied." % (decl_text, name), 16, 1)
            v, vt, out, _ = values[name]
            if out and not decl_out:
                raise SqlError(8162, 'The formal parameter "@%s" was not declared as an OUTPUT parameter, but the '
                               'actual parameter passed in requested output.' % name, 16, 2)
            variables[name] = (None if v is None or v is PR.DEFAULT else self.assign_convert(v, vt, t), t)
        saved = self.s.variables, self.s.table_vars
        self.s.variables, self.s.table_vars = variables, {}
        try:
            ok = self.run_batch(str(stmt or ""), resp, in_proc=True)
        finally:
            self.s.variables, self.s.table_vars = saved
        outs = sorted((i, "@" + name, declared[name][0], variables[name][0])
                      for name, (_v, _t, out, i) in values.items() if out and name in declared)
        return ok, outs

    def executesql(self, args, resp, rpc):
        """sp_executesql @statement, @params, @p1 = ...: a nested batch with typed parameters; output
        parameters come back as RETURNVALUE tokens (RPC) or into the caller's variables (batch).
        -> outputs [(index in args, name, type, value)]."""
        if not args:
            raise SqlError(201, "Procedure or function 'sp_executesql' expects parameter '@statement', which was "
                           "not supplied.", 16, 4)
        stmt = args[0][1]
        decl = args[1][1] if len(args) > 1 else None
        ok, outs = self.run_parameterized(stmt, decl, args[2:], resp, "sp_executesql")
        outs = [(i + 2, name, t, v) for i, name, t, v in outs]
        if rpc:
            resp.token(K.returnstatus(0))
            self.send_outputs(resp, outs)
            resp.done(K.DONEPROC, 0 if ok else K.ERROR, K.CMD_NONE, 0)
        return outs

    # --- prepared statements: sp_prepare, sp_prepexec, sp_execute, sp_unprepare --------------------------

    def prepared_proc(self, base, args, resp, rpc):
        """Prepared statements of this session: sp_prepare @handle OUTPUT, @params, @stmt, @options (1 =
        return the result set's metadata) makes a handle (1, 2, ... per session); sp_prepexec @handle OUTPUT,
        @params, @stmt, values... prepares and runs; sp_execute @handle, values... runs; sp_unprepare @handle
        discards.  An unknown handle is Msg 8179.  The handle comes back as a RETURNVALUE after RETURNSTATUS
        (as the JDBC driver reads it) or, in a batch, into the @handle OUTPUT variable.
        -> outputs [(index in args, name, type, value)]."""
        s = self.s
        fixed = PREPARED_PROCS[base]
        bound, values = {}, []
        for i, a in enumerate(args):
            name = (a[0] or "").lstrip("@").lower()
            if name in fixed and name not in bound:
                bound[name] = (i, a)
            elif not name and not values and len(bound) < len(fixed):
                bound[fixed[len(bound)]] = (i, a)
            else:
                values.append(a)
        if "handle" not in bound or (base in ("sp_prepare", "sp_prepexec") and "stmt" not in bound):
            missing = "handle" if "handle" not in bound else "stmt"
            raise SqlError(201, "Procedure or function '%s' expects parameter '@%s', which was not supplied."
                           % (base, missing), 16, 4)
        h_index, h_arg = bound["handle"]
        outs, ok = [], True
        if base in ("sp_prepare", "sp_prepexec"):
            decl = bound.get("params", (None, (None, None)))[1][1]
            stmt = str(bound["stmt"][1][1] or "")
            if decl:
                parse_type_text(str(decl))
            parse_batch(stmt)                        # syntax errors are reported at prepare time
            handle = s.next_handle
            s.next_handle += 1
            s.prepared[handle] = (decl, stmt)
            outs.append((h_index, "@" + (h_arg[0] or "handle").lstrip("@"), T.INT, handle))
            if base == "sp_prepare":
                options = bound.get("options", (None, (None, None)))[1][1]
                if options is not None and int(options) & 1:
                    self.prepare_metadata(decl, stmt, resp)
            else:
                ok, vouts = self.run_parameterized(stmt, decl, values, resp, base)
                outs += [(i + len(bound), n, t, v) for i, n, t, v in vouts]
        else:
            try:
                handle = int(h_arg[1])
            except (TypeError, ValueError):
                handle = None
            if handle not in s.prepared:
                raise SqlError(8179, "Could not find prepared statement with handle %s." % h_arg[1], 16, 2,
                               proc=base)
            if base == "sp_unprepare":
                del s.prepared[handle]
            else:
                decl, stmt = s.prepared[handle]
                ok, vouts = self.run_parameterized(stmt, decl, values, resp, base)
                outs += [(i + len(bound), n, t, v) for i, n, t, v in vouts]
        resp.token(K.returnstatus(0))
        if rpc:
            self.send_outputs(resp, outs)
        resp.done(K.DONEPROC, 0 if ok else K.ERROR, K.CMD_NONE, 0)
        return outs

    def prepare_metadata(self, decl, stmt, resp):
        """sp_prepare @options = 1 (RETURN_METADATA): the COLMETADATA of the statement's first result set,
        without rows.  Name resolution errors (Msg 207, 208, ...) are reported, as SQL Server compiles at
        prepare time; a statement whose shape needs its parameters' values returns no metadata."""
        stmts = parse_batch(stmt)
        if not stmts or not isinstance(stmts[0], A.SelectStmt) or any(it.assign for it in stmts[0].select.items):
            return
        variables = {}
        for name, type_text, _out in (parse_type_text(str(decl)) if decl else []):
            variables[name] = (None, self.parse_type(type_text))
        saved = self.s.variables, self.s.table_vars
        self.s.variables, self.s.table_vars = variables, {}
        try:
            with self.db.lock:
                c = Translator(self.s).compile_select(stmts[0].select)
        except SqlError as e:
            if e.number in SCOPE_ABORT or e.number == 229:
                raise
            return
        finally:
            self.s.variables, self.s.table_vars = saved
        resp.token(T.colmetadata(c.columns, self.s.wire))
        resp.done(K.DONEINPROC, 0, K.CMD_SELECT, 0)

    def invoke_proc(self, parts, args, display):
        """Look up, check and run a stored procedure -> (ProcDef, ProcResult); its errors raise SqlError
        with the procedure's name."""
        pdef = PR.lookup(parts, self.s.database)
        if pdef is None:
            raise SqlError(2812, "Could not find stored procedure '%s'." % display, 16, 62)
        login = self.s.login
        if pdef.privilege == "sysadmin" and not login.sysadmin:
            raise SqlError(229, "The EXECUTE permission was denied on the object '%s', database '%s', schema '%s'."
                           % (pdef.name.split(".")[-1], self.s.database, pdef.name.split(".")[0]), 14, 5)
        if pdef.privilege == "db_owner" and not (login.sysadmin or login.db_owner):
            raise SqlError(22904, "Caller is not authorized to initiate the requested action. DBO privileges are "
                           "required.", 16, 1)
        bound = PR.bind(pdef, args)
        sched = self.s.server.scheduler
        try:
            with self.db.lock:
                db = self.db
                sched.sync(db)                  # idle capture cycles up to now, before the procedure
                try:
                    result = pdef.func(self.s, **bound)
                finally:
                    sched.replan(db)            # it may have made the database busy (a commit, a setting)
        except SqlError as e:
            e.proc = e.proc or pdef.name.split(".")[-1]
            e.in_proc = True                 # raised while the procedure ran (not by lookup or binding)
            raise
        if result is None:
            result = PR.ProcResult()
        elif isinstance(result, list):
            result = PR.ProcResult(result)
        return pdef, result

    def call_proc(self, parts, args, resp, display):
        """Run a procedure and stream its results: result sets, RETURNSTATUS, DONEPROC -> its return status."""
        try:
            pdef, result = self.invoke_proc(parts, args, display)
        except SqlError as e:
            if not getattr(e, "in_proc", False):
                raise
            resp.error_msg(e)
            resp.token(K.returnstatus(1))
            resp.done(K.DONEPROC, K.ERROR, K.CMD_NONE, 0)
            return 1
        for number, text in result.messages:
            resp.token(K.message(number, text, 0, 1, proc=pdef.name.split(".")[-1], tds=resp.ch.tds))
        for rs in result.resultsets:
            resp.token(T.colmetadata(rs.columns, self.s.wire))
            encode = T.row_encoder([t for _, t in rs.columns], self.s.wire)
            it = iter(rs.rows)
            n = 0
            while True:
                chunk = list(itertools.islice(it, WRITE_ROWS))
                if not chunk:
                    break
                resp.ch.write(encode(chunk))
                n += len(chunk)
            resp.done(K.DONEINPROC, K.COUNT, K.CMD_SELECT, n)
        resp.token(K.returnstatus(result.status))
        resp.done(K.DONEPROC, 0, K.CMD_NONE, 0)
        return result.status
