"""Recursive-descent parser for the supported T-SQL subset.

A batch is parsed whole before anything runs, as SQL Server compiles a batch:
a syntax error anywhere fails the batch with Msg 102 and runs nothing.
Statements may be separated by ';' or simply follow each other."""
from . import ast as A
from .lexer import tokenize
from ..errors import SqlError, syntax_error

_STMT_START = {"SELECT", "EXEC", "EXECUTE", "DECLARE", "SET", "USE", "PRINT", "WAITFOR", "INSERT",
               "UPDATE", "DELETE", "MERGE", "CREATE", "ALTER", "DROP", "TRUNCATE", "BEGIN", "COMMIT",
               "ROLLBACK", "IF", "WHILE", "GRANT", "REVOKE", "DENY", "WITH", "RAISERROR", "THROW",
               "RETURN", "GO", "BULK", "DBCC", "BACKUP", "RESTORE", "SAVE", "END"}
_RESERVED = {"FROM", "WHERE", "GROUP", "HAVING", "ORDER", "UNION", "EXCEPT", "INTERSECT", "ON", "JOIN",
             "INNER", "LEFT", "RIGHT", "FULL", "CROSS", "OUTER", "AS", "AND", "OR", "NOT", "IS", "IN",
             "BETWEEN", "LIKE", "CASE", "WHEN", "THEN", "ELSE", "END", "SELECT", "INTO", "BY", "ASC",
             "DESC", "OFFSET", "FETCH", "OPTION", "FOR", "WITH", "NULL", "EXISTS", "DISTINCT", "TOP",
             "ALL", "SET", "EXEC", "EXECUTE", "DECLARE", "USE", "PRINT", "WAITFOR", "INSERT", "UPDATE",
             "DELETE", "OVER", "ROWS", "ESCAPE", "COLLATE", "CROSS", "APPLY", "PIVOT", "GO", "BEGIN",
             "COMMIT", "ROLLBACK", "IF", "WHILE", "RETURN", "CREATE", "ALTER", "DROP"}
_DATEPART_FUNCS = {"DATEPART", "DATEADD", "DATEDIFF", "DATEDIFF_BIG", "DATENAME", "DATETRUNC"}
_CMP = {"=", "<>", "!=", "<", ">", "<=", ">=", "!<", "!>"}


