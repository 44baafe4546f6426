
-- Zones are stored by the zone's own name, never by a link or another
-- spelling of it ('ROK' and 'rok' as 'Asia/Seoul', 'Zulu' as 'UTC'; see
-- _check_zone), however a row is written: tracking, altering, a shard
-- taking its sharded table's settings, a restore.
CREATE OR REPLACE FUNCTION finalize_internal.canonical_zones()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.period_zone := finalize_internal.check_zone(NEW.period_zone, 'period_zone');
    IF NEW.event_time_zone IS NOT NULL THEN
        NEW.event_time_zone := finalize_internal.check_zone(NEW.event_time_zone, 'event_time_zone');
    END IF;
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER canonical_zones
    BEFORE INSERT OR UPDATE OF period_zone, event_time_zone ON @extschema@.tracked_table
    FOR EACH ROW EXECUTE FUNCTION finalize_internal.canonical_zones();

-- Every committed change of a verdict or a tracked table, or of what a
-- verdict depends on (consumers, inputs, losses and their
-- acknowledgements), bumps a shared epoch, so backends drop the verdicts
-- they cached (see verdict_cache.c).
CREATE OR REPLACE FUNCTION finalize_internal.verdict_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'finalize_verdict_changed'
LANGUAGE C;
CREATE OR REPLACE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.tracked_table
    FOR EACH STATEMENT EXECUTE FUNCTION finalize_internal.verdict_changed();
CREATE OR REPLACE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.watermark
    FOR EACH STATEMENT EXECUTE FUNCTION finalize_internal.verdict_changed();
CREATE OR REPLACE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.consumer
    FOR EACH STATEMENT EXECUTE FUNCTION finalize_internal.verdict_changed();
CREATE OR REPLACE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.derived_input
    FOR EACH STATEMENT EXECUTE FUNCTION finalize_internal.verdict_changed();
CREATE OR REPLACE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.loss
    FOR EACH STATEMENT EXECUTE FUNCTION finalize_internal.verdict_changed();
CREATE OR REPLACE TRIGGER verdict_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.loss_ack
    FOR EACH STATEMENT EXECUTE FUNCTION finalize_internal.verdict_changed();

-- Waiters of finalize.wait_final sleep until a commit wakes them: a verdict
-- that moves (finalized_until or loss_blocked) wakes only the waiters of its
-- table's shard (verdict_cache.c); any other change above wakes them all.
CREATE OR REPLACE FUNCTION finalize_internal.verdict_wake()
RETURNS trigger
AS 'MODULE_PATHNAME', 'finalize_verdict_wake'
LANGUAGE C;
CREATE OR REPLACE TRIGGER verdict_wake
    AFTER UPDATE OF finalized_until, loss_blocked ON @extschema@.watermark
    FOR EACH ROW
    WHEN (OLD.finalized_until IS DISTINCT FROM NEW.finalized_until
          OR OLD.loss_blocked IS DISTINCT FROM NEW.loss_blocked)
    EXECUTE FUNCTION finalize_internal.verdict_wake();
