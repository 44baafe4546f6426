"""Parser part: GROUP BY lists, GROUPING SETS, ROLLUP and CUBE."""


class GroupParser:
    """Mixin of Parser: the GROUP BY clause."""

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