class Parser:
    """Parses one batch; ``statements()`` returns the list of statement nodes."""

    def __init__(self, src):
        self.src = src
        self.toks = tokenize(src)
        self.i = 0

    # --- token helpers ---------------------------------------------------------

    @property
    def tok(self):
        return self.toks[self.i]

    def peek(self, k=1):
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def advance(self):
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def is_word(self, *words, tok=None):
        t = tok or self.tok
        return t.kind == "word" and t.value.upper() in words

    def is_op(self, *ops, tok=None):
        t = tok or self.tok
        return t.kind == "op" and t.value in ops

    def accept_word(self, *words):
        if self.is_word(*words):
            return self.advance()
        return None

    def accept_op(self, *ops):
        if self.is_op(*ops):
            return self.advance()
        return None

    def expect_word(self, *words):
        if not self.is_word(*words):
            self.fail()
        return self.advance()

    def expect_op(self, op):
        if not self.is_op(op):
            self.fail()
        return self.advance()

    def fail(self):
        """Msg 102 near the current token (or the last one at the end of the batch)."""
        t = self.tok
        if t.kind == "eof":
            t = self.toks[self.i - 1] if self.i else t
        raise syntax_error(t.text(self.src) if t.kind != "eof" else "")

    def ident(self):
        """An identifier (bare word or bracket-quoted) -> its name."""
        t = self.tok
        if t.kind == "qid" or (t.kind == "word" and t.value.upper() not in _RESERVED):
            self.advance()
            return t.value
        self.fail()

    def is_ident(self, tok=None):
        t = tok or self.tok
        return t.kind == "qid" or (t.kind == "word" and t.value.upper() not in _RESERVED)

    def multipart(self):
        """a.b.c (with empty parts allowed as in db..table) -> list of names.

        After a dot any word is a name (sim.commit, t.[key]): lenient, as the
        position cannot be a keyword."""
        parts = [self.ident()]
        while self.is_op(".") and (self.peek().kind in ("word", "qid") or self.is_op(".", tok=self.peek())):
            self.advance()
            if self.is_op("."):
                parts.append("")
                continue
            parts.append(self.advance().value)
        return parts

    # --- batch -----------------------------------------------------------------

    def statements(self):
        out = []
        while True:
            while self.accept_op(";"):
                pass
            if self.tok.kind == "eof":
                return out
            out.append(self.texted_statement())

    def texted_statement(self):
        """One statement with its source text (fault patterns and logs match it)."""
        start = self.tok.pos
        stmt = self.statement()
        end = self.toks[self.i - 1].end if self.i else start
        stmt.text = self.src[start:end].strip()
        return stmt

    def if_statement(self):
        """IF condition statement [ELSE statement] (no ';' before ELSE, as in T-SQL)."""
        cond = self.expr()
        if self.tok.kind == "eof" or self.is_op(";"):
            self.fail()
        then = self.texted_statement()
        else_ = None
        if self.accept_word("ELSE"):
            else_ = self.texted_statement()
        return A.If(cond, then, else_)

    def block(self):
        """BEGIN statement ... END."""
        stmts = []
        while True:
            while self.accept_op(";"):
                pass
            if self.accept_word("END"):
                return A.Block(stmts)
            if self.tok.kind == "eof":
                self.fail()
            stmts.append(self.texted_statement())

    def tran_name(self):
        """The optional transaction or savepoint name after TRAN[SACTION]: a name or a variable."""
        if self.tok.kind == "var":
            return "@" + self.advance().value.lower()
        if self.tok.kind == "qid" or (self.tok.kind == "word" and self.tok.value.upper() not in _STMT_START
                                      and self.tok.value.upper() not in _RESERVED | {"ELSE"}):
            return self.advance().value
        return None

    def tran_statement(self, w):
        """BEGIN TRAN[SACTION] [name [WITH MARK ['...']]], COMMIT [TRAN[SACTION] | WORK] [name]
        [WITH (DELAYED_DURABILITY = ON|OFF)], ROLLBACK [TRAN[SACTION] | WORK] [name], SAVE TRAN[SACTION] name."""
        name = None
        if w == "SAVE":
            self.expect_word("TRAN", "TRANSACTION")
            name = self.tran_name()
            if name is None:
                self.fail()
            return A.Tran("SAVE", None, name)
        if self.accept_word("TRAN", "TRANSACTION"):
            name = self.tran_name()
        else:
            self.accept_word("WORK")
        if w == "BEGIN" and name is not None and self.is_word("WITH") and self.is_word("MARK", tok=self.peek()):
            self.advance()
            self.advance()
            if self.tok.kind in ("str", "nstr"):
                self.advance()
        if w == "COMMIT" and self.is_word("WITH") and self.is_op("(", tok=self.peek()):
            self.advance()
            self.advance()
            while not self.accept_op(")"):
                if self.tok.kind == "eof":
                    self.fail()
                self.advance()
        return A.Tran(w, None, name)

    def declare_table(self, name):
        """DECLARE @t TABLE (column type [NULL | NOT NULL] [PRIMARY KEY] [COLLATE c], ...)."""
        self.expect_op("(")
        cols = []
        while True:
            cname = self.ident()
            tt = self.type_name()
            nullable = True
            while True:
                if self.accept_word("NOT"):
                    self.expect_word("NULL")
                    nullable = False
                elif self.accept_word("NULL"):
                    nullable = True
                elif self.accept_word("PRIMARY"):
                    self.expect_word("KEY")
                    nullable = False
                elif self.accept_word("COLLATE"):
                    self.ident()
                else:
                    break
            cols.append((cname, tt, nullable))
            if not self.accept_op(","):
                break
        self.expect_op(")")
        return A.DeclareTable(name, cols)

    def insert(self):
        """INSERT [INTO] @table_variable [(columns)] EXEC ... | SELECT ... | VALUES (...)[, (...)]: the only
        INSERT the simulator runs (tables change through sim.commit); any other target is None."""
        save = self.i
        self.accept_word("INTO")
        if self.tok.kind != "var":
            self.i = save
            return None
        name = self.advance().value.lower()
        cols = None
        if self.is_op("(") and not self.is_word("SELECT", tok=self.peek()):
            self.advance()
            cols = [self.ident()]
            while self.accept_op(","):
                cols.append(self.ident())
            self.expect_op(")")
        if self.accept_word("EXEC", "EXECUTE"):
            return A.InsertVar(name, cols, self.exec_stmt())
        if self.is_word("SELECT") or self.is_op("("):
            return A.InsertVar(name, cols, self.select_expr())
        if self.accept_word("VALUES"):
            rows = []
            while True:
                self.expect_op("(")
                row = [self.expr()]
                while self.accept_op(","):
                    row.append(self.expr())
                self.expect_op(")")
                rows.append(row)
                if not self.accept_op(","):
                    break
            return A.InsertVar(name, cols, rows)
        self.fail()

    def alter_database(self):
        """ALTER DATABASE name|CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON|OFF (the only option modelled);
        None (unsupported) for anything else."""
        save = self.i
        self.advance()          # ALTER
        self.advance()          # DATABASE
        db = self.advance()
        if db.kind not in ("word", "qid") or not self.accept_word("SET"):
            self.i = save
            return None
        opt = self.tok
        if not self.is_word("ALLOW_SNAPSHOT_ISOLATION"):
            self.i = save
            return None
        self.advance()
        val = self.expect_word("ON", "OFF").value.upper()
        return A.AlterDb(db.value, opt.value.upper(), val)

    def statement(self):
        t = self.tok
        if self.is_op("("):
            return A.SelectStmt(self.select_expr())
        if t.kind != "word":
            self.fail()
        w = t.value.upper()
        if w == "SELECT":
            return A.SelectStmt(self.select_expr())
        if w in ("EXEC", "EXECUTE"):
            self.advance()
            return self.exec_stmt()
        if w == "DECLARE":
            self.advance()
            return self.declare()
        if w == "SET":
            self.advance()
            if self.tok.kind == "var":
                name = self.advance().value.lower()
                self.expect_op("=")
                return A.SetVar(name, self.expr())
            words = []
            while self.tok.kind != "eof" and not self.is_op(";") and not (
                    self.tok.kind == "word" and self.tok.value.upper() in _STMT_START - {"ON"} and words
                    and self.tok.value.upper() not in ("LEVEL", "READ", "COMMITTED")):
                if self.is_word("SET", "ELSE") and words:
                    break
                words.append(self.advance().text(self.src))
            if not words:
                self.fail()
            return A.SetOption(words)
        if w == "USE":
            self.advance()
            return A.Use(self.ident())
        if w == "PRINT":
            self.advance()
            return A.Print(self.expr())
        if w == "WAITFOR":
            self.advance()
            self.expect_word("DELAY")
            return A.WaitFor(self.expr())
        if w in ("BEGIN", "COMMIT", "ROLLBACK") and (w != "BEGIN" or self.is_word("TRAN", "TRANSACTION",
                                                                                  tok=self.peek())):
            self.advance()
            return self.tran_statement(w)
        if w == "SAVE" and self.is_word("TRAN", "TRANSACTION", tok=self.peek()):
            self.advance()
            return self.tran_statement(w)
        if w == "BEGIN" and not self.is_word("TRY", "CATCH", "DISTRIBUTED", "DIALOG", "CONVERSATION",
                                             tok=self.peek()):
            self.advance()
            return self.block()
        if w == "IF":
            self.advance()
            return self.if_statement()
        if w == "INSERT":
            self.advance()
            ins = self.insert()
            if ins is not None:
                return ins
            self.i -= 1
        if w == "ALTER" and self.is_word("DATABASE", tok=self.peek()):
            alt = self.alter_database()
            if alt is not None:
                return alt
        if w == "WITH":
            raise SqlError(102, "Incorrect syntax near 'WITH'.", 15, 1, batch_abort=True)
        sec = self.security_statement(w)
        if sec is not None:
            return sec
        if w in _STMT_START:
            # Recognised but not supported: skip to the end of the statement.
            self.advance()
            depth = 0
            while self.tok.kind != "eof":
                if self.is_op("("):
                    depth += 1
                elif self.is_op(")"):
                    depth -= 1
                elif depth == 0 and (self.is_op(";") or (self.tok.kind == "word" and self.tok.value.upper()
                                                         in ("SELECT", "EXEC", "EXECUTE", "DECLARE", "USE")
                                                         and w not in ("INSERT", "CREATE", "ALTER", "IF"))):
                    break
                self.advance()
            return A.Unsupported(w)
        # A bare procedure name as the first statement of a batch is an EXEC.
        if not self.toks[:self.i] or all(x.kind == "op" and x.value == ";" for x in self.toks[:self.i]):
            return self.exec_stmt()
        self.fail()

    # --- security statements ------------------------------------------------------

    def security_statement(self, w):
        """CREATE/DROP LOGIN|USER|ROLE, ALTER ROLE ... ADD|DROP MEMBER, GRANT/REVOKE ... ON ... TO|FROM
        -> A.Security, or None when the statement is something else."""
        nxt = self.peek()
        kind = nxt.value.upper() if nxt.kind == "word" else ""
        if w in ("CREATE", "DROP") and kind in ("LOGIN", "USER", "ROLE"):
            self.advance()
            self.advance()
            return getattr(self, "%s_%s" % (w.lower(), kind.lower()))()
        if w == "ALTER" and kind == "ROLE":
            self.advance()
            self.advance()
            return self.alter_role()
        if w in ("GRANT", "REVOKE"):
            self.advance()
            return self.grant(w)
        return None

    def principal(self):
        """A principal name (bare or [quoted])."""
        return self.ident()

    def option_value(self):
        """The value of a WITH option: a string, a number, a name, ON/OFF."""
        t = self.advance()
        if t.kind in ("str", "nstr", "int", "word", "qid", "hex"):
            return t.value
        self.fail()

    def create_login(self):
        """CREATE LOGIN name WITH PASSWORD = '...' [MUST_CHANGE] [, option = value ...] (SQL logins only)."""
        name = self.principal()
        if self.is_word("FROM"):
            self.fail()
        self.expect_word("WITH")
        opts = {}
        while True:
            key = self.ident().upper()
            self.expect_op("=")
            opts[key] = self.option_value()
            if key == "PASSWORD" and self.is_word("HASHED"):
                self.fail()
            self.accept_word("MUST_CHANGE")
            if not self.accept_op(","):
                break
        if "PASSWORD" not in opts:
            self.fail()
        return A.Security("CREATE LOGIN", {"name": name, "options": opts})

    def create_user(self):
        """CREATE USER name [FOR|FROM LOGIN login | WITHOUT LOGIN] [WITH DEFAULT_SCHEMA = s]."""
        name = self.principal()
        login = name
        if self.accept_word("FOR", "FROM"):
            self.expect_word("LOGIN")
            login = self.principal()
        elif self.accept_word("WITHOUT"):
            self.expect_word("LOGIN")
            login = None
        opts = {}
        if self.accept_word("WITH"):
            while True:
                key = self.ident().upper()
                self.expect_op("=")
                opts[key] = self.option_value()
                if not self.accept_op(","):
                    break
        return A.Security("CREATE USER", {"name": name, "login": login, "options": opts})

    def create_role(self):
        """CREATE ROLE name [AUTHORIZATION owner]."""
        name = self.principal()
        if self.accept_word("AUTHORIZATION"):
            self.principal()
        return A.Security("CREATE ROLE", {"name": name})

    def _drop(self, kind):
        """DROP USER|ROLE [IF EXISTS] name -> A.Security."""
        if_exists = False
        if self.is_word("IF") and self.is_word("EXISTS", tok=self.peek()):
            self.advance()
            self.advance()
            if_exists = True
        return A.Security("DROP " + kind, {"name": self.principal(), "if_exists": if_exists})

    def drop_login(self):
        """DROP LOGIN name."""
        return A.Security("DROP LOGIN", {"name": self.principal(), "if_exists": False})

    def drop_user(self):
        """DROP USER [IF EXISTS] name."""
        return self._drop("USER")

    def drop_role(self):
        """DROP ROLE [IF EXISTS] name."""
        return self._drop("ROLE")

    def alter_role(self):
        """ALTER ROLE role ADD|DROP MEMBER user."""
        role = self.principal()
        op = self.expect_word("ADD", "DROP").value.upper()
        self.expect_word("MEMBER")
        return A.Security("ALTER ROLE", {"role": role, "op": op, "member": self.principal()})

    def grant(self, w):
        """GRANT perm [, ...] ON [class::]securable TO principal [, ...] [WITH GRANT OPTION];
        REVOKE [GRANT OPTION FOR] perm [, ...] ON ... FROM|TO principal [, ...] [CASCADE]."""
        if w == "REVOKE" and self.is_word("GRANT") and self.is_word("OPTION", tok=self.peek()):
            self.advance()
            self.advance()
            self.expect_word("FOR")
        perms = []
        while True:
            words = []
            while self.tok.kind == "word" and not self.is_word("ON", "TO", "FROM") or self.tok.kind == "qid":
                words.append(self.advance().value.upper())
            if not words:
                self.fail()
            perms.append(" ".join(words))
            if not self.accept_op(","):
                break
        cls, target = None, None
        if self.accept_word("ON"):
            if self.is_op("::", tok=self.peek()):
                cls = self.advance().value.upper()
                self.advance()
            target = self.multipart()
        if w == "GRANT":
            self.expect_word("TO")
        else:
            self.expect_word("TO", "FROM")
        grantees = [self.principal()]
        while self.accept_op(","):
            grantees.append(self.principal())
        if w == "GRANT" and self.accept_word("WITH"):
            self.expect_word("GRANT")
            self.expect_word("OPTION")
        if w == "REVOKE":
            self.accept_word("CASCADE")
        if self.accept_word("AS"):
            self.principal()
        return A.Security(w, {"perms": perms, "class": cls, "target": target, "grantees": grantees})

    def exec_stmt(self):
        if self.is_op("("):
            self.advance()
            e = self.expr()
            while self.accept_op("+"):
                e = A.Bin("+", e, self.expr())
            self.expect_op(")")
            return A.ExecStmt(None, [], e)
        ret = None
        if self.tok.kind == "var" and self.is_op("=", tok=self.peek()):
            ret = self.advance().value.lower()
            self.advance()
        parts = self.multipart()
        args = []
        if self.tok.kind != "eof" and not self.is_op(";") and not (
                self.tok.kind == "word" and self.tok.value.upper() in _STMT_START | {"ELSE"}):
            while True:
                name = None
                if self.tok.kind == "var" and self.is_op("=", tok=self.peek()):
                    name = self.advance().value.lower()
                    self.advance()
                if self.is_word("DEFAULT"):
                    self.advance()
                    val = "DEFAULT"
                elif self.tok.kind == "word" and self.tok.value.upper() not in ("NULL",) and \
                        not self.is_op("(", tok=self.peek()):
                    val = A.Lit("nstr", self.advance().value)     # unquoted string argument
                else:
                    val = self.expr()
                out = bool(self.accept_word("OUTPUT", "OUT"))
                args.append((name, val, out))
                if not self.accept_op(","):
                    break
        return A.ExecStmt(parts, args, None, None, ret)

    def declare(self):
        decls = []
        while True:
            if self.tok.kind != "var":
                self.fail()
            name = self.advance().value.lower()
            self.accept_word("AS")
            if self.is_word("TABLE") and not decls:
                self.advance()
                return self.declare_table(name)
            type_text = self.type_name()
            init = None
            if self.accept_op("="):
                init = self.expr()
            decls.append((name, type_text, init))
            if not self.accept_op(","):
                return A.Declare(decls)

    def type_name(self):
        """A type as text: 'binary(10)', 'nvarchar(max)', 'decimal(12,2)'."""
        parts = self.multipart()
        name = parts[-1]
        if self.accept_op("("):
            args = []
            while True:
                t = self.advance()
                if t.kind not in ("int", "word"):
                    self.fail()
                args.append(str(t.value))
                if not self.accept_op(","):
                    break
            self.expect_op(")")
            return "%s(%s)" % (name, ",".join(args))
        return name

    # --- SELECT ------------------------------------------------------------------

    def select_expr(self):
        """A SELECT, possibly parenthesised, with UNION/EXCEPT/INTERSECT and ORDER BY."""
        start = self.tok.pos
        if self.accept_op("("):
            s = self.select_expr()
            self.expect_op(")")
        else:
            s = self.select_core()
        while self.is_word("UNION", "EXCEPT", "INTERSECT"):
            kind = self.advance().value.upper()
            if kind == "UNION" and self.accept_word("ALL"):
                kind = "UNION ALL"
            if self.is_op("("):
                self.advance()
                other = self.select_expr()
                self.expect_op(")")
            else:
                other = self.select_core()
            s.unions = (s.unions or []) + [(kind, other)]
        if self.is_word("ORDER"):
            self.advance()
            self.expect_word("BY")
            s.order = self.order_list()
            if self.accept_word("OFFSET"):
                s.offset = self.expr()
                self.expect_word("ROW", "ROWS")
                if self.accept_word("FETCH"):
                    self.expect_word("NEXT", "FIRST")
                    s.fetch = self.expr()
                    self.expect_word("ROW", "ROWS")
                    self.expect_word("ONLY")
        if self.is_word("OPTION"):
            self.advance()
            self.expect_op("(")
            depth = 1
            while depth and self.tok.kind != "eof":
                if self.is_op("("):
                    depth += 1
                elif self.is_op(")"):
                    depth -= 1
                self.advance()
        s.text = self.src[start:self.toks[self.i - 1].end]
        return s

    def order_list(self):
        out = []
        while True:
            e = self.expr()
            desc = False
            if self.accept_word("DESC"):
                desc = True
            else:
                self.accept_word("ASC")
            out.append((e, desc))
            if not self.accept_op(","):
                return out

    def select_core(self):
        self.expect_word("SELECT")
        s = A.Select(False, None, [], None, None, None, None, None, None, None, None, "")
        if self.accept_word("DISTINCT"):
            s.distinct = True
        else:
            self.accept_word("ALL")
        if self.accept_word("TOP"):
            if self.accept_op("("):
                s.top = self.expr()
                self.expect_op(")")
            else:
                t = self.advance()
                if t.kind not in ("int", "var"):
                    self.fail()
                s.top = A.Lit("int", t.value) if t.kind == "int" else A.Var(t.value.lower())
            if self.is_word("PERCENT", "WITH"):
                self.fail()
        while True:
            s.items.append(self.select_item())
            if not self.accept_op(","):
                break
        if self.is_word("INTO"):
            self.fail()
        if self.accept_word("FROM"):
            s.from_ = self.from_list()
        if self.accept_word("WHERE"):
            s.where = self.expr()
        if self.accept_word("GROUP"):
            self.expect_word("BY")
            self.group_by(s)
        if self.accept_word("HAVING"):
            s.having = self.expr()
        return s

    # --- GROUP BY: plain lists, GROUPING SETS, ROLLUP, CUBE ------------------------------

    def group_by(self, s):
        """GROUP BY element [, ...] [WITH ROLLUP | WITH CUBE].  A list of plain expressions stays in
        ``s.group``; any GROUPING SETS / ROLLUP / CUBE / () element makes ``s.gsets`` the list of
        grouping sets (each a list of expressions): the cross product of the elements' sets."""
        elements, plain = [], True
        while True:
            if self.is_op("(") and self.is_op(")", tok=self.peek()):
                self.advance()
                self.advance()
                elements.append([[]])
                plain = False
            elif self.is_word("GROUPING") and self.is_word("SETS", tok=self.peek()):
                self.advance()
                self.advance()
                self.expect_op("(")
                sets = []
                while True:
                    sets.extend(self.grouping_set())
                    if not self.accept_op(","):
                        break
                self.expect_op(")")
                elements.append(sets)
                plain = False
            elif self.is_word("ROLLUP", "CUBE") and self.is_op("(", tok=self.peek()):
                elements.append(self.rollup_cube())
                plain = False
            else:
                elements.append([[self.expr()]])
            if not self.accept_op(","):
                break
        if self.is_word("WITH") and self.is_word("ROLLUP", "CUBE", tok=self.peek()):
            self.advance()
            kind = self.advance().value.upper()
            if not plain:
                self.fail()
            items = [sets[0] for sets in elements]
            elements, plain = [_rollup(items) if kind == "ROLLUP" else _cube(items)], False
        if plain:
            s.group = [sets[0][0] for sets in elements]
            return
        out = [[]]
        for sets in elements:
            out = [a + b for a in out for b in sets]
        s.gsets = out

    def grouping_set(self):
        """One element of GROUPING SETS ( ... ) -> list of grouping sets: (), (a, b), a, ROLLUP(...), CUBE(...)."""
        if self.is_word("ROLLUP", "CUBE") and self.is_op("(", tok=self.peek()):
            return self.rollup_cube()
        return [self.set_item()]

    def set_item(self):
        """An expression or a parenthesised list of expressions (a composite) -> list of expressions."""
        if self.is_op("("):
            if self.is_op(")", tok=self.peek()):
                self.advance()
                self.advance()
                return []
            save = self.i
            self.advance()
            items = [self.expr()]
            while self.accept_op(","):
                items.append(self.expr())
            if self.accept_op(")") and (self.is_op(",") or self.is_op(")")):
                return items
            self.i = save                # "(a + b) * 2": one expression after all
        return [self.expr()]

    def rollup_cube(self):
        """ROLLUP (a, (b, c), ...) -> n + 1 sets; CUBE (...) -> 2**n sets."""
        kind = self.advance().value.upper()
        self.expect_op("(")
        items = [self.set_item()]
        while self.accept_op(","):
            items.append(self.set_item())
        self.expect_op(")")
        return _rollup(items) if kind == "ROLLUP" else _cube(items)

    def select_item(self):
        if self.is_op("*"):
            self.advance()
            return A.Item(A.Star(None), None, None)
        if self.tok.kind == "var" and self.is_op("=", tok=self.peek()):
            var = self.advance().value.lower()
            self.advance()
            return A.Item(self.expr(), None, var)
        # alias = expr
        if self.is_ident() and self.is_op("=", tok=self.peek()) and self.tok.kind in ("qid", "word"):
            alias = self.advance().value
            self.advance()
            return A.Item(self.expr(), alias, None)
        if self.tok.kind == "str" and self.is_op("=", tok=self.peek()):
            alias = self.advance().value
            self.advance()
            return A.Item(self.expr(), alias, None)
        # alias.*
        if self.is_ident():
            j = self.i
            parts = []
            while self.is_ident(self.toks[j]) and self.is_op(".", tok=self.toks[j + 1]):
                parts.append(self.toks[j].value)
                j += 2
            if parts and self.is_op("*", tok=self.toks[j]):
                self.i = j + 1
                return A.Item(A.Star(parts), None, None)
        e = self.expr()
        alias = None
        if self.accept_word("AS"):
            t = self.advance()
            if t.kind not in ("qid", "word", "str"):
                self.fail()
            alias = t.value
        elif self.tok.kind in ("qid", "str") or (self.tok.kind == "word" and self.tok.value.upper() not in _RESERVED):
            alias = self.advance().value
        return A.Item(e, alias, None)

    def from_list(self):
        node = self.join_chain()
        while self.accept_op(","):
            node = A.Join("CROSS", node, self.join_chain(), None)
        return node

    def join_chain(self):
        node = self.table_source()
        while True:
            kind = None
            if self.accept_word("JOIN"):
                kind = "INNER"
            elif self.is_word("INNER") and self.is_word("JOIN", tok=self.peek()):
                self.advance()
                self.advance()
                kind = "INNER"
            elif self.is_word("LEFT", "RIGHT", "FULL"):
                kind = self.advance().value.upper()
                self.accept_word("OUTER")
                self.expect_word("JOIN")
            elif self.is_word("CROSS") and self.is_word("JOIN", tok=self.peek()):
                self.advance()
                self.advance()
                node = A.Join("CROSS", node, self.table_source(), None)
                continue
            if kind is None:
                return node
            right = self.table_source()
            self.expect_word("ON")
            node = A.Join(kind, node, right, self.expr())

    def table_source(self):
        if self.is_op("("):
            self.advance()
            if not self.is_word("SELECT") and not self.is_op("("):
                self.fail()
            sel = self.select_expr()
            self.expect_op(")")
            alias = self.table_alias()
            if alias is None:
                self.fail()
            return A.Derived(sel, alias)
        if self.tok.kind == "var":
            name = "@" + self.advance().value.lower()
            return A.TableRef([name], self.table_alias(), None)
        parts = self.multipart()
        args = None
        if self.accept_op("("):
            args = []
            if not self.is_op(")"):
                args.append(self.expr())
                while self.accept_op(","):
                    args.append(self.expr())
            self.expect_op(")")
        alias = self.table_alias()
        if self.is_word("WITH") and self.is_op("(", tok=self.peek()):
            self.advance()
            self.advance()
            while not self.is_op(")"):
                if self.tok.kind == "eof":
                    self.fail()
                self.advance()
            self.advance()
        return A.TableRef(parts, alias, args)

    def table_alias(self):
        if self.accept_word("AS"):
            return self.ident()
        if self.tok.kind == "qid" or (self.tok.kind == "word" and self.tok.value.upper() not in _RESERVED
                                      and self.tok.value.upper() not in ("WITH",)):
            return self.advance().value
        return None

    # --- expressions -------------------------------------------------------------

    def expr(self):
        e = self.and_expr()
        while self.accept_word("OR"):
            e = A.Bin("OR", e, self.and_expr())
        return e

    def and_expr(self):
        e = self.not_expr()
        while self.accept_word("AND"):
            e = A.Bin("AND", e, self.not_expr())
        return e

    def not_expr(self):
        if self.accept_word("NOT"):
            return A.Not(self.not_expr())
        return self.predicate()

    def predicate(self):
        if self.is_word("EXISTS"):
            self.advance()
            self.expect_op("(")
            sub = self.select_expr()
            self.expect_op(")")
            return A.Exists(sub)
        e = self.additive()
        while True:
            if self.tok.kind == "op" and self.tok.value in _CMP:
                op = self.advance().value
                op = {"!=": "<>", "!<": ">=", "!>": "<="}.get(op, op)
                e = A.Bin(op, e, self.additive())
                continue
            if self.is_word("IS"):
                self.advance()
                neg = bool(self.accept_word("NOT"))
                self.expect_word("NULL")
                e = A.IsNull(e, neg)
                continue
            neg = False
            if self.is_word("NOT") and self.is_word("IN", "BETWEEN", "LIKE", tok=self.peek()):
                self.advance()
                neg = True
            if self.accept_word("IN"):
                self.expect_op("(")
                if self.is_word("SELECT"):
                    e = A.InList(e, None, self.select_expr(), neg)
                else:
                    items = [self.expr()]
                    while self.accept_op(","):
                        items.append(self.expr())
                    e = A.InList(e, items, None, neg)
                self.expect_op(")")
                continue
            if self.accept_word("BETWEEN"):
                lo = self.additive()
                self.expect_word("AND")
                e = A.Between(e, lo, self.additive(), neg)
                continue
            if self.accept_word("LIKE"):
                e = A.Like(e, self.additive(), neg)
                continue
            if neg:
                self.fail()
            return e

    def additive(self):
        e = self.multiplicative()
        while self.tok.kind == "op" and self.tok.value in ("+", "-", "&", "|", "^"):
            op = self.advance().value
            e = A.Bin(op, e, self.multiplicative())
        return e

    def multiplicative(self):
        e = self.unary()
        while self.tok.kind == "op" and self.tok.value in ("*", "/", "%"):
            op = self.advance().value
            e = A.Bin(op, e, self.unary())
        return e

    def unary(self):
        if self.tok.kind == "op" and self.tok.value in ("-", "+", "~"):
            op = self.advance().value
            inner = self.unary()
            if op == "-" and isinstance(inner, A.Lit) and inner.kind in ("int", "float"):
                return A.Lit(inner.kind, -inner.value)
            if op == "-" and isinstance(inner, A.Lit) and inner.kind == "num":
                return A.Lit("num", "-" + inner.value)
            return A.Unary(op, inner)
        e = self.primary()
        while self.is_word("COLLATE"):
            self.advance()
            self.ident()
        return e

    def primary(self):
        t = self.tok
        k = t.kind
        if k in ("int", "num", "float", "str", "nstr", "hex"):
            self.advance()
            return A.Lit(k, t.value)
        if k == "var":
            self.advance()
            return A.Var(t.value.lower())
        if k == "sysvar":
            self.advance()
            return A.SysVar(t.value.upper())
        if k == "op" and t.value == "(":
            self.advance()
            if self.is_word("SELECT"):
                sel = self.select_expr()
                self.expect_op(")")
                return A.SubQ(sel)
            e = self.expr()
            self.expect_op(")")
            return e
        if k == "word":
            w = t.value.upper()
            if w == "NULL":
                self.advance()
                return A.Lit("null", None)
            if w == "CASE":
                return self.case()
            if w in ("CAST", "TRY_CAST") and self.is_op("(", tok=self.peek()):
                self.advance()
                self.advance()
                e = self.expr()
                self.expect_word("AS")
                tt = self.type_name()
                self.expect_op(")")
                return A.Cast(e, tt, None)
            if w in ("CONVERT", "TRY_CONVERT") and self.is_op("(", tok=self.peek()):
                self.advance()
                self.advance()
                tt = self.type_name()
                self.expect_op(",")
                e = self.expr()
                style = None
                if self.accept_op(","):
                    style = self.expr()
                self.expect_op(")")
                return A.Cast(e, tt, style)
            if w in ("CURRENT_TIMESTAMP", "CURRENT_USER", "SESSION_USER", "SYSTEM_USER", "USER"):
                self.advance()
                return A.Call([w], [], False, False, None)
        if k in ("word", "qid"):
            if k == "word" and t.value.upper() in _RESERVED:
                self.fail()
            parts = self.multipart()
            if self.is_op("("):
                return self.call(parts)
            return A.Name(parts)
        self.fail()

    def call(self, parts):
        self.expect_op("(")
        fname = parts[-1].upper()
        args, distinct, star = [], False, False
        if self.is_op("*"):
            self.advance()
            star = True
        elif not self.is_op(")"):
            if self.accept_word("DISTINCT"):
                distinct = True
            if fname in _DATEPART_FUNCS and len(parts) == 1 and self.tok.kind == "word":
                args.append(A.Keyword(self.advance().value.upper()))
                if not self.is_op(")"):
                    self.expect_op(",")
                    args.append(self.expr())
            else:
                args.append(self.expr())
            while self.accept_op(","):
                args.append(self.expr())
        self.expect_op(")")
        over = None
        if self.accept_word("OVER"):
            self.expect_op("(")
            part, order = None, None
            if self.accept_word("PARTITION"):
                self.expect_word("BY")
                part = [self.expr()]
                while self.accept_op(","):
                    part.append(self.expr())
            if self.accept_word("ORDER"):
                self.expect_word("BY")
                order = self.order_list()
            self.expect_op(")")
            over = A.Over(part, order)
        return A.Call(parts, args, distinct, star, over)

    def case(self):
        self.expect_word("CASE")
        operand = None
        if not self.is_word("WHEN"):
            operand = self.expr()
        whens = []
        while self.accept_word("WHEN"):
            c = self.expr()
            self.expect_word("THEN")
            whens.append((c, self.expr()))
        if not whens:
            self.fail()
        else_ = None
        if self.accept_word("ELSE"):
            else_ = self.expr()
        self.expect_word("END")
        return A.Case(operand, whens, else_)


