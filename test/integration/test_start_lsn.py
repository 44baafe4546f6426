"""Tracking a table from an LSN (track_table's start_from): a lake's copy made up to some LSN
(a Debezium snapshot's commit_lsn, in either text form) is continued exactly from there. The
facts begin right after it and count exactly the changes SQL Server committed after it; an LSN
SQL Server cannot continue from (changes after it cleaned up, or one it has not reached) records
nothing and says why; a mangled one is refused at once, naming the table."""

import psycopg2
import pytest

from worker_env import at, lsn_text, new_cluster, sim_max_lsn


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster()
    yield cluster
    cluster.cleanup()


def debezium_form(lsn):
    """0x0000002A00000100016D as Debezium's source.commit_lsn writes it: 0000002a:00000100:016d."""
    h = lsn[2:].lower()
    return f"{h[:8]}:{h[8:16]}:{h[16:]}"


def commits_after(sim, lsn):
    """Inserts, updates and deletes SQL Server committed to dbo.orders after an LSN (ground truth)."""
    rows = sim.call("sim.truth_commits", table="dbo.orders", **{"from": at(0, 0), "to": at(23, 0)})[0]
    after = [r for r in rows if lsn_text(r["commit_lsn"]) > lsn]
    return (sum(r["inserts"] for r in after), sum(r["updates"] for r in after), sum(r["deletes"] for r in after))


def test_facts_begin_right_after_the_lsn_the_lake_copy_ends_at(env, sim):
    sim.call("sim.commit", inserts=3, at=at(9, 5))
    sim.call("sim.advance", to=at(9, 10))
    snapshot = sim_max_lsn(sim)                        # the copy holds everything up to here
    sim.call("sim.commit", inserts=2, at=at(9, 20))
    sim.call("sim.commit", updates=1, deletes=1, at=at(9, 40))
    sim.call("sim.advance", to=at(10, 0, 30))
    env.add_source("erp", sim)
    env.track("boot.orders", "erp", start_from=debezium_form(snapshot))
    assert env.one("SELECT start_from FROM finalize.tracked_table WHERE table_name = 'boot.orders'") == snapshot
    env.wait_caught_up("boot.orders", sim)
    facts = env.facts("boot.orders")
    assert facts[0]["event"] == "tracking_started" and facts[0]["start_lsn"] is None
    assert facts[0]["end_lsn"] == snapshot, "the first fact marks where the lake's copy ends"
    # Its commit time is where the facts' coverage of periods starts: never before the changes they
    # count (finalize does not read the LSN's own commit time, so it takes the first cycle's).
    assert facts[0]["end_commit_time"] >= at(9, 40)
    ranges = [f for f in facts[1:]]
    assert ranges and ranges[0]["start_lsn"] == snapshot
    counted = (sum(f["inserts"] for f in ranges), sum(f["updates"] for f in ranges),
               sum(f["deletes"] for f in ranges))
    assert counted == commits_after(sim, snapshot) == (2, 1, 1), counted
    assert env.status("boot.orders")["condition"] is None
    assert env.status("boot.orders")["finalized_until"] == at(10, 0)


def test_an_lsn_whose_following_changes_were_cleaned_up_records_nothing(env, sim):
    sim.call("sim.commit", inserts=1, at=at(9, 5))
    sim.call("sim.advance", to=at(9, 10))
    old = sim_max_lsn(sim)
    sim.call("sim.commit", inserts=4, at=at(9, 20))
    sim.call("sim.advance", to=at(9, 30))
    sim.call("sim.cleanup", low_lsn=sim.query("SELECT sys.fn_cdc_get_max_lsn() AS m")[0]["m"])
    env.add_source("erp", sim)
    env.track("boot.stale", "erp", start_from=old)
    st = env.wait_status("boot.stale", lambda s: s.get("condition") == "start_unreadable", what="start_unreadable")
    assert old in st["condition_detail"] and "below the start LSN" in st["condition_detail"], st
    assert "Take a new copy" in st["condition_detail"]
    assert env.facts("boot.stale") == [] and st["finalized_until"] is None


def test_an_lsn_beyond_max_lsn_records_nothing_until_sql_server_passes_it(env, sim):
    sim.call("sim.commit", inserts=1, at=at(9, 5))
    sim.call("sim.advance", to=at(9, 10))
    ahead = "0x%020X" % (int(sim_max_lsn(sim), 16) + (1 << 40))
    env.add_source("erp", sim)
    env.track("boot.ahead", "erp", start_from=ahead)
    st = env.wait_status("boot.ahead", lambda s: s.get("condition") == "start_unreadable", what="start_unreadable")
    assert "beyond SQL Server's max LSN" in st["condition_detail"] and ahead in st["condition_detail"], st
    assert env.facts("boot.ahead") == [] and st["finalized_until"] is None


@pytest.mark.parametrize("value", ["0x1234", "0000002a:00000100", "0000002a-00000100-016d", "latest", ""])
def test_a_mangled_start_lsn_is_refused_naming_the_table(env, sim, value):
    env.add_source("erp", sim)
    with pytest.raises(psycopg2.errors.InvalidParameterValue) as e:
        env.track("boot.bad", "erp", start_from=value)
    assert 'start_from of table "boot.bad"' in str(e.value) or value == "", e.value
    assert env.one("SELECT count(*) FROM finalize.tracked_table WHERE table_name = 'boot.bad'") == 0
