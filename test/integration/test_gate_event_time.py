"""The release gate on event-time tables (issue 14): a partition holds an
event period, so the gate judges it by the event-time facts. A period final
in commit time but still inside the lateness allowance is not_finalized; an
intentionally empty partition is confirmed by the rows per event period, not
by what was committed in that hour; and a period that received late rows
after its previous generation was released is refused (late_data) until a
generation says, by its manifest's "built_at", that it was read after them.

The facts are recorded by hand through the write path (finalize.record_range
with event_periods), as test_gate_file.py does for commit-time tables; the
worker is off in this cluster. A commit-time table with the same commits
stands beside the event-time one for contrast."""

import datetime
import json
import os

import psycopg2
import pytest

from storefiles import write_file as write
from pgcluster import cluster_with_source

EV = "g.ev"        # partitioned by created_at, 10 minutes of allowed lateness
CT = "g.ct"        # the same commits, partitioned by commit time
DAY = "2026-11-28"


def at(hhmm):
    return f"{DAY} {hhmm}+00"


def lsn(n):
    return f"0x{n:020X}"


@pytest.fixture(scope="module")
def pg():
    cluster = cluster_with_source({"finalize.enabled": "off"})
    yield cluster
    cluster.cleanup()


def record(pg, table, n, end, inserts=0, first=None, last=None, periods=None, first_event=None, last_event=None):
    """Records range (lsn(n - 1), lsn(n)] (the first range starts at NULL); for
    the event-time table with its rows per event period, for the commit-time
    table with the same counts and commit times only."""
    start = lsn(n - 1) if n > 1 else None
    if table == EV:
        pg.sql("SELECT finalize.record_range(%s, %s, %s, %s, %s, 0, 0, %s, %s, event_periods => %s, "
               "first_event_time => %s, last_event_time => %s)",
               (table, start, lsn(n), end, inserts, first, last,
                json.dumps(periods) if periods is not None else None, first_event, last_event))
    else:
        pg.sql("SELECT finalize.record_range(%s, %s, %s, %s, %s, 0, 0, %s, %s)",
               (table, start, lsn(n), end, inserts, first, last))


@pytest.fixture
def tables(pg):
    """Both tables with the same commits:
      - up to 06:00 nothing (tracking starts; event hours before 07:00 are
        not covered, by the hour of clock skew an event may run ahead);
      - 3 rows committed 08:40-08:50 with created_at in hour 08;
      - 2 rows committed 12:01-12:02 with created_at in hour 10 (nothing is
        committed in hours 09, 10 and 11);
      - capture has passed 12:05: the commit-time verdict is 12:00, the
        event-time verdict 12:00 - 10 minutes, in whole hours 11:00.
    Event hours 08 (3 rows), 09 (none) and 10 (2 rows) are final, 11 is not;
    in commit time 08 (3), 09, 10, 11 (none) are final."""
    pg.sql("SELECT finalize.track_table(%s, 'src', 'dbo.orders', event_time_column => 'created_at', "
           "allowed_lateness => '10 minutes')", (EV,))
    pg.sql("SELECT finalize.track_table(%s, 'src', 'dbo.orders')", (CT,))
    for t in (EV, CT):
        record(pg, t, 1, at("06:00"))
        record(pg, t, 2, at("09:00"), 3, at("08:40"), at("08:50"),
               [{"period": f"{DAY}T08:00:00Z", "inserts": 3}], at("08:05"), at("08:45"))
        record(pg, t, 3, at("12:05"), 2, at("12:01"), at("12:02"),
               [{"period": f"{DAY}T10:00:00Z", "inserts": 2}], at("10:20"), at("10:30"))
    assert pg.sql("SELECT t.table_name, w.finalized_until, w.commit_until FROM finalize.watermark w "
                  "JOIN finalize.tracked_table t USING (table_id) ORDER BY 1") == [
        (CT, ts("12:00"), ts("12:00")), (EV, ts("11:00"), ts("12:00"))]
    yield
    pg.sql("DELETE FROM finalize.tracked_table")


