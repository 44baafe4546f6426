
-- Marks the catalog as in use (a table is tracked): from now on a catalog
-- with tracked tables but no seal is a restore under way.
CREATE OR REPLACE FUNCTION finalize_internal.seal_catalog()
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    INSERT INTO @extschema@.catalog_seal DEFAULT VALUES ON CONFLICT DO NOTHING;
END;

-- Why finalize's background processes must not act on the catalog now, or
-- NULL when it is whole (see above). Read at the start of each of their
-- rounds and cycles.
CREATE OR REPLACE FUNCTION finalize_internal.catalog_restoring()
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    unsealed boolean;
    behind text;
BEGIN
    -- One statement (a cycle's read transaction runs it every time): the
    -- seal and every sequence against its table, in one snapshot; the seal's
    -- answer comes first, as it says the more.
    -- A sequence's last id handed out is its last_value, or the one before
    -- while is_called is false (a new sequence, ALTER SEQUENCE ... RESTART,
    -- setval(..., false), as pg_dump writes such a one back): its next id is
    -- last_value then, and ids above it are not taken.
    SELECT NOT EXISTS (SELECT FROM @extschema@.catalog_seal) AND EXISTS (SELECT FROM @extschema@.tracked_table),
           string_agg(format('sequence %s stands at %s, below the greatest id of its table, %s', s.seq,
                             s.last, s.top), '; ') FILTER (WHERE s.top > s.last)
      INTO unsealed, behind
      FROM (VALUES ('tracked_table_table_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.tracked_table_table_id_seq q),
                    (SELECT max(t.table_id) FROM @extschema@.tracked_table t)),
                   ('fact_fact_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.fact_fact_id_seq q),
                    (SELECT max(f.fact_id) FROM @extschema@.fact f)),
                   ('loss_loss_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.loss_loss_id_seq q),
                    (SELECT max(l.loss_id) FROM @extschema@.loss l)),
                   ('loss_ack_ack_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.loss_ack_ack_id_seq q),
                    (SELECT max(a.ack_id) FROM @extschema@.loss_ack a)),
                   ('lake_consumer_lake_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.lake_consumer_lake_id_seq q),
                    (SELECT max(c.lake_id) FROM @extschema@.lake_consumer c)),
                   ('release_release_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.release_release_id_seq q),
                    (SELECT max(r.release_id) FROM @extschema@.release r)),
                   ('alert_alert_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.alert_alert_id_seq q),
                    (SELECT max(a.alert_id) FROM @extschema@.alert a)),
                   ('alert_delivery_delivery_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.alert_delivery_delivery_id_seq q),
                    (SELECT max(d.delivery_id) FROM @extschema@.alert_delivery d)),
                   ('publication_publication_id_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.publication_publication_id_seq q),
                    (SELECT max(p.publication_id) FROM @extschema@.publication p)),
                   ('publication_event_event_seq_seq',
                    (SELECT q.last_value - (NOT q.is_called)::integer FROM @extschema@.publication_event_event_seq_seq q),
                    (SELECT max(e.event_seq) FROM @extschema@.publication_event e))) AS s (seq, last, top);
    IF unsealed THEN
        RETURN 'finalize.catalog_seal is empty while tables are tracked: a restore of the catalog is under way '
               '(pg_restore loads that table after the ones it references), or stopped before it was complete';
    END IF;
    IF behind IS NOT NULL THEN
        RETURN 'the identity sequences of the catalog are behind its rows (pg_restore sets them after the rows): '
               || behind;
    END IF;
    RETURN NULL;
END
$$;
