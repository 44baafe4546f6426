"""T-SQL subset: lexer -> parser (AST) -> translator to sqlite with result types."""