def ts(hhmm):
    h, m = hhmm.split(":")
    return datetime.datetime(2026, 11, 28, int(h), int(m), tzinfo=datetime.timezone.utc)


def partition(hour):
    return f"day=28/hour={hour}"


def publish(pg, root, table, hour, generation, n=2, register=True):
    """Writes n objects of a generation under the table's own prefix and
    (unless told otherwise) registers that prefix; the manifest's files."""
    prefix = f"{table}/{partition(hour)}/{generation}/"
    files = {}
    for i in range(n):
        path = f"{prefix}part-{i:05d}.parquet"
        data = f"{table}:{hour}:{generation}:{i}".encode() * (i + 1)
        write(root, path, data)
        files[path] = len(data)
    if n == 0:
        os.makedirs(os.path.join(root, prefix), mode=0o755, exist_ok=True)
        d = os.path.join(root, prefix)
        while d.rstrip("/") != root:
            os.chmod(d, 0o755)
            d = os.path.dirname(d.rstrip("/"))
    if register:
        pg.sql("SELECT finalize.register_partition(%s, %s, %s)", (table, partition(hour), prefix))
    return files


def manifest(root, table, hour, generation, files, **extra):
    m = {"table": table, "partition": partition(hour), "generation": generation,
         "store": "file://" + root, "prefix": f"{table}/{partition(hour)}/{generation}/",
         "period_start": at(f"{hour}:00"), "files": files}
    m.update(extra)
    return m


def gate(pg, m):
    (released, generation, problems), = pg.sql("SELECT * FROM finalize.release_gate(%s)", (json.dumps(m),))
    return released, generation, problems


def codes(problems):
    return sorted(p["code"] for p in problems)


def detail(problems, code):
    found = [p["detail"] for p in problems if p["code"] == code]
    assert len(found) == 1, problems
    return found[0]


def published(pg, table, hour):
    return pg.sql("SELECT finalize.released_generation(%s, %s)", (table, partition(hour)))[0][0]


def last_report(pg):
    return pg.sql("SELECT report FROM finalize.release ORDER BY release_id DESC LIMIT 1")[0][0]


def iso(t):
    return t.astimezone(datetime.timezone.utc).isoformat()


# --- (a) final in commit time, not in event time ---

def test_a_period_final_in_commit_time_but_inside_the_allowance_is_not_finalized(pg, tables, store):
    # Hour 11: the commit-time verdict (12:00) has passed its end, but not its end plus 10 minutes.
    assert pg.sql("SELECT finalize.is_final(%s, %s), finalize.is_final(%s, %s)",
                  (CT, at("11:00"), EV, at("11:00"))) == [(True, False)]
    files = publish(pg, store, EV, "11", "gen-1")
    released, generation, problems = gate(pg, manifest(store, EV, "11", "gen-1", files))
    assert (released, generation) == (False, "gen-1")
    assert codes(problems) == ["not_finalized"]
    why = detail(problems, "not_finalized")
    assert "event time" in why and '"created_at"' in why, why
    assert "2026-11-28 12:10:00+00" in why, why          # where the commit-time verdict must reach
    facts = last_report(pg)["facts"]
    assert facts["partitioned_by"] == "event_time" and facts["is_final"] is False
    assert published(pg, EV, "11") is None

    # The commit-time table with the same commits releases its hour 11.
    ct_files = publish(pg, store, CT, "11", "gen-1")
    assert gate(pg, manifest(store, CT, "11", "gen-1", ct_files)) == (True, "gen-1", [])

    # A range to 12:09 keeps the commit-time verdict at 12:00 (whole hours): still not final.
    record(pg, EV, 4, at("12:09"))
    released, _, problems = gate(pg, manifest(store, EV, "11", "gen-1", files))
    assert not released and codes(problems) == ["not_finalized"]

    # Once capture passes 13:00, 12:00 + 10 minutes is behind the verdict: released.
    record(pg, EV, 5, at("13:05"))
    assert pg.sql("SELECT finalize.is_final(%s, %s)", (EV, at("11:00"))) == [(True,)]
    assert gate(pg, manifest(store, EV, "11", "gen-1", files)) == (True, "gen-1", [])
    assert published(pg, EV, "11") == "gen-1"
    facts = last_report(pg)["facts"]
    assert facts["partitioned_by"] == "event_time" and facts["is_final"] is True and facts["inserts"] == 0


