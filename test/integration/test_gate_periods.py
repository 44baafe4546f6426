"""Partitions bound to their periods: the release gate never publishes a
period that is not final, whatever the manifest says or leaves out.

The three releases that 0.2.0 published ahead of the verdict, each refused
now (each test fails on 0.2.0's gate), and the ways a release now binds its
periods: a local day of the table's zone from track_table to the gate, a
manifest that spans several periods, the registered period when the
manifest gives none, and no_period when it is known nowhere.

The facts are recorded through the write path by hand (finalize.record_range,
the worker's function); the worker is off in this cluster."""

import datetime
import json

import pytest

from storefiles import write_file
from pgcluster import cluster_with_source

from zoneinfo import ZoneInfo

UTC = datetime.timezone.utc
SEOUL = ZoneInfo("Asia/Seoul")


@pytest.fixture(scope="module")
def pg():
    cluster = cluster_with_source({"finalize.enabled": "off"})
    yield cluster
    cluster.cleanup()


@pytest.fixture
def tables(pg):
    """g.daily: UTC days, final until 2026-11-28 00:30Z (rounded: 00:00Z). g.hourly: UTC hours, final until
    10:00Z on 2026-11-28."""
    pg.sql("SELECT finalize.track_table('g.daily', 'src', 'dbo.orders', '1 day')")
    pg.sql("SELECT finalize.track_table('g.hourly', 'src', 'dbo.lines', '1 hour')")
    for t, until in (("g.daily", "2026-11-28 00:30+00"), ("g.hourly", "2026-11-28 10:00+00")):
        pg.sql("SELECT finalize.record_range(%s, NULL, '0x00000000000000000100', '2026-11-25 00:00+00')", (t,))
        pg.sql("SELECT finalize.record_range(%s, '0x00000000000000000100', '0x00000000000000000200', %s)",
               (t, until))
    yield
    pg.sql("DELETE FROM finalize.tracked_table")


def gate(pg, m):
    (released, generation, problems), = pg.sql("SELECT * FROM finalize.release_gate(%s)", (json.dumps(m),))
    return released, [p["code"] for p in problems], problems


def one_file(store, prefix):
    write_file(store, prefix + "part-0.parquet", b"rows")
    return {prefix + "part-0.parquet": 4}


def test_case_1_a_local_days_start_in_a_utc_table_is_refused_not_checked_as_the_utc_day(pg, tables, store):
    """0.2.0 checked the UTC day containing 2026-11-28T00:00+09:00 (2026-11-27, final) and released the Seoul
    day 15 hours before it ended. That instant is no boundary of the table's UTC days: an error names the
    two boundaries around it, and nothing is stored."""
    files = one_file(store, "dt=2026-11-28/g1/")
    pg.sql("SELECT finalize.register_partition('g.daily', 'dt=2026-11-28', 'dt=2026-11-28/g1/')")
    m = {"table": "g.daily", "partition": "dt=2026-11-28", "generation": "g1", "store": "file://" + store,
         "prefix": "dt=2026-11-28/g1/", "files": files, "period_start": "2026-11-28T00:00:00+09:00"}
    with pytest.raises(Exception) as e:
        gate(pg, m)
    assert 'field "period_start"' in str(e.value) and "is not a period boundary" in str(e.value)
    assert "2026-11-27T00:00:00+00:00 and 2026-11-28T00:00:00+00:00" in str(e.value), str(e.value)
    assert pg.sql("SELECT count(*) FROM finalize.release")[0][0] == 0
    assert pg.sql("SELECT finalize.released_generation('g.daily', 'dt=2026-11-28')")[0][0] is None


