"""SQL Server-shaped errors raised anywhere in the simulator."""


class SqlError(Exception):
    """An error that is sent to the client as an ERROR token.

    Carries SQL Server's number, class (severity) and state so the client sees
    exactly what a real server would send; ``batch_abort`` marks errors that end
    the whole batch instead of only the current statement."""

    def __init__(self, number, message, cls=16, state=1, batch_abort=False, line=1, proc="", preceding=()):
        super().__init__(message)
        self.preceding = list(preceding)     # errors SQL Server sends first for the same failure (300 before 297)
        self.number = number
        self.message = message
        self.cls = cls
        self.state = state
        self.batch_abort = batch_abort
        self.line = line
        self.proc = proc


def syntax_error(near):
    """Msg 102, SQL Server's generic parse error, naming the offending text."""
    return SqlError(102, "Incorrect syntax near '%s'." % near, 15, 1, batch_abort=True)


def invalid_object(name):
    """Msg 208 for a table/view/function name that does not resolve."""
    return SqlError(208, "Invalid object name '%s'." % name, 16, 1)


def invalid_column(name):
    """Msg 207 for a column name that does not resolve."""
    return SqlError(207, "Invalid column name '%s'." % name, 16, 1)


def permission_denied(obj, database, schema, perm="SELECT"):
    """Msg 229, the shape SQL Server uses for object permission failures."""
    return SqlError(229, "The %s permission was denied on the object '%s', database '%s', schema '%s'."
                    % (perm, obj, database, schema), 14, 5)


def insufficient_args(func):
    """Msg 313, which CDC functions raise for bad LSN bounds or options."""
    return SqlError(313, "An insufficient number of arguments were supplied for the procedure or function %s."
                    % func, 16, 3)


class ClientGone(Exception):
    """The client closed the socket (or it broke) while we were talking to it."""


class Attention(Exception):
    """The client sent an ATTENTION packet: stop the current request."""
