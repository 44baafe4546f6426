"""Parser part: expressions (boolean, predicates, arithmetic, primaries, calls, CASE)."""
from . import ast as A
from .keywords import _CMP, _DATEPART_FUNCS, _RESERVED


class ExprParser:
    """Mixin of Parser: scalar and boolean expressions."""

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
