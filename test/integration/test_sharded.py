"""A sharded table (docs/sharding.md) over several SQL Server databases, read by the worker through
real FreeTDS over TCP: one simulator process per shard (each its own database with its own LSNs
and clock; the simulator serves one database per process). After every step the simulators'
ground truth decides: the sharded table is final for a period exactly when every shard's changes
for it are captured (sim.truth_watermark of each) and, with a consumer declared on the sharded
table, applied by it on every shard (sim.truth_commits against what it reported per shard). A
shard whose capture stopped holds the table, explain_verdict names it, the release gate releases
a partition of a shard that is final and refuses one of the shard that holds the table; a
Debezium-like pipeline reporting per source.db holds and moves it."""

import datetime
import json

import pytest

from storefiles import write_file
from worker_env import Env, as_utc, at, lsn_text, new_cluster, sim_clock, sim_max_lsn, truth_watermark

TABLE = "sales.orders"
SHARDS = ("db01", "db02", "db03")
HOUR = datetime.timedelta(hours=1)


@pytest.fixture(scope="module")
def pg():
    cluster = new_cluster()
    yield cluster
    cluster.cleanup()


@pytest.fixture(scope="module")
def shards():
    """One simulator per shard, each on its own simulated clock (08:59 UTC), with a first commit
    captured: {label: simulator}."""
    sims = {}
    try:
        for label in SHARDS:
            sims[label] = sim_clock(start_time="2026-11-02T08:59:00Z").start()
            sims[label].call("sim.commit", inserts=1)
            sims[label].call("sim.advance", seconds=10)
        yield sims
    finally:
        for s in sims.values():
            s.stop()


@pytest.fixture(scope="module")
def env(pg, shards):
    """The sharded table: a server per shard database and one shard on each, caught up."""
    e = Env(pg)
    e.sql("SELECT finalize.track_sharded(%s, '1 hour')", (TABLE,))
    for label, sim in shards.items():
        e.add_source(label, sim)
        e.sql("SELECT finalize.add_shard(%s, %s, %s, 'dbo.orders')", (TABLE, label, label))
    for label, sim in shards.items():
        e.wait_caught_up(shard(label), sim)
    yield e
    e.cleanup()


# --- helpers ---------------------------------------------------------------------------------

def shard(label):
    return f"{TABLE}/{label}"


def floor_hour(ts):
    return ts.replace(minute=0, second=0, microsecond=0)


def until(env, table=TABLE):
    return env.one("SELECT finalize.finalized_until(%s)", (table,))


def final(env, table, period):
    return env.one("SELECT finalize.is_final(%s, %s)", (table, period))


def commit(sim, when, **ops):
    """One committed transaction on dbo.orders at a simulated instant -> its LSN (finalize's text)."""
    return lsn_text(sim.call("sim.commit", at=when, **ops)[0][0]["start_lsn"])


def captured_until(shards):
    """The truth per shard: the instant before which every commit of its database is captured."""
    return {label: truth_watermark(sim) for label, sim in shards.items()}


def first_unapplied(sim, applied_lsn, since):
    """The earliest commit time of a dbo.orders commit at or after since (the verdict when the
    consumer was declared: what was final before stays final) above what the consumer applied."""
    times = [as_utc(c["commit_time_utc"]) for c in sim.call("sim.truth_commits", table="dbo.orders")[0]
             if lsn_text(c["commit_lsn"]) > applied_lsn and as_utc(c["commit_time_utc"]) >= since]
    return min(times) if times else None


def assert_truth(env, shards, applied=None, since=None):
    """The ground truth of the sharded table: no hour is final unless, in every shard, all of its
    commits are captured and (applied: {label: LSN reported}, declared when the table was final
    until since) applied by the consumer; no verdict, a shard's or the table's, runs ahead of it.
    Returns the table's verdict and the bound: the start of the hour of the least shard's truth."""
    captured = captured_until(shards)
    bound = {}
    for label, sim in shards.items():
        own = until(env, shard(label))
        assert own is None or own <= captured[label], f"{label}: verdict {own} leads the truth {captured[label]}"
        bound[label] = captured[label]
        if applied is not None:
            pending = first_unapplied(sim, applied[label], since)
            if pending is not None:
                bound[label] = min(bound[label], pending)
            assert own is None or own <= max(since, bound[label]), f"{label}: verdict {own} leads {bound[label]}"
    verdict = until(env)
    least = min(bound.values())
    assert verdict is None or verdict <= least or (since is not None and verdict <= since), \
        f"sharded verdict {verdict} leads the least shard's truth {bound}"
    for hour in (at(9, 0), at(10, 0), at(11, 0), at(12, 0)):
        if since is not None and hour + HOUR <= since:
            continue
        if not all(hour + HOUR <= b for b in bound.values()):
            assert final(env, TABLE, hour) is False, f"hour {hour} is final though a shard's truth is {bound}"
    return verdict, floor_hour(least)


