"""Helpers shared by the simulator's tests (kept out of conftest.py, whose module name other suites share)."""


def one(sim, sql):
    """The single value of a one-row, one-column query."""
    cur = sim.control().cursor()
    cur.execute(sql)
    rows = cur.fetchall()
    assert len(rows) == 1 and len(rows[0]) == 1, rows
    return rows[0][0]