def test_a_final_event_period_is_released_with_its_event_facts(pg, tables, store):
    # Hour 08 holds the 3 rows by event time; hour 12 holds the 2 rows by commit time only.
    files = publish(pg, store, EV, "08", "gen-1")
    assert gate(pg, manifest(store, EV, "08", "gen-1", files)) == (True, "gen-1", [])
    facts = last_report(pg)["facts"]
    assert (facts["inserts"], facts["late_rows"], facts["covered"], facts["exact"]) == (3, 0, True, True)
    files = publish(pg, store, EV, "10", "gen-1")
    assert gate(pg, manifest(store, EV, "10", "gen-1", files)) == (True, "gen-1", [])
    assert last_report(pg)["facts"]["inserts"] == 2


# --- (b) intentionally empty partitions ---

def test_an_empty_event_period_is_released_when_the_event_facts_confirm_it(pg, tables, store):
    # Hour 09: no row has its created_at there; covered and final.
    publish(pg, store, EV, "09", "g", n=0)
    m = manifest(store, EV, "09", "g", {})
    released, _, problems = gate(pg, m)
    assert not released and codes(problems) == ["empty_location"]      # not said to be empty
    assert gate(pg, dict(m, empty=True)) == (True, "g", [])
    assert published(pg, EV, "09") == "g"
    facts = last_report(pg)["facts"]
    assert (facts["inserts"], facts["covered"], facts["is_final"]) == (0, True, True)


def test_an_empty_partition_is_refused_when_rows_carry_its_event_period(pg, tables, store):
    # Hour 10: nothing was committed between 09:00 and 12:01, but 2 rows have created_at in hour 10.
    assert pg.sql("SELECT inserts FROM finalize.changes_by_period(%s, %s, %s)",
                  (CT, at("10:00"), at("11:00"))) == [(0,)]
    publish(pg, store, EV, "10", "g", n=0)
    released, _, problems = gate(pg, manifest(store, EV, "10", "g", {}, empty=True))
    assert released is False
    assert codes(problems) == ["empty_location"]
    why = detail(problems, "empty_location")
    assert "2 change(s)" in why and "cannot be empty" in why, why
    assert published(pg, EV, "10") is None
    # The commit-time table's hour 10 is empty indeed: released.
    publish(pg, store, CT, "10", "g", n=0)
    assert gate(pg, manifest(store, CT, "10", "g", {}, empty=True)) == (True, "g", [])


def test_an_empty_partition_needs_coverage_and_finality(pg, tables, store):
    # Hour 06: final, no rows, but tracking began at 06:00 and an event may run an hour ahead of its commit.
    facts = pg.sql("SELECT is_final, covered, inserts FROM finalize.changes_by_event_period(%s, %s, %s)",
                   (EV, at("06:00"), at("07:00")))
    assert facts == [(True, False, 0)]
    publish(pg, store, EV, "06", "g", n=0)
    released, _, problems = gate(pg, manifest(store, EV, "06", "g", {}, empty=True))
    assert released is False and codes(problems) == ["empty_location"]
    assert "do not cover" in detail(problems, "empty_location")
    # Hour 11: covered, no rows, but not final in event time.
    publish(pg, store, EV, "11", "g", n=0)
    released, _, problems = gate(pg, manifest(store, EV, "11", "g", {}, empty=True))
    assert released is False and "not_finalized" in codes(problems)
    assert "event time" in detail(problems, "not_finalized")
    assert published(pg, EV, "06") is None and published(pg, EV, "11") is None


# --- (c) late data ---

