-- A partition location registered explicitly (the catalog of engines that
-- list partitions).
CREATE TABLE @extschema@.partition_registration (
    table_id       bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    partition      text NOT NULL CHECK (partition <> ''),
    location       text NOT NULL,
    registered_at  timestamptz NOT NULL DEFAULT now(),
    registered_by  name NOT NULL,
    PRIMARY KEY (table_id, partition),
    period_start   timestamptz,
    period_end     timestamptz,
    CONSTRAINT partition_registration_period_check
        CHECK ((period_start IS NULL) = (period_end IS NULL) AND period_end > period_start)
);
COMMENT ON TABLE @extschema@.partition_registration IS
    'Explicitly registered partition locations (prefixes inside the store)';
COMMENT ON COLUMN @extschema@.partition_registration.period_start IS
    'The periods the partition holds, [period_start, period_end), whole periods of its table (NULL: not registered; the manifest must give them)';

-- A projection rule: partitions whose period starts in [range_start,
-- range_end) are visible at the location the template renders (UTC).
CREATE TABLE @extschema@.projection (
    table_id           bigint PRIMARY KEY REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    location_template  text NOT NULL,
    range_start        timestamptz NOT NULL,
    range_end          timestamptz NOT NULL CHECK (range_end > range_start),
    set_at             timestamptz NOT NULL DEFAULT now(),
    set_by             name NOT NULL
);
COMMENT ON TABLE @extschema@.projection IS
    'Partition projection: a location template and the range of periods it makes visible';

-- Every release attempt, with its full comparison report: the report
-- column holds the catalog view, the facts, the problems and a summary of
-- the listing; the manifest is kept as the publisher gave it, and the
-- listing as what differs from it (listing_delta, the compact form of
-- src/gate/inventory_codec.c). finalize.release_report() rebuilds the full
-- report. Attempts stored by 0.1.0 hold the whole listing in report and
-- NULL in the two columns.
CREATE TABLE @extschema@.release (
    release_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_id       bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    partition      text NOT NULL,
    generation     text NOT NULL,
    store          text NOT NULL,
    prefix         text NOT NULL,
    released       boolean NOT NULL,
    period_start   timestamptz,
    problems       jsonb NOT NULL,
    report         jsonb NOT NULL,
    requested_by   name NOT NULL,
    requested_at   timestamptz NOT NULL DEFAULT now(),
    manifest       jsonb,
    listing_delta  bytea,
    period_end     timestamptz
);
CREATE INDEX release_partition_idx ON @extschema@.release (table_id, partition, release_id);
-- Manifests of large partitions hold millions of entries: lz4 compresses
-- them several times faster than pglz, where the server was built with it.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_settings
                WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE @extschema@.release ALTER COLUMN report SET COMPRESSION lz4,
            ALTER COLUMN manifest SET COMPRESSION lz4, ALTER COLUMN listing_delta SET COMPRESSION lz4;
    END IF;
END
$$;
COMMENT ON TABLE @extschema@.release IS
    'Release attempts: manifest, listing, catalog view, problems and outcome';
COMMENT ON COLUMN @extschema@.release.manifest IS
    'The manifest as the publisher gave it (NULL for attempts stored by 0.1.0, whose report holds it)';
COMMENT ON COLUMN @extschema@.release.period_end IS
    'With period_start: the periods the release held and was checked for, [period_start, period_end)';
COMMENT ON COLUMN @extschema@.release.listing_delta IS
    'The listing as what differs from the manifest, front-coded (finalize.release_report rebuilds it)';

-- The published generation of each partition: what readers see.
CREATE TABLE @extschema@.published (
    table_id       bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    partition      text NOT NULL,
    generation     text NOT NULL,
    prefix         text NOT NULL,
    release_id     bigint NOT NULL REFERENCES @extschema@.release,
    published_at   timestamptz NOT NULL,
    PRIMARY KEY (table_id, partition)
);
COMMENT ON TABLE @extschema@.published IS
    'The release marker: the generation readers of each partition see';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.partition_registration', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.projection', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.release', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.published', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.release_release_id_seq', '');

-- Serializes everything that reads or changes the catalog view of one
-- partition until the end of the transaction. First the tracked table's row
-- (shared, so it cannot be untracked meanwhile, and in the order
-- untrack_table locks), then finalize.catalog_lock: the table's row
-- (partition '') shared by releases and registrations and taken exclusively
-- by set_projection, which changes every partition's view, then the
-- partition's row exclusively. Row locks of tables only finalize writes,
-- not advisory locks, whose keys any role could take and hold.
CREATE TABLE @extschema@.catalog_lock (
    table_id   bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    partition  text NOT NULL,
    PRIMARY KEY (table_id, partition)
);
COMMENT ON TABLE @extschema@.catalog_lock IS
    'Rows locked to serialize changes of a partition''s catalog view (partition '''' stands for the whole table)';

-- Where readers may be sent: the published prefixes and the registered
-- locations (with one trailing slash), indexed bytewise so that
-- retired_generations finds overlaps by probes, not by comparing every pair.
CREATE INDEX published_prefix_idx ON @extschema@.published ((prefix COLLATE "C"));
CREATE INDEX partition_registration_location_idx
    ON @extschema@.partition_registration (((rtrim(location, '/') || '/') COLLATE "C"));
