-- The consumers whose progress is an Iceberg table's: where to read it and
-- what the lake worker saw last.
CREATE TABLE @extschema@.lake_consumer (
    lake_id           bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    table_id          bigint NOT NULL,
    consumer          text COLLATE "C" NOT NULL,
    server_name       text NOT NULL,
    iceberg_table     text NOT NULL,
    ref               text NOT NULL,
    lsn_property      text NOT NULL,
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
                                           'property_malformed', 'metadata_malformed')),
    condition_since   timestamptz,
    last_error        text,
    PRIMARY KEY (table_id, consumer),
    FOREIGN KEY (table_id, consumer) REFERENCES @extschema@.consumer ON DELETE CASCADE,
    CHECK ((condition IS NULL) = (condition_since IS NULL))
);
COMMENT ON TABLE @extschema@.lake_consumer IS
    'Consumers whose progress is the LSN property of an Iceberg table''s snapshots, read through a finalize_iceberg catalog';
COMMENT ON COLUMN @extschema@.lake_consumer.lake_id IS
    'Which declaration a lake worker''s observation is for: a consumer dropped and added again mid-poll gets none of the old one''s';
COMMENT ON COLUMN @extschema@.lake_consumer.seen_snapshot_id IS
    'The snapshot whose LSN property was recorded last';
COMMENT ON COLUMN @extschema@.lake_consumer.seen_head_id IS
    'The ref''s head when the recorded LSN was last proven: the next poll checks that the ref still descends from it';
COMMENT ON COLUMN @extschema@.lake_consumer.polled_at IS
    'When the lake worker last looked (written when something changed, else at most once a minute)';
CREATE INDEX lake_consumer_server_idx ON @extschema@.lake_consumer (server_name);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.lake_consumer', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.lake_consumer_lake_id_seq', '');