def wait_sharded(env, expected):
    """Waits until the sharded table's verdict is expected (the shards' workers, or the scheduler's
    next round, let it follow its shards)."""
    env.pg.wait_for(lambda: until(env) == expected,
                    what=lambda: f"{TABLE} at {expected}: {[env.status(t) for t in [TABLE] + [shard(s) for s in SHARDS]]}")
    return expected


def advance_all(shards, to):
    for sim in shards.values():
        sim.call("sim.advance", to=to)


def release(env, partition, prefix, period_start, store, generation, shard=None):
    """Releases a partition of the sharded table at prefix from a local store holding one file
    there, with the manifest's "shard" when given; returns (released, problem codes, problems)."""
    path = prefix + f"{generation}.parquet"
    write_file(store, path, b"12345")
    manifest = {"table": TABLE, "partition": partition, "generation": generation,
                "store": "file://" + store, "prefix": prefix,
                "period_start": period_start.isoformat(), "files": {path: 5}}
    if shard is not None:
        manifest["shard"] = shard
    released, _, problems = env.sql("SELECT * FROM finalize.release_gate(%s)", (json.dumps(manifest),))[0]
    return released, [p["code"] for p in problems], problems


def gate(env, label, period_start, store, generation):
    """Releases the partition shard=<label>/hour=HH of the sharded table (see release)."""
    location = env.one("SELECT finalize.render_location('shard={shard}/hour={hour}/', %s, 'UTC', %s)",
                       (period_start, label))
    return release(env, location.rstrip("/"), location, period_start, store, generation)


def published(env, partition):
    """The published marker of a partition of the sharded table: (generation, prefix), or None."""
    rows = env.sql("SELECT p.generation, p.prefix FROM finalize.published p "
                   "WHERE p.table_id = finalize_internal.tracked_id(%s) AND p.partition = %s", (TABLE, partition))
    return rows[0] if rows else None


# --- tests -----------------------------------------------------------------------------------