def _rollup(items):
    """ROLLUP(i1, ..., in): (i1..in), (i1..in-1), ..., ()."""
    return [[e for it in items[:k] for e in it] for k in range(len(items), -1, -1)]


def _cube(items):
    """CUBE(i1, ..., in): every subset, the full set first and () last."""
    n = len(items)
    out = []
    for mask in range(2 ** n - 1, -1, -1):
        out.append([e for k, it in enumerate(items) if mask >> (n - 1 - k) & 1 for e in it])
    return out


def parse_batch(src):
    """T-SQL batch text -> list of statement nodes (Msg 102/105 on syntax errors)."""
    return Parser(src).statements()


def parse_type_text(text):
    """Used by sp_executesql's @params: '@a int, @b binary(10) OUTPUT' -> [(name, type_text, output)]."""
    p = Parser(text)
    out = []
    while p.tok.kind != "eof":
        if p.tok.kind != "var":
            p.fail()
        name = p.advance().value.lower()
        p.accept_word("AS")
        tt = p.type_name()
        output = bool(p.accept_word("OUTPUT", "OUT"))
        if p.accept_op("="):
            p.expr()
        out.append((name, tt, output))
        if not p.accept_op(","):
            break
    if p.tok.kind != "eof":
        p.fail()
    return out
