"""Runs requests of one session: SQL batches, RPCs, stored procedures; streams typed results.

Response shape follows SQL Server: per statement a DONE (DONEINPROC inside a
procedure or sp_executesql) with MORE on every token but the last; errors are
an ERROR token followed by a DONE with the error bit; procedure calls end with
RETURNSTATUS + DONEPROC."""
import itertools
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
from .tsql import ast as A
from .tsql.parser import parse_batch, parse_type_text
from .tsql.translate import Translator

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
SCOPE_ABORT = {207, 208, 209, 4104, 4121, 137, 8155, 205, 116, 141}
BATCH_ABORT = {241, 242, 245, 8114, 601, 102, 105}


def abort_level(err):
    """'statement', 'scope' or 'batch': what an error ends besides its statement."""
    if err.batch_abort or err.number in BATCH_ABORT:
        return "batch"
    if err.number in SCOPE_ABORT:
        return "scope"
    return "statement"


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
        self.db = session.db

    # --- requests --------------------------------------------------------------------

    def sql_batch(self, text):
        """A SQL batch request (packet type 0x01)."""
        resp = Response(self.s.channel)
        self.s.variables = {}
        try:
            self.run_batch(text, resp, in_proc=False)
        except BatchAbort as e:
            if e.nested:
                resp.done(K.DONE, K.ERROR, K.CMD_NONE, 0)
        resp.finish()

    def rpc(self, call):
        """An RPC request: sp_executesql (ProcID 10 or by name) or a named procedure."""
        resp = Response(self.s.channel)
        self.s.variables = {}
        name = call.name
        args = [(p.name or None, p.value, p.type) for p in call.params]
        try:
            self.check_faults(name)
            if call.proc_id == 10 or name.lower() in ("sp_executesql", "sys.sp_executesql"):
                self.executesql(args, resp, rpc=True)
            else:
                from .tsql.lexer import tokenize
                parts = [t.value for t in tokenize(name) if t.kind in ("word", "qid")]
                self.call_proc(parts, args, resp, display=name)
        except SqlError as e:
            resp.error_msg(e)
            resp.done(K.DONEPROC, K.ERROR, K.CMD_NONE, 0)
        except BatchAbort:
            resp.done(K.DONEPROC, K.ERROR, K.CMD_NONE, 0)
        resp.finish()

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
        ok = True
        for st in stmts:
            try:
                self.statement(st, resp, in_proc)
            except SqlError as e:
                ok = False
                resp.error_msg(e)
                resp.done(K.DONEINPROC if in_proc else K.DONE, K.ERROR, K.CMD_NONE, 0)
                level = abort_level(e)
                if level == "batch":
                    raise BatchAbort(in_proc)
                if level == "scope":
                    break
        return ok

    def check_faults(self, text):
        """Apply armed faults to a statement (control procedures are exempt)."""
        if text.lower().lstrip("[").startswith(("exec sim.", "execute sim.", "sim.", "exec [sim]", "sim]")):
            return
        faults = self.s.server.faults
        f = faults.take("stall", text)
        if f:
            self.sleep(f.seconds)
        f = faults.take("error", text)
        if f:
            raise SqlError(f.number, f.message or "Injected error", f.cls, f.state)
        f = faults.take("drop", text)
        if f:
            self.s.drop_after_rows = f.after_rows

    def sleep(self, seconds):
        """Wait (WAITFOR, stall fault) while still honouring an ATTENTION from the client."""
        end = time.monotonic() + seconds
        while True:
            self.s.channel.poll()
            left = end - time.monotonic()
            if left <= 0:
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
            return self.select(st.select, resp, done_tok)
        if isinstance(st, A.ExecStmt):
            return self.exec_stmt(st, resp)
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
            self.transaction(st.action, resp)
            resp.done(done_tok, 0, K.CMD_NONE, 0)
            return
        if isinstance(st, A.Security):
            security.run(self.s, st)
            resp.done(done_tok, 0, K.CMD_NONE, 0)
            return
        if isinstance(st, A.Unsupported):
            raise SqlError(50000, "The simulator does not run %s statements (only SELECT, EXEC, DECLARE, SET, USE, "
                           "PRINT, WAITFOR); change data with EXEC sim.commit." % st.keyword, 16, 1)
        raise SqlError(102, "Incorrect syntax near '%s'." % text[:20], 15, 1)

    def transaction(self, action, resp):
        """BEGIN/COMMIT/ROLLBACK: nothing to make atomic (SQL is read-only here), but the
        ENVCHANGE tokens and @@TRANCOUNT behave like SQL Server's."""
        s = self.s
        if action == "BEGIN":
            s.trancount += 1
            if s.trancount == 1:
                s.tran_id = (s.tran_id or 0) + 1
                resp.token(K.env_transaction(8, s.tran_id.to_bytes(8, "little")))
            return
        if s.trancount == 0:
            raise SqlError(3902 if action == "COMMIT" else 3903,
                           "The %s TRANSACTION request has no corresponding BEGIN TRANSACTION." % action, 16, 1)
        s.trancount = s.trancount - 1 if action == "COMMIT" else 0
        if s.trancount == 0:
            resp.token(K.env_transaction(9 if action == "COMMIT" else 10, s.tran_id.to_bytes(8, "little")))

    def use(self, name, resp):
        known = {self.db.name.lower(): self.db.name, "master": "master"}
        new = known.get(name.lower())
        if new is None:
            raise SqlError(911, "Database '%s' does not exist. Make sure that the name is entered correctly." % name,
                           16, 1)
        if not P.can_open_database(self.s.login, new, self.db.name):
            raise SqlError(916, 'The server principal "%s" is not able to access the database "%s" under the '
                           'current security context.' % (self.s.login.name, new), 14, 1)
        old = self.s.database
        self.s.database = new
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
                i.name.lower() == f.capture_instance.lower() for i in reads))
            if f:
                self.s.server.purge_now(f)
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
            saved = self.s.variables
            self.s.variables = {}
            try:
                self.run_batch(str(value or ""), resp, in_proc=True)
            finally:
                self.s.variables = saved
            return
        args = []
        for name, val, _out in st.args:
            if val == "DEFAULT":
                args.append((name, PR.DEFAULT, None))
                continue
            v, t = self.scalar(val)
            args.append((name, v, t))
        key = ".".join(p.lower() for p in st.parts)
        if key in ("sp_executesql", "sys.sp_executesql"):
            return self.executesql(args, resp, rpc=False)
        self.call_proc(st.parts, args, resp, display=".".join(st.parts))

    def executesql(self, args, resp, rpc):
        """sp_executesql @statement, @params, @p1 = ...: a nested batch with typed parameters."""
        if not args:
            raise SqlError(201, "Procedure or function 'sp_executesql' expects parameter '@statement', which was "
                           "not supplied.", 16, 4)
        stmt = args[0][1]
        decls = []
        if len(args) > 1 and args[1][1]:
            decls = parse_type_text(str(args[1][1]))
        values = {}
        pos = 0
        for name, v, t in args[2:]:
            if name is None:
                if pos >= len(decls):
                    raise SqlError(8144, "Procedure or function has too many arguments specified.", 16, 2)
                name = decls[pos][0]
                pos += 1
            values[name.lstrip("@").lower()] = (v, t)
        variables = {}
        for name, type_text, _out in decls:
            t = self.parse_type(type_text)
            if name not in values:
                raise SqlError(8178, "The parameterized query '(%s)' expects the parameter '@%s', which was not "
                               "supplied." % (args[1][1], name), 16, 1)
            v, vt = values[name]
            variables[name] = (None if v is None or v is PR.DEFAULT else self.assign_convert(v, vt, t), t)
        saved = self.s.variables
        self.s.variables = variables
        try:
            ok = self.run_batch(str(stmt or ""), resp, in_proc=True)
        finally:
            self.s.variables = saved
        if rpc:
            resp.token(K.returnstatus(0))
            resp.done(K.DONEPROC, 0 if ok else K.ERROR, K.CMD_NONE, 0)

    def call_proc(self, parts, args, resp, display):
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
        try:
            with self.db.lock:
                result = pdef.func(self.s, **bound)
        except SqlError as e:
            e.proc = e.proc or pdef.name.split(".")[-1]
            resp.error_msg(e)
            resp.token(K.returnstatus(1))
            resp.done(K.DONEPROC, K.ERROR, K.CMD_NONE, 0)
            return
        if result is None:
            result = PR.ProcResult()
        elif isinstance(result, list):
            result = PR.ProcResult(result)
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