def test_the_sharded_table_is_final_exactly_when_every_shard_has_captured(env, shards, store):
    # Every shard captured hour 9: the table is final for it.
    for label, sim in shards.items():
        commit(sim, at(9, 10 + 10 * SHARDS.index(label)), inserts=2)
    advance_all(shards, at(10, 5))
    for label, sim in shards.items():
        env.wait_caught_up(shard(label), sim)
    verdict, truth = assert_truth(env, shards)
    assert wait_sharded(env, truth) == at(10, 0)
    assert final(env, TABLE, at(9, 0)) is True

    # Capture stops on db03's database while commits go on there: db01 and db02 capture hour 10,
    # db03 does not, and holds the table.
    lagging = shards["db03"]
    lagging.call("sim.capture_stop")
    for label, sim in shards.items():
        commit(sim, at(10, 20 + 5 * SHARDS.index(label)), inserts=1, updates=1)
    advance_all(shards, at(11, 5))
    for label in ("db01", "db02"):
        env.wait_caught_up(shard(label), shards[label])
        env.pg.wait_for(lambda: until(env, shard(label)) == at(11, 0), what=f"{label} at 11:00")
    verdict, truth = assert_truth(env, shards)
    assert truth == at(10, 0) and verdict == at(10, 0)
    assert final(env, shard("db01"), at(10, 0)) is True and final(env, shard("db03"), at(10, 0)) is False
    assert final(env, TABLE, at(10, 0)) is False
    st = env.status(TABLE)
    assert (st["kind"], st["shards"], st["slowest_shard"]) == ("sharded", 3, "db03"), st
    assert env.status(shard("db03"))["sharded_table"] == TABLE
    reason = env.one("SELECT reason FROM finalize.explain_verdict(%s, %s)", (TABLE, at(10, 0)))
    assert 'shard "db03" holds it back' in reason and "SQL Server's capture has reached" in reason, reason
    assert 'shard "db01"' not in reason and 'shard "db02"' not in reason, reason

    # The release gate: hour 10 of db01 is final in db01, so its partition is released; db03's is
    # not, with db03's reason; a shard the table does not have is a problem of its own. The
    # projections here cover the simulated day alone: their templates name the hour, not the
    # date, so every day of a longer range would share each location.
    env.sql("SELECT finalize.set_projection(%s, 'shard={shard}/hour={hour}/', '2026-11-02', '2026-11-03')", (TABLE,))
    released, codes, _ = gate(env, "db01", at(10, 0), store, "g1")
    assert (released, codes) == (True, [])
    released, codes, problems = gate(env, "db03", at(10, 0), store, "g1")
    assert not released and codes == ["not_finalized"], problems
    assert "SQL Server's capture has reached" in problems[0]["detail"]
    released, codes, _ = gate(env, "db99", at(10, 0), store, "g1")
    assert not released and codes == ["unknown_shard"]
    assert env.one("SELECT finalize.released_generation(%s, 'shard=db01/hour=10')", (TABLE,)) == "g1"
    assert env.one("SELECT finalize.released_generation(%s, 'shard=db03/hour=10')", (TABLE,)) is None

    # A partition whose key names no shard, registered at a location that holds every shard, is
    # not db01's because its manifest says "shard": "db01": the catalog does not bind it to db01,
    # so it is checked as a partition of every shard, and db03 holds it.
    env.sql("SELECT finalize.register_partition(%s, 'hour=10', 'all/hour=10/', %s)", (TABLE, at(10, 0)))
    released, codes, problems = release(env, "hour=10", "all/hour=10/", at(10, 0), store, "g1", shard="db01")
    assert final(env, TABLE, at(10, 0)) is False
    assert not released and codes == ["unknown_shard", "not_finalized"], problems
    assert 'registers it at "all/hour=10/"' in problems[0]["detail"], problems
    assert 'shard "db03" holds it back' in problems[1]["detail"], problems
    assert published(env, "hour=10") is None

    # Capture resumes on db03: it catches up, and the table with it.
    lagging.call("sim.capture_start")
    lagging.call("sim.advance", seconds=10)
    env.wait_caught_up(shard("db03"), lagging)
    verdict, truth = assert_truth(env, shards)
    assert wait_sharded(env, truth) == at(11, 0)
    released, codes, _ = gate(env, "db03", at(10, 0), store, "g1")
    assert (released, codes) == (True, [])
    assert_truth(env, shards)
    # Now every shard has hour 10: the registered partition is released as every shard's.
    released, codes, problems = release(env, "hour=10", "all/hour=10/", at(10, 0), store, "g1")
    assert (released, codes) == (True, []), problems
    assert published(env, "hour=10") == ("g1", "all/hour=10/")


def test_a_partition_is_never_released_again_as_one_shards_once_released_as_every_shards(env, shards, store):
    # Hour 9 is final in every shard. Projected by a template without {shard}, partition hour=09
    # is every shard's, and is released as such.
    assert final(env, TABLE, at(9, 0)) is True
    env.sql("SELECT finalize.set_projection(%s, 'all/hour={hour}/', '2026-11-02', '2026-11-03')", (TABLE,))
    released, codes, problems = release(env, "hour=09", "all/hour=09/", at(9, 0), store, "g1")
    assert (released, codes) == (True, []), problems
    # Its marker is keyed by the partition alone: projected by shard afterwards, the same
    # partition is not released as db01's (its readers would be sent to one shard's data), nor
    # as db02's; the marker stays where it was.
    env.sql("SELECT finalize.set_projection(%s, 'shard={shard}/hour={hour}/', '2026-11-02', '2026-11-03')", (TABLE,))
    for label in ("db01", "db02"):
        released, codes, problems = release(env, "hour=09", f"shard={label}/hour=09/", at(9, 0), store, "g2",
                                            shard=label)
        assert not released and "unknown_shard" in codes, problems
        why = [p["detail"] for p in problems if p["code"] == "unknown_shard"][0]
        assert "is published as a partition of every shard" in why, why
        assert published(env, "hour=09") == ("g1", "all/hour=09/")
    # A shard's partition under a key of its own is released as that shard's.
    released, codes, problems = release(env, "shard=db01/hour=09", "shard=db01/hour=09/", at(9, 0), store, "g2")
    assert (released, codes) == (True, []), problems
    # And one released as db01's is never released as db02's.
    released, codes, problems = release(env, "db/hour=09", "shard=db01/hour=09/", at(9, 0), store, "g2",
                                        shard="db01")
    assert (released, codes) == (True, []), problems
    released, codes, problems = release(env, "db/hour=09", "shard=db02/hour=09/", at(9, 0), store, "g2",
                                        shard="db02")
    assert not released and "unknown_shard" in codes, problems
    why = [p["detail"] for p in problems if p["code"] == "unknown_shard"][0]
    assert 'is published as shard "db01"\'s partition' in why, why
    assert published(env, "db/hour=09") == ("g2", "shard=db01/hour=09/")