def test_case_1_done_right_a_seoul_day_from_track_table_to_the_gate(pg, store):
    """The same lake cut in Seoul days: a table tracked with period_zone 'Asia/Seoul', its partition
    dt=2026-11-28 projected as dt={date}/, released only once the Seoul day has ended in the verdict."""
    pg.sql("SELECT finalize.track_table('g.seoul', 'src', 'dbo.orders', '1 day', period_zone => 'Asia/Seoul')")
    try:
        pg.sql("SELECT finalize.set_projection('g.seoul', 'dt={date}/', '2026-11-01', '2026-12-01')")
        files = one_file(store, "dt=2026-11-28/")
        m = {"table": "g.seoul", "partition": "dt=2026-11-28", "generation": "g1", "store": "file://" + store,
             "prefix": "dt=2026-11-28/", "files": files, "period_start": "2026-11-28T00:00:00+09:00"}
        pg.sql("SELECT finalize.record_range('g.seoul', NULL, '0x00000000000000000100', '2026-11-25 00:00+00')")
        pg.sql("SELECT finalize.record_range('g.seoul', '0x00000000000000000100', '0x00000000000000000200', "
               "'2026-11-28 00:30+00')")
        released, codes, problems = gate(pg, m)
        assert (released, codes) == (False, ["not_finalized"]), problems
        assert "2026-11-28 15:00:00+00" in problems[0]["detail"] or "2026-11-29" in problems[0]["detail"], problems
        # 15:00Z on the 28th is Seoul's midnight: the day is final then, and not a microsecond before.
        pg.sql("SELECT finalize.record_range('g.seoul', '0x00000000000000000200', '0x00000000000000000300', "
               "'2026-11-28 14:59:59.999+00')")
        assert gate(pg, dict(m, generation="g2"))[:2] == (False, ["not_finalized"])
        pg.sql("SELECT finalize.record_range('g.seoul', '0x00000000000000000300', '0x00000000000000000400', "
               "'2026-11-28 15:00:00.5+00')")
        assert gate(pg, dict(m, generation="g3"))[:2] == (True, [])
        (start, end), = pg.sql("SELECT period_start, period_end FROM finalize.release WHERE released")
        assert (start, end) == (datetime.datetime(2026, 11, 28, tzinfo=SEOUL),
                                datetime.datetime(2026, 11, 29, tzinfo=SEOUL))
    finally:
        pg.sql("SELECT finalize.untrack_table('g.seoul', false)")


def test_case_2_a_registered_partition_without_period_start_is_checked_against_its_registered_period(
        pg, tables, store):
    """0.2.0 skipped the finality check of a manifest without period_start and released hour 12 with the
    verdict at 10:00. A partition registered with its period is checked against it; one registered without
    a period, or never registered, is refused with no_period."""
    files = one_file(store, "h=12/g1/")
    m = {"table": "g.hourly", "partition": "h=12", "generation": "g1", "store": "file://" + store,
         "prefix": "h=12/g1/", "files": files}
    # Registered without a period (as 0.2.0 registered every partition), no period_start: 0.2.0 released it.
    pg.sql("SELECT finalize.register_partition('g.hourly', 'h=12', 'h=12/g1/')")
    released, codes, problems = gate(pg, m)
    assert (released, codes) == (False, ["no_period"]), problems
    assert "register_partition" in problems[0]["detail"] and "period_start" in problems[0]["detail"]
    assert pg.sql("SELECT finalize.released_generation('g.hourly', 'h=12')")[0][0] is None
    # Registered with the hour it holds: checked against it.
    pg.sql("SELECT finalize.register_partition('g.hourly', 'h=12', 'h=12/g1/', '2026-11-28 12:00+00')")
    released, codes, problems = gate(pg, m)
    assert (released, codes) == (False, ["not_finalized"]), problems
    stored = pg.sql("SELECT period_start, period_end FROM finalize.release ORDER BY release_id DESC LIMIT 1")[0]
    assert stored == (datetime.datetime(2026, 11, 28, 12, tzinfo=UTC), datetime.datetime(2026, 11, 28, 13, tzinfo=UTC))
    # A period hour that is final, registered: released, without period_start in the manifest.
    files = one_file(store, "h=09/g1/")
    pg.sql("SELECT finalize.register_partition('g.hourly', 'h=09', 'h=09/g1/', '2026-11-28 09:00+00')")
    assert gate(pg, dict(m, partition="h=09", prefix="h=09/g1/", files=files))[:2] == (True, [])
    # The manifest and the registration disagree: the catalog tells readers another period.
    released, codes, _ = gate(pg, dict(m, partition="h=09", prefix="h=09/g1/", files=files, generation="g2",
                                       period_start="2026-11-28 08:00+00"))
    assert (released, codes) == (False, ["catalog_mismatch"])


