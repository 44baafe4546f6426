"""Parser part: transaction statements, DECLARE @t TABLE, INSERT into a table variable, ALTER DATABASE."""
from . import ast as A
from .keywords import _RESERVED, _STMT_START


class StmtParser:
    """Mixin of Parser: the smaller statements."""

    # --- smaller statements ---------------------------------------------------------

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