def debezium(lsn):
    """finalize's LSN text as Debezium's source.commit_lsn writes it (8:8:4 lower-case hex)."""
    h = lsn[2:].lower()
    return "%s:%s:%s" % (h[:8], h[8:16], h[16:])


def change_events(shards):
    """What a Debezium connector over the shards' databases emits: one record per committed change
    of dbo.orders, its source block naming the database (source.db) and the commit's LSN."""
    events = []
    for label, sim in shards.items():
        for c in sim.call("sim.truth_commits", table="dbo.orders")[0]:
            events.append({"source": {"db": label, "commit_lsn": debezium(lsn_text(c["commit_lsn"]))},
                           "ts": as_utc(c["commit_time_utc"])})
    return sorted(events, key=lambda e: e["ts"])


def report_per_db(env, events):
    """The pipeline's report after it applied events: per source.db, the greatest commit_lsn it has
    applied, to that database's shard. Returns {label: (LSN in finalize's form, its commit time)}."""
    applied = {}
    for e in events:
        applied[e["source"]["db"]] = (e["source"]["commit_lsn"], e["ts"])
    for db, (lsn, _) in applied.items():
        env.sql("SELECT finalize.report_progress(%s, 'debezium', %s)", (shard(db), lsn))
    return {db: ("0x" + lsn.replace(":", "").upper(), ts) for db, (lsn, ts) in applied.items()}


def provable(held, captured, applied):
    """What finalize can prove: every shard captured up to its truth and applied everything before
    the commit time of the LSN reported for it (an idle shard waits for its next change), by whole
    hours, never below what was final already."""
    return max(held, floor_hour(min(min(captured[label], applied[label][1]) for label in SHARDS)))


def test_a_debezium_pipeline_reporting_per_source_db_holds_and_moves_the_table(env, shards):
    # Declared on the sharded table: a consumer of every shard, which holds each from now on.
    held = until(env)
    env.sql("SELECT finalize.add_consumer(%s, 'debezium')", (TABLE,))
    rows = env.sql("SELECT table_name, table_wide FROM finalize.consumers WHERE consumer = 'debezium' "
                   "ORDER BY table_name")
    assert rows == [(shard(s), True) for s in SHARDS]
    for label, sim in shards.items():
        commit(sim, at(11, 15 + 10 * SHARDS.index(label)), inserts=3)
        commit(sim, at(12, 1), updates=1)
    advance_all(shards, at(12, 5))
    for label, sim in shards.items():
        env.wait_caught_up(shard(label), sim)
    for label in SHARDS:
        env.pg.wait_for(lambda: env.status(shard(label))["source_until"] == at(12, 0), what=f"{label} captured")
    nothing = {label: "0x" + "00" * 10 for label in SHARDS}
    verdict, _ = assert_truth(env, shards, nothing, held)
    assert verdict == held, "every shard captured hour 11, but the consumer has reported nothing"

    # The pipeline applied everything of db01 and db02, and of db03 only what came before hour 11.
    events = change_events(shards)
    applied = report_per_db(env, [e for e in events if e["source"]["db"] != "db03" or e["ts"] < at(11, 0)])
    for label in ("db01", "db02"):
        env.pg.wait_for(lambda: until(env, shard(label)) == at(12, 0), what=f"{label} at 12:00")
    verdict, _ = assert_truth(env, shards, {k: v[0] for k, v in applied.items()}, held)
    assert wait_sharded(env, provable(held, captured_until(shards), applied)) == held
    assert final(env, TABLE, at(11, 0)) is False and final(env, shard("db01"), at(11, 0)) is True
    # db03's report is resolved to a commit time by its worker's next cycle: until then the
    # reason says the LSN is not resolved yet (and the verdict is held all the same).
    reason = env.pg.wait_for(
        lambda: (r := env.one("SELECT reason FROM finalize.explain_verdict(%s, %s)", (TABLE, at(11, 0))))
        and "has applied up to LSN" in r and r,
        what=lambda: env.one("SELECT reason FROM finalize.explain_verdict(%s, %s)", (TABLE, at(11, 0))))
    assert 'shard "db03" holds it back: consumer "debezium" has applied up to LSN' in reason, reason
    assert 'shard "db01"' not in reason, reason

    # It applies the rest of db03: the table moves to what every shard captured and applied.
    applied = report_per_db(env, events)
    env.pg.wait_for(lambda: until(env, shard("db03")) == at(12, 0), what="db03 at 12:00")
    assert_truth(env, shards, {k: v[0] for k, v in applied.items()}, held)
    assert wait_sharded(env, provable(held, captured_until(shards), applied)) == at(12, 0)
    assert final(env, TABLE, at(11, 0)) is True