def test_no_period_under_a_projection_either(pg, tables, store):
    """A projection places a period's partition; a manifest that names none cannot be checked."""
    pg.sql("SELECT finalize.set_projection('g.hourly', 'h={hour}/', '2026-11-28', '2026-11-29')")
    files = one_file(store, "h=09/")
    m = {"table": "g.hourly", "partition": "h=09", "generation": "g1", "store": "file://" + store,
         "prefix": "h=09/", "files": files}
    assert gate(pg, m)[:2] == (False, ["no_period"])
    assert gate(pg, dict(m, period_start="2026-11-28 09:00+00"))[:2] == (True, [])


def test_case_3_a_whole_days_manifest_on_an_hourly_table_checks_every_hour(pg, tables, store):
    """0.2.0 ignored "period_end" and checked the first hour of a day it released. Every hour of the span
    must be final now; a misspelt field is an error, not ignored."""
    files = one_file(store, "d=2026-11-28/g1/")
    pg.sql("SELECT finalize.register_partition('g.hourly', 'd=2026-11-28', 'd=2026-11-28/g1/')")
    m = {"table": "g.hourly", "partition": "d=2026-11-28", "generation": "g1", "store": "file://" + store,
         "prefix": "d=2026-11-28/g1/", "files": files,
         "period_start": "2026-11-28T00:00:00Z", "period_end": "2026-11-29T00:00:00Z"}
    released, codes, problems = gate(pg, m)
    assert (released, codes) == (False, ["not_finalized"]), problems
    # The reason is the first hour that is not final: 10:00.
    assert "2026-11-28 10:00:00+00" in problems[0]["detail"], problems
    with pytest.raises(Exception, match='field "period_ends" is not a field of a manifest'):
        gate(pg, {k if k != "period_end" else "period_ends": v for k, v in m.items()})
    # Hours 00:00-10:00 are final: a span of them is released.
    assert gate(pg, dict(m, generation="g2", period_end="2026-11-28T10:00:00Z"))[:2] == (True, [])
    stored = pg.sql("SELECT period_start, period_end FROM finalize.release WHERE released")[0]
    assert stored == (datetime.datetime(2026, 11, 28, tzinfo=UTC), datetime.datetime(2026, 11, 28, 10, tzinfo=UTC))
    facts = pg.sql("SELECT report -> 'facts' FROM finalize.release WHERE released")[0][0]
    assert facts["periods"] == 10 and facts["is_final"] is True


def test_an_unacknowledged_loss_inside_a_span_holds_it(pg, tables, store):
    """A span is final only when no unacknowledged loss touches any of its periods: changes committed from
    07:20 to 10:00 were lost, so hours 7 to 9 wait for an acknowledgement while 5 and 6 are final."""
    pg.sql("SELECT finalize_internal.record_loss(t.table_id, w, '0x00000000000000000150', '2026-11-28 07:20+00') "
           "FROM finalize.tracked_table t JOIN finalize.watermark w USING (table_id) "
           "WHERE t.table_name = 'g.hourly'")
    assert pg.sql("SELECT finalize.is_final('g.hourly', '2026-11-28 06:00+00'), "
                  "finalize.is_final('g.hourly', '2026-11-28 07:00+00')")[0] == (True, False)
    files = one_file(store, "d=loss/g1/")
    m = {"table": "g.hourly", "partition": "d=loss", "generation": "g1", "store": "file://" + store,
         "prefix": "d=loss/g1/", "files": files}
    pg.sql("SELECT finalize.register_partition('g.hourly', 'd=loss', 'd=loss/g1/', '2026-11-28 05:00+00', "
           "'2026-11-28 09:00+00')")
    released, codes, problems = gate(pg, m)
    assert (released, codes) == (False, ["not_finalized"]), problems
    assert "acknowledge_loss" in problems[0]["detail"], problems
    pg.sql("SELECT finalize.register_partition('g.hourly', 'd=loss', 'd=loss/g1/', '2026-11-28 05:00+00', "
           "'2026-11-28 07:00+00')")
    assert gate(pg, m)[:2] == (True, [])
    pg.sql("SELECT finalize.acknowledge_loss('g.hourly', '2026-11-28 07:00+00', '2026-11-28 10:00+00', 'rebuilt')")
    pg.sql("SELECT finalize.register_partition('g.hourly', 'd=loss', 'd=loss/g2/', '2026-11-28 05:00+00', "
           "'2026-11-28 09:00+00')")
    files = one_file(store, "d=loss/g2/")
    assert gate(pg, dict(m, generation="g2", prefix="d=loss/g2/", files=files))[:2] == (True, [])