def late_rows(pg, n, end, commit, periods):
    """Records range n with rows committed at commit whose event periods are given as {hour: rows}."""
    total = sum(periods.values())
    record(pg, EV, n, end, total, commit, commit,
           [{"period": f"{DAY}T{h}:30:00Z", "inserts": r} for h, r in sorted(periods.items())],
           at(f"{min(periods)}:30"), at(f"{max(periods)}:30"))
    record(pg, CT, n, end, total, commit, commit)


def last_seen(pg, hour):
    return pg.sql("SELECT last_seen FROM finalize.late_data WHERE table_name = %s AND event_period = %s",
                  (EV, at(f"{hour}:00")))[0][0]


def test_late_rows_after_a_release_need_a_generation_built_after_them(pg, tables, store):
    files1 = publish(pg, store, EV, "08", "g1")
    assert gate(pg, manifest(store, EV, "08", "g1", files1)) == (True, "g1", [])
    (g1_at,) = pg.sql("SELECT published_at FROM finalize.published p JOIN finalize.tracked_table t "
                      "USING (table_id) WHERE t.table_name = %s", (EV,))[0]

    # Two rows with created_at in hour 08, committed at 12:15: hour 08 was final, so they are late.
    late_rows(pg, 4, at("12:20"), at("12:15"), {"08": 2})
    assert pg.sql("SELECT rows FROM finalize.late_data WHERE table_name = %s", (EV,)) == [(2,)]
    arrived = last_seen(pg, "08")
    assert arrived > g1_at

    # g2 without built_at: a correction is due, and the gate says how many rows and what to do.
    files2 = publish(pg, store, EV, "08", "g2", n=3)
    m2 = manifest(store, EV, "08", "g2", files2)
    released, generation, problems = gate(pg, m2)
    assert (released, generation) == (False, "g2")
    assert codes(problems) == ["late_data"]
    why = detail(problems, "late_data")
    assert why.startswith("2 late row(s)"), why
    assert '"g1"' in why and "built_at" in why, why
    assert published(pg, EV, "08") == "g1"
    assert last_report(pg)["facts"]["late_rows"] == 2

    # Built before the late rows arrived (even after they were committed at 12:15): refused.
    for early in (g1_at, arrived - datetime.timedelta(microseconds=1), ts("13:00")):
        released, _, problems = gate(pg, dict(m2, built_at=iso(early)))
        assert released is False and codes(problems) == ["late_data"], (early, problems)
        assert "after this generation was built" in detail(problems, "late_data")
    assert published(pg, EV, "08") == "g1"

    # Built at or after their arrival: released.
    assert gate(pg, dict(m2, built_at=iso(arrived))) == (True, "g2", [])
    assert published(pg, EV, "08") == "g2"
    (built_at,) = pg.sql("SELECT now()")[0]
    assert gate(pg, dict(m2, built_at=iso(built_at))) == (True, "g2", [])

    # Once g2 is out, the same rows are no reason to refuse g3, with or without built_at.
    files3 = publish(pg, store, EV, "08", "g3")
    assert gate(pg, manifest(store, EV, "08", "g3", files3)) == (True, "g3", [])

    # A row arriving after g3 is due again; the count is the period's whole.
    late_rows(pg, 5, at("12:30"), at("12:25"), {"08": 1})
    files4 = publish(pg, store, EV, "08", "g4")
    m4 = manifest(store, EV, "08", "g4", files4)
    released, _, problems = gate(pg, m4)
    assert not released and codes(problems) == ["late_data"]
    assert detail(problems, "late_data").startswith("3 late row(s)")
    assert '"g3"' in detail(problems, "late_data")
    assert gate(pg, dict(m4, built_at=iso(last_seen(pg, "08")))) == (True, "g4", [])