def test_a_location_of_every_shard_is_never_released_on_one_shards_verdict(env, shards, store):
    """A release publishes its whole location. Where the catalog places every shard's hour 12 (the
    sharded table registers it, or projects it by a template without {shard}), the location holds
    db02's rows too: released on db01's verdict, by naming the shard as the table
    ("sales.orders/db01") or in the key (shard=db01/...), it published an hour db02 had not captured.
    Such a release is unknown_shard; the partition of every shard is released once every shard is
    final."""
    env.sql("SELECT finalize.drop_consumer(%s, 'debezium')", (TABLE,))
    lagging = shards["db02"]
    lagging.call("sim.capture_stop")
    for label, sim in shards.items():
        commit(sim, at(12, 20 + 5 * SHARDS.index(label)), inserts=2)
    advance_all(shards, at(13, 5))
    for label in ("db01", "db03"):
        env.wait_caught_up(shard(label), shards[label])
        env.pg.wait_for(lambda: until(env, shard(label)) == at(13, 0), what=f"{label} at 13:00")
    assert_truth(env, shards)
    assert final(env, shard("db01"), at(12, 0)) is True and final(env, TABLE, at(12, 0)) is False

    # The lake writes every shard's rows of hour 12 to one location.
    files = {}
    for label in SHARDS:
        write_file(store, f"all/hour=12/{label}.parquet", b"12345")
        files[f"all/hour=12/{label}.parquet"] = 5

    def gate_at(table, partition, generation):
        manifest = {"table": table, "partition": partition, "generation": generation,
                    "store": "file://" + store, "prefix": "all/hour=12/",
                    "period_start": at(12, 0).isoformat(), "files": files}
        released, _, problems = env.sql("SELECT * FROM finalize.release_gate(%s)", (json.dumps(manifest),))[0]
        return released, [p["code"] for p in problems], problems

    env.sql("SELECT finalize.register_partition(%s, 'hour=12', 'all/hour=12/', %s)", (TABLE, at(12, 0)))
    env.sql("SELECT finalize.register_partition(%s, 'hour=12', 'all/hour=12/', %s)", (shard("db01"), at(12, 0)))
    released, codes, problems = gate_at(shard("db01"), "hour=12", "g1")
    assert not released and codes == ["unknown_shard"], problems
    assert 'registers partition "hour=12" of "sales.orders"' in problems[0]["detail"], problems
    assert env.one("SELECT finalize.released_generation(%s, 'hour=12')", (shard("db01"),)) is None
    env.sql("SELECT finalize.set_projection(%s, 'all/hour={hour}/', '2026-11-02', '2026-11-03')", (TABLE,))
    released, codes, problems = gate_at(TABLE, "shard=db01/hour=12", "g1")
    assert not released and codes == ["unknown_shard"], problems
    assert published(env, "shard=db01/hour=12") is None

    # db02 captures again: hour 12 is final in every shard, and released as every shard's.
    lagging.call("sim.capture_start")
    lagging.call("sim.advance", seconds=10)
    env.wait_caught_up(shard("db02"), lagging)
    verdict, truth = assert_truth(env, shards)
    assert wait_sharded(env, truth) == at(13, 0)
    released, codes, problems = gate_at(TABLE, "hour=12", "g1")
    assert (released, codes) == (True, []), problems
    assert published(env, "hour=12") == ("g1", "all/hour=12/")
