-- ===========================================================================
-- Dump and restore: the workers never act on a half-restored catalog.
-- ===========================================================================
--
-- pg_restore loads finalize's tables one COPY at a time, each committed on
-- its own (in parallel with -j), after CREATE EXTENSION has made them
-- empty. A worker of the target cluster that acted in between would record
-- on a catalog whose rows are not all there: a range fact on a watermark
-- whose facts are still to come (their COPY then fails on its id, and every
-- fact is lost), a verdict without the consumers or losses that hold it, an
-- incident delivered twice. So the catalog says whether it is whole, with
-- nothing for the operator to remember:
--
-- * finalize.catalog_seal holds one row once the catalog is in use. It is
--   written by the functions that track a table (_seal_catalog), not by
--   CREATE EXTENSION: the CREATE EXTENSION of a restore is the same
--   statement as a fresh install's. Its foreign keys reference the other
--   tables whose rows pg_dump keeps (never set: NULL satisfies them), so
--   pg_dump orders its row after theirs and pg_restore loads it after them;
-- * but not the tables that purge_facts empties in bulk (event_fact,
--   lateness_hour, alert_delivery, and late_period with its table): a key
--   to one would check the seal for each row deleted (18 us a row, 30 times
--   the delete). Those are covered by the id sequences instead: pg_restore,
--   in one process as docs/upgrading.md says, sets every sequence after all
--   the rows, and each of them has an id sequence of its own
--   (alert_delivery) or a NOT NULL key to a table that has (event_fact to
--   fact, lateness_hour and late_period to tracked_table): while its rows
--   load, that sequence stands below its table's ids;
-- * finalize_internal.catalog_restoring() says why the catalog must be left alone:
--   tracked tables without the seal (a restore under way, or stopped half
--   way), or an identity sequence behind its table (pg_restore sets the
--   sequences after the rows: the tables above, and a catalog of incidents
--   only, wait for them);
-- * the scheduler starts no worker while it says so, a source worker reads
--   and records nothing, the alerts worker claims no delivery
--   (docs/upgrading.md). pg_upgrade's own servers run no finalize process at
--   all (IsBinaryUpgrade, src/finalize.c).
-- Of the sources' status pg_dump keeps only a hold that waits for a person
-- (release_source): the rest is the workers' and is written again. (Marked
-- here, last, as the update to 0.3.0 marks it.)
SELECT pg_catalog.pg_extension_config_dump('@extschema@.source_status', 'WHERE held_by IS NOT NULL');

CREATE TABLE @extschema@.catalog_seal (
    sealed           boolean PRIMARY KEY DEFAULT true CHECK (sealed),
    sealed_at        timestamptz NOT NULL DEFAULT now(),
    -- Each key orders the restore after a table's rows (and, through its
    -- own keys, after the tables that table references). None references
    -- a table that purge_facts or its cascades empty in bulk (event_fact,
    -- lateness_hour, alert_delivery; late_period, with its table): a key
    -- queues a check of the seal for every row deleted from the table it
    -- references. Those are covered by the sequence check instead (see
    -- _catalog_restoring).
    watermark        bigint REFERENCES @extschema@.watermark,
    derived_input    bigint,
    derived_input_of bigint,
    lake_consumer    bigint REFERENCES @extschema@.lake_consumer (lake_id),
    shard_consumer   bigint,
    shard_consumer_name text COLLATE "C",
    loss             bigint REFERENCES @extschema@.loss,
    loss_ack         bigint REFERENCES @extschema@.loss_ack,
    projection       bigint REFERENCES @extschema@.projection,
    registration     bigint,
    registered_partition text,
    published        bigint,
    published_partition text,
    source_status    text REFERENCES @extschema@.source_status,
    FOREIGN KEY (derived_input, derived_input_of) REFERENCES @extschema@.derived_input,
    FOREIGN KEY (shard_consumer, shard_consumer_name) REFERENCES @extschema@.shard_consumer,
    FOREIGN KEY (registration, registered_partition) REFERENCES @extschema@.partition_registration,
    FOREIGN KEY (published, published_partition) REFERENCES @extschema@.published,
    CHECK (num_nonnulls(watermark, derived_input, derived_input_of, lake_consumer, shard_consumer,
                        shard_consumer_name, loss, loss_ack, projection, registration, registered_partition,
                        published, published_partition, source_status) = 0)
);
COMMENT ON TABLE @extschema@.catalog_seal IS
    'One row once the catalog is in use; restored after the tables its foreign keys reference, so finalize''s workers wait while it is missing (and while an id sequence is behind its table)';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.catalog_seal', '');
