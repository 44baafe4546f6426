-- The consumers whose progress is an Iceberg table's or a Delta Lake
-- table's: where to read it and what the lake worker saw last. A Delta
-- consumer has delta_table and lsn_from (server_name names its store: a
-- server, or a file:// URL) and keeps the same columns of what it saw: the
-- version read last (seen_head_id) and its commit time in milliseconds
-- (seen_head_sequence), the newest carrier's version (seen_snapshot_id)
-- and metaData.id (seen_table_uuid).
CREATE TABLE @extschema@.lake_consumer (
    lake_id           bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    table_id          bigint NOT NULL,
    consumer          text COLLATE "C" NOT NULL,
    server_name       text NOT NULL,
    iceberg_table     text,
    ref               text,
    lsn_property      text,
    seen_snapshot_id  bigint,
    seen_head_id      bigint,
    seen_head_sequence bigint,
    seen_lsn          @extschema@.lsn,
    seen_table_uuid   text,
    seen_at           timestamptz,
    polled_at         timestamptz,
    loaded_at         timestamptz,
    condition         text
                      CONSTRAINT lake_consumer_condition_check
                      CHECK (condition IN ('catalog_unreachable', 'catalog_auth_failed', 'table_not_found',
                                           'property_malformed', 'metadata_malformed', 'store_unreachable',
                                           'store_auth_failed', 'log_malformed', 'checkpoint_only',
                                           'lsn_missing')),
    condition_since   timestamptz,
    last_error        text,
    delta_table       text,
    lsn_from          text,
    seen_identity     text,
    PRIMARY KEY (table_id, consumer),
    FOREIGN KEY (table_id, consumer) REFERENCES @extschema@.consumer ON DELETE CASCADE,
    CHECK ((condition IS NULL) = (condition_since IS NULL)),
    CONSTRAINT lake_consumer_kind_check
        CHECK (CASE WHEN delta_table IS NULL THEN num_nulls(iceberg_table, ref, lsn_property) = 0 AND lsn_from IS NULL
                    ELSE num_nulls(iceberg_table, ref, lsn_property) = 3 AND lsn_from IS NOT NULL END)
);
COMMENT ON TABLE @extschema@.lake_consumer IS
    'Consumers whose progress is the LSN property of an Iceberg table''s snapshots, read through a finalize_iceberg catalog, or the LSN of a Delta Lake table''s commits, read from its store';
COMMENT ON COLUMN @extschema@.lake_consumer.lake_id IS
    'Which declaration a lake worker''s observation is for: a consumer dropped and added again mid-poll gets none of the old one''s';
COMMENT ON COLUMN @extschema@.lake_consumer.seen_snapshot_id IS
    'The snapshot whose LSN property was recorded last';
COMMENT ON COLUMN @extschema@.lake_consumer.seen_head_id IS
    'The ref''s head when the recorded LSN was last proven: the next poll checks that the ref still descends from it';
COMMENT ON COLUMN @extschema@.lake_consumer.polled_at IS
    'When the lake worker last looked (written when something changed, else at most once a minute)';
COMMENT ON COLUMN @extschema@.lake_consumer.delta_table IS
    'A Delta consumer''s table: its location (s3://, abfss://, file://, ...) in the store server_name names';
COMMENT ON COLUMN @extschema@.lake_consumer.lsn_from IS
    'Where a Delta consumer''s commits carry the LSN: userMetadata, userMetadata.<key of its JSON>, or a top-level key of commitInfo';
COMMENT ON COLUMN @extschema@.lake_consumer.seen_identity IS
    'A Delta consumer''s store (its server''s oid and location) and the identity of the version read last in the store''s listing (size and ETag or MD5), a line each: either changing is a rollback';
CREATE INDEX lake_consumer_server_idx ON @extschema@.lake_consumer (server_name);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.lake_consumer', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.lake_consumer_lake_id_seq', '');

-- The location of a Delta table, as add_consumer's delta_table takes it: a
-- domain of its own, so that the Delta overload of add_consumer never
-- matches a positional call of the Iceberg one (text, text, text, text):
-- PostgreSQL prefers text to a domain for an untyped literal.
CREATE DOMAIN @extschema@.delta_location AS text;
COMMENT ON DOMAIN @extschema@.delta_location IS
    'The location of a Delta Lake table (s3://bucket/path, abfss://container@account.dfs.core.windows.net/path, file:///path)';
