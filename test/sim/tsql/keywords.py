"""Keyword sets the T-SQL parser modules share."""
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