def test_a_location_that_holds_other_periods_is_not_released_on_one_periods_verdict(pg, tables, store):
    """A release publishes its whole location. A projection coarser than the partition (d={date}/ on an
    hourly table) places every hour of the day at d=2026-11-28/: released as hour 09, which is final, it
    published hours 10 to 23, which are not. So did a template without the date (h={hour}/) over a month,
    and a registered location that holds the location registered for another hour."""
    pg.sql("SELECT finalize.set_projection('g.hourly', 'd={date}/', '2026-11-01', '2026-12-01')")
    m = {"table": "g.hourly", "partition": "d=2026-11-28", "generation": "g1", "store": "file://" + store,
         "prefix": "d=2026-11-28/", "files": one_file(store, "d=2026-11-28/"), "period_start": "2026-11-28T09:00:00Z"}
    released, codes, problems = gate(pg, m)
    assert (released, codes) == (False, ["catalog_mismatch"]), problems
    detail = problems[0]["detail"]
    assert 'template "d={date}/"' in detail and "[2026-11-28T10:00:00+00:00, 2026-11-28T11:00:00+00:00)" in detail, detail
    assert pg.sql("SELECT finalize.released_generation('g.hourly', 'd=2026-11-28')")[0][0] is None
    # As the whole day it holds, it waits for every hour of it (10:00 is not final) ...
    day = dict(m, period_start="2026-11-28T00:00:00Z", period_end="2026-11-29T00:00:00Z")
    released, codes, problems = gate(pg, day)
    assert (released, codes) == (False, ["not_finalized"]), problems
    # ... and the day before, final, is released.
    before = dict(day, partition="d=2026-11-27", prefix="d=2026-11-27/", files=one_file(store, "d=2026-11-27/"),
                  period_start="2026-11-27T00:00:00Z", period_end="2026-11-28T00:00:00Z")
    assert gate(pg, before)[:2] == (True, [])
    # A template without the date places the same hour of every day of its range at one location:
    # h=09/ holds hour 09 of the 29th too, which is not final.
    pg.sql("SELECT finalize.set_projection('g.hourly', 'h={hour}/', '2026-11-01', '2026-12-01')")
    hour = {"table": "g.hourly", "partition": "h=09", "generation": "g1", "store": "file://" + store,
            "prefix": "h=09/", "files": one_file(store, "h=09/"), "period_start": "2026-11-28T09:00:00Z"}
    released, codes, problems = gate(pg, hour)
    assert (released, codes) == (False, ["catalog_mismatch"]), problems
    assert "[2026-11-29T09:00:00+00:00, 2026-11-29T10:00:00+00:00)" in problems[0]["detail"], problems
    # Over that one day, the location is the hour's alone.
    pg.sql("SELECT finalize.set_projection('g.hourly', 'h={hour}/', '2026-11-28', '2026-11-29')")
    assert gate(pg, hour)[:2] == (True, [])

    # Registered: hour 09's location "n/" holds the one registered for hour 11.
    pg.sql("SELECT finalize.register_partition('g.hourly', 'h=11', 'n/h=11/', '2026-11-28 11:00+00')")
    pg.sql("SELECT finalize.register_partition('g.hourly', 'h=09', 'n/', '2026-11-28 09:00+00')")
    m = {"table": "g.hourly", "partition": "h=09", "generation": "g1", "store": "file://" + store,
         "prefix": "n/", "files": one_file(store, "n/")}
    released, codes, problems = gate(pg, m)
    assert (released, codes) == (False, ["catalog_mismatch"]), problems
    assert 'registers partition "h=11" of "g.hourly" at "n/h=11/"' in problems[0]["detail"], problems
    # Registered elsewhere, hour 11 no longer shares it.
    pg.sql("SELECT finalize.register_partition('g.hourly', 'h=11', 'm/h=11/', '2026-11-28 11:00+00')")
    assert gate(pg, m)[:2] == (True, [])
