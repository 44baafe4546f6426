"""Parser part: common table expressions, ``WITH name [(columns)] AS (query) [, ...] SELECT ...``
(learn.microsoft.com, "WITH common_table_expression")."""
from . import ast as A


class CteParser:
    """Mixin of Parser: the WITH clause in front of a SELECT."""

    # --- WITH common_table_expression ---------------------------------------------------

    def with_statement(self):
        """WITH cte [, ...] followed by the SELECT they belong to; the CTEs hang on that SELECT
        (``Select.ctes``).  A CTE in front of INSERT/UPDATE/DELETE/MERGE parses but stays unsupported, as
        those statements are."""
        self.expect_word("WITH")
        ctes = [self.cte()]
        while self.accept_op(","):
            ctes.append(self.cte())
        if self.is_word("INSERT", "UPDATE", "DELETE", "MERGE"):
            w = self.tok.value.upper()
            while self.tok.kind != "eof" and not self.is_op(";"):
                self.advance()
            return A.Unsupported(w)
        if not self.is_word("SELECT") and not self.is_op("("):
            self.fail()
        sel = self.select_expr()
        sel.ctes = ctes
        return A.SelectStmt(sel)

    def cte(self):
        """expression_name [(column_name [, ...])] AS (CTE_query_definition)."""
        name = self.ident()
        columns = None
        if self.accept_op("("):
            columns = [self.ident()]
            while self.accept_op(","):
                columns.append(self.ident())
            self.expect_op(")")
        self.expect_word("AS")
        self.expect_op("(")
        sel = self.select_expr()
        self.expect_op(")")
        return A.Cte(name, columns, sel)
