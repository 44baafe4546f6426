"""Parser part: the security statements (CREATE/DROP LOGIN|USER|ROLE, ALTER ROLE, GRANT/REVOKE)."""
from . import ast as A


class SecurityParser:
    """Mixin of Parser: security statements."""

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
        """CREATE LOGIN name WITH PASSWORD = '...' [MUST_CHANGE] [, option = value ...], or
        CREATE LOGIN [DOMAIN\\user] FROM WINDOWS [WITH DEFAULT_DATABASE = db [, DEFAULT_LANGUAGE = l]]."""
        name = self.principal()
        opts = {}
        if self.accept_word("FROM"):
            self.expect_word("WINDOWS")
            if self.accept_word("WITH"):
                while True:
                    key = self.ident().upper()
                    if key not in ("DEFAULT_DATABASE", "DEFAULT_LANGUAGE"):
                        self.fail()
                    self.expect_op("=")
                    opts[key] = self.option_value()
                    if not self.accept_op(","):
                        break
            return A.Security("CREATE LOGIN", {"name": name, "options": opts, "windows": True})
        self.expect_word("WITH")
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
