"""AST node classes for the supported T-SQL subset (plain records, no behaviour)."""


class Node:
    __slots__ = ()

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__))


def _node(name, fields):
    fields = tuple(fields.split())

    def init(self, *args, **kw):
        for f, a in zip(fields, args):
            setattr(self, f, a)
        for f in fields[len(args):]:
            setattr(self, f, kw.pop(f, None))
    return type(name, (Node,), {"__slots__": fields, "__init__": init})


# expressions
Lit = _node("Lit", "kind value")                  # kind: int num float str nstr hex null
Var = _node("Var", "name")
SysVar = _node("SysVar", "name")
Name = _node("Name", "parts")                      # column reference, multi-part
Star = _node("Star", "qualifier")                  # * or alias.*
Call = _node("Call", "parts args distinct star over")
Over = _node("Over", "partition order")
Unary = _node("Unary", "op expr")
Bin = _node("Bin", "op left right")                # arithmetic, comparison, AND, OR
Not = _node("Not", "expr")
IsNull = _node("IsNull", "expr negated")
InList = _node("InList", "expr items subquery negated")
Between = _node("Between", "expr low high negated")
Like = _node("Like", "expr pattern negated")
Exists = _node("Exists", "subquery")
Case = _node("Case", "operand whens else_")
Cast = _node("Cast", "expr type_text style")
SubQ = _node("SubQ", "select")
Keyword = _node("Keyword", "word")                 # DATEPART(TZOFFSET, ...) first argument

# SELECT
Select = _node("Select", "distinct top items from_ where group having order offset fetch unions text gsets ctes")
# gsets: GROUP BY GROUPING SETS / ROLLUP / CUBE / () expanded to a list of grouping sets (lists of
# expressions); None for a plain GROUP BY list (in ``group``)
# ctes: the WITH clause's common table expressions (list of Cte) on the statement's outermost SELECT
Cte = _node("Cte", "name columns select")
Item = _node("Item", "expr alias assign")
TableRef = _node("TableRef", "parts alias args")   # args not None => table-valued function
Derived = _node("Derived", "select alias")
Join = _node("Join", "kind left right on")

# statements
SelectStmt = _node("SelectStmt", "select text")
ExecStmt = _node("ExecStmt", "parts args dynamic text ret")  # args: [(name|None, expr|'DEFAULT', output)];
#                                                             ret: variable of EXEC @ret = proc, or None
Declare = _node("Declare", "decls text")                     # [(name, type_text, expr|None)]
SetVar = _node("SetVar", "name expr text")
SetOption = _node("SetOption", "words text")
Use = _node("Use", "database text")
Print = _node("Print", "expr text")
WaitFor = _node("WaitFor", "delay text")
Tran = _node("Tran", "action text name")                     # BEGIN / COMMIT / ROLLBACK / SAVE [name]
If = _node("If", "cond then else_ text")                     # IF cond stmt [ELSE stmt]
Block = _node("Block", "stmts text")                         # BEGIN stmt ... END
DeclareTable = _node("DeclareTable", "name columns text")    # DECLARE @t TABLE (...): [(name, type_text, nullable)]
InsertVar = _node("InsertVar", "name columns source text")   # INSERT [INTO] @t [(cols)] EXEC ... | SELECT ... | VALUES
AlterDb = _node("AlterDb", "database option value text")     # ALTER DATABASE d SET option ON|OFF
Unsupported = _node("Unsupported", "keyword text")
# CREATE/DROP LOGIN|USER|ROLE, ALTER ROLE, GRANT/REVOKE: action such as 'CREATE LOGIN'; args: dict
Security = _node("Security", "action args text")