def test_late_rows_before_the_first_release_need_built_at(pg, tables, store):
    # Hour 10's late row lands before any release of hour 10: whether the
    # first generation holds it only its manifest can say (built_at).
    late_rows(pg, 4, at("12:20"), at("12:15"), {"10": 1})
    assert pg.sql("SELECT rows FROM finalize.late_data WHERE table_name = %s", (EV,)) == [(1,)]
    files1 = publish(pg, store, EV, "10", "g1")
    released, _, problems = gate(pg, manifest(store, EV, "10", "g1", files1))
    assert not released and codes(problems) == ["late_data"]
    assert "does not say when its data was read" in detail(problems, "late_data")
    # A generation that says it was read before they arrived is refused too.
    released, _, problems = gate(pg, manifest(store, EV, "10", "g1", files1, built_at=f"{DAY}T12:30:00Z"))
    assert not released and codes(problems) == ["late_data"]
    # One read after them is released; the next generation, released after
    # the late rows, needs no built_at.
    assert gate(pg, manifest(store, EV, "10", "g1", files1, built_at=iso(last_seen(pg, "10")))) == (True, "g1", [])
    files2 = publish(pg, store, EV, "10", "g2")
    assert gate(pg, manifest(store, EV, "10", "g2", files2)) == (True, "g2", [])
    # Late rows of another period never hold this one.
    files = publish(pg, store, EV, "08", "g1")
    assert gate(pg, manifest(store, EV, "08", "g1", files, built_at=f"{DAY}T12:30:00Z")) == (True, "g1", [])


def test_late_rows_purged_with_old_facts_still_refuse_a_generation_built_before_them(pg, tables, store):
    # Hour 10's late row lands; then the facts' retention passes (purge_facts with
    # older_than 0, as the scheduler's hourly purge would after finalize.facts_retention).
    late_rows(pg, 4, at("12:20"), at("12:15"), {"10": 1})
    arrived = last_seen(pg, "10")
    assert pg.sql("SELECT finalize.purge_facts('0')")[0][0] > 0
    files1 = publish(pg, store, EV, "10", "g1")
    # A generation read before the late row arrived, or one that does not say when it was read,
    # still lacks it: refused, however long ago it landed.
    for extra in ({"built_at": f"{DAY}T12:30:00Z"}, {}):
        released, _, problems = gate(pg, manifest(store, EV, "10", "g1", files1, **extra))
        assert not released and "late_data" in codes(problems), (extra, problems)
        assert detail(problems, "late_data").startswith("1 late row(s)")
    assert published(pg, EV, "10") is None
    # The evidence stays: the late rows are still counted for hour 10.
    assert pg.sql("SELECT rows, last_seen FROM finalize.late_data WHERE table_name = %s", (EV,)) == [(1, arrived)]
    # One read after it passes that check.
    released, _, problems = gate(pg, manifest(store, EV, "10", "g1", files1, built_at=iso(arrived)))
    assert "late_data" not in codes(problems), problems


def test_late_rows_hold_the_periods_a_table_has_later(pg, tables, store):
    """Once retention removed its event facts, a table that had late rows may take other periods
    (its late rows were kept per period of its old ones, and the change was refused for ever); each
    late row is kept as the span it landed in, so a late row of a day still refuses every hour of
    that day built before it."""
    late_rows(pg, 4, at("12:20"), at("12:15"), {"10": 1})
    record(pg, EV, 5, at("12:25"))
    pg.sql("SELECT finalize.purge_facts('0')")
    pg.sql("SELECT finalize.alter_tracked_table(%s, granularity => '1 day')", (EV,))
    # Day 27 is final in days: a row of it committed at 12:30 is late, for the whole day.
    record(pg, EV, 6, at("12:35"), 1, at("12:30"), at("12:30"),
           [{"period": "2026-11-27T15:30:00Z", "inserts": 1}], "2026-11-27 15:30+00", "2026-11-27 15:30+00")
    record(pg, EV, 7, at("12:40"))
    pg.sql("SELECT finalize.purge_facts('0')")
    pg.sql("SELECT finalize.alter_tracked_table(%s, granularity => '1 hour')", (EV,))
    arrived = pg.sql("SELECT last_seen FROM finalize.late_data WHERE table_name = %s AND event_period = %s",
                     (EV, "2026-11-27 00:00+00"))[0][0]
    files = publish(pg, store, EV, "15", "g1")
    hour = {"period_start": "2026-11-27 15:00+00"}
    released, _, problems = gate(pg, manifest(store, EV, "15", "g1", files, built_at=at("12:29"), **hour))
    assert not released and detail(problems, "late_data").startswith("1 late row(s)"), problems
    _, _, problems = gate(pg, manifest(store, EV, "15", "g1", files, built_at=iso(arrived), **hour))
    assert "late_data" not in codes(problems), problems


