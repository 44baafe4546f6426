"""Recursive-descent parser for the supported T-SQL subset.

A batch is parsed whole before anything runs, as SQL Server compiles a batch:
a syntax error anywhere fails the batch with Msg 102 and runs nothing.
Statements may be separated by ';' or simply follow each other."""
from . import ast as A
from .lexer import tokenize
from ..errors import syntax_error
from .keywords import _RESERVED, _STMT_START
from .parse_cte import CteParser
from .parse_expr import ExprParser
from .parse_group import GroupParser
from .parse_security import SecurityParser
from .parse_stmt import StmtParser


class Parser(StmtParser, SecurityParser, GroupParser, ExprParser, CteParser):
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
            return self.with_statement()
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