def test_an_empty_release_that_late_rows_landed_in(pg, tables, store):
    publish(pg, store, EV, "09", "g1", n=0)
    assert gate(pg, manifest(store, EV, "09", "g1", {}, empty=True)) == (True, "g1", [])
    late_rows(pg, 4, at("12:20"), at("12:15"), {"09": 4})
    # Still empty: refused for both reasons.
    publish(pg, store, EV, "09", "g2", n=0)
    released, _, problems = gate(pg, manifest(store, EV, "09", "g2", {}, empty=True))
    assert released is False
    assert codes(problems) == ["empty_location", "late_data"]
    assert "4 change(s)" in detail(problems, "empty_location")
    assert detail(problems, "late_data").startswith("4 late row(s)")
    # A generation with the rows, read after they arrived: released.
    files3 = publish(pg, store, EV, "09", "g3")
    assert gate(pg, manifest(store, EV, "09", "g3", files3, built_at=iso(last_seen(pg, "09")))) == (
        True, "g3", [])


def test_a_commit_time_table_never_has_late_data(pg, tables, store):
    files1 = publish(pg, store, CT, "08", "g1")
    assert gate(pg, manifest(store, CT, "08", "g1", files1)) == (True, "g1", [])
    late_rows(pg, 4, at("12:20"), at("12:15"), {"08": 2})        # late for g.ev, just rows at 12:15 for g.ct
    assert pg.sql("SELECT table_name, rows FROM finalize.late_data") == [(EV, 2)]
    files2 = publish(pg, store, CT, "08", "g2")
    m2 = manifest(store, CT, "08", "g2", files2)
    assert gate(pg, m2) == (True, "g2", [])
    # Whatever built_at says.
    files3 = publish(pg, store, CT, "08", "g3")
    assert gate(pg, manifest(store, CT, "08", "g3", files3, built_at="2000-01-01T00:00:00Z")) == (True, "g3", [])
    assert pg.sql("SELECT count(*) FROM finalize.fact f JOIN finalize.tracked_table t USING (table_id) "
                  "WHERE t.table_name = %s AND f.event = 'late_data'", (CT,)) == [(0,)]


@pytest.mark.parametrize("built_at", [
    "yesterday", "now", "2026-11-28 12:00", "2026-11-28T12:00:00", "12/01/2026 10:00+00", "2026-11-28",
    "", "2026-11-28 25:00+00", 1764590400, True, {"at": "2026-11-28T12:00:00Z"}])
@pytest.mark.parametrize("table", [EV, CT])
def test_a_malformed_built_at_is_a_manifest_error(pg, tables, store, built_at, table):
    files = publish(pg, store, table, "08", "g1")
    m = manifest(store, table, "08", "g1", files, built_at=built_at)
    with pytest.raises(psycopg2.Error) as e:
        gate(pg, m)
    assert e.value.pgcode == "22023", e.value
    assert 'field "built_at"' in str(e.value), e.value
    assert pg.sql("SELECT count(*) FROM finalize.release") == [(0,)]
    assert published(pg, table, "08") is None


@pytest.mark.parametrize("built_at", ["2026-12-01T00:00:00Z", "2026-12-01 00:00+00", "2026-12-01T01:30:00.5+01:30",
                                      "2026-12-01T00:00:00-0100", None])
def test_well_formed_built_at_forms_are_accepted(pg, tables, store, built_at):
    files = publish(pg, store, EV, "08", "g1")
    assert gate(pg, manifest(store, EV, "08", "g1", files, built_at=built_at)) == (True, "g1", [])
