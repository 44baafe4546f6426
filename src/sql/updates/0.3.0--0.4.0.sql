-- finalize 0.3.0 to 0.4.0: the hand-written step (CONTRIBUTING.md,
-- "Changing SQL objects and versions"). Every function, view, trigger and
-- grant is made again by the rerunnable parts of src/sql/.

-- Publications (issue 44): the incident of a failing publication.
ALTER TABLE @extschema@.alert DROP CONSTRAINT alert_kind_check,
    ADD CONSTRAINT alert_kind_check
        CHECK (kind IN ('unreachable', 'timeout', 'tls_failed', 'configuration', 'sql_error',
                        'no_max_lsn', 'internal_error', 'server_dropped', 'timezone_mismatch',
                        'clock_skew', 'commit_time_ahead', 'capture_stalled', 'no_access',
                        'read_failed', 'record_failed', 'lock_timeout', 'lsn_regressed',
                        'no_capture_instance', 'source_replaced', 'event_column_invalid',
                        'data_loss', 'schema_blocked', 'schema_change', 'consumer_stalled',
                        'late_data', 'release_rejected', 'freshness', 'consumer_locked',
                        'start_unreadable', 'catalog_unreachable', 'catalog_auth_failed',
                        'table_not_found', 'property_malformed', 'metadata_malformed',
                        'report_ahead', 'clock_stepped_back', 'publication_failing',
                        'store_unreachable', 'store_auth_failed', 'log_malformed', 'checkpoint_only',
                        'lsn_missing', 'kerberos_failed'));

-- Publications and their outbox, as src/sql/11f_publications.once.sql
-- creates them.
-- Publications (docs/publishing.md): each period of a table that becomes
-- final is sent to a target where its consumers wait. The outbox is
-- publication_event: a row is written by the transaction that makes its
-- period final, and the delivery worker sends it after that commit.
CREATE TABLE @extschema@.publication (
    publication_id  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_id        bigint NOT NULL REFERENCES @extschema@.tracked_table ON DELETE CASCADE,
    name            text COLLATE "C" NOT NULL,
    target_kind     text NOT NULL
                    CONSTRAINT publication_target_kind_check
                    CHECK (target_kind IN ('airflow', 'dagster', 'iceberg_property', 'success_marker', 'webhook')),
    -- by name, not OID: a dump and restore or pg_upgrade keeps names only;
    -- NULL for a success_marker on file://
    server_name     text,
    options         jsonb NOT NULL DEFAULT '{}',
    -- the start of the first period it publishes, and the end of the last
    -- period it recorded an event for (its cursor; never moves back)
    started_from    timestamptz NOT NULL,
    enqueued_until  timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    created_by      name NOT NULL DEFAULT current_user,
    failing_since   timestamptz,
    last_error      text,
    last_delivered_at timestamptz,
    -- the end of the last final period delivered
    delivered_until timestamptz,
    -- when the head of its queue may be claimed; NULL: nothing pending,
    -- or the head is in flight
    head_due        timestamptz,
    UNIQUE (table_id, name),
    CHECK (enqueued_until >= started_from)
);
COMMENT ON TABLE @extschema@.publication IS
    'Publications: each period of a table that becomes final is sent to a target (docs/publishing.md)';
COMMENT ON COLUMN @extschema@.publication.enqueued_until IS
    'The end of the last period recorded in the outbox for this publication: its cursor, never moved back';
CREATE INDEX publication_table_idx ON @extschema@.publication (table_id);
-- The delivery worker claims the publication whose head is due first.
CREATE INDEX publication_head_due_idx ON @extschema@.publication (head_due) WHERE head_due IS NOT NULL;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.publication', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.publication_publication_id_seq', '');

-- The outbox: one event per period (or late-data report) and publication,
-- delivered one at a time per publication in event_seq order, at least
-- once, under event_id.
CREATE TABLE @extschema@.publication_event (
    event_seq       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        uuid NOT NULL UNIQUE DEFAULT pg_catalog.gen_random_uuid(),
    publication_id  bigint NOT NULL REFERENCES @extschema@.publication ON DELETE CASCADE,
    kind            text NOT NULL
                    CONSTRAINT publication_event_kind_check CHECK (kind IN ('final', 'late_data')),
    period_start    timestamptz NOT NULL,
    period_end      timestamptz NOT NULL,
    -- rendered when recorded: a retry sends the same key and location
    partition_key   text NOT NULL,
    location        text,
    -- the verdict it was recorded under (finalized_until() then)
    finalized_until timestamptz NOT NULL,
    detail          jsonb,
    state           text NOT NULL DEFAULT 'pending'
                    CONSTRAINT publication_event_state_check CHECK (state IN ('pending', 'delivered')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt    timestamptz NOT NULL DEFAULT now(),
    claimed_at      timestamptz,
    last_attempt_at timestamptz,
    last_status     integer,
    last_error      text,
    delivered_at    timestamptz,
    outcome         text CONSTRAINT publication_event_outcome_check CHECK (outcome IN ('sent', 'already')),
    CHECK (period_end > period_start),
    CHECK (kind <> 'final' OR period_end <= finalized_until),
    CHECK ((state = 'delivered') = (delivered_at IS NOT NULL))
);
COMMENT ON TABLE @extschema@.publication_event IS
    'The outbox of publications: written by the transaction that made the period final, sent after it';
CREATE INDEX publication_event_pending_idx ON @extschema@.publication_event (publication_id, event_seq)
    WHERE state = 'pending';
CREATE INDEX publication_event_delivered_idx ON @extschema@.publication_event (delivered_at)
    WHERE state = 'delivered';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.publication_event', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.publication_event_event_seq_seq', '');

-- Delta Lake consumers (issue 45), as src/sql/08b_lake.once.sql makes
-- them: lake_consumer holds them beside the Iceberg ones.
ALTER TABLE @extschema@.lake_consumer
    ALTER COLUMN iceberg_table DROP NOT NULL,
    ALTER COLUMN ref DROP NOT NULL,
    ALTER COLUMN lsn_property DROP NOT NULL,
    ADD COLUMN delta_table text,
    ADD COLUMN lsn_from text,
    ADD COLUMN seen_identity text,
    DROP CONSTRAINT lake_consumer_condition_check,
    ADD CONSTRAINT lake_consumer_condition_check
        CHECK (condition IN ('catalog_unreachable', 'catalog_auth_failed', 'table_not_found',
                             'property_malformed', 'metadata_malformed', 'store_unreachable',
                             'store_auth_failed', 'log_malformed', 'checkpoint_only', 'lsn_missing')),
    ADD CONSTRAINT lake_consumer_kind_check
        CHECK (CASE WHEN delta_table IS NULL THEN num_nulls(iceberg_table, ref, lsn_property) = 0 AND lsn_from IS NULL
                    ELSE num_nulls(iceberg_table, ref, lsn_property) = 3 AND lsn_from IS NOT NULL END);
COMMENT ON TABLE @extschema@.lake_consumer IS
    'Consumers whose progress is the LSN property of an Iceberg table''s snapshots, read through a finalize_iceberg catalog, or the LSN of a Delta Lake table''s commits, read from its store';
COMMENT ON COLUMN @extschema@.lake_consumer.delta_table IS
    'A Delta consumer''s table: its location (s3://, abfss://, file://, ...) in the store server_name names';
COMMENT ON COLUMN @extschema@.lake_consumer.lsn_from IS
    'Where a Delta consumer''s commits carry the LSN: userMetadata, userMetadata.<key of its JSON>, or a top-level key of commitInfo';
COMMENT ON COLUMN @extschema@.lake_consumer.seen_identity IS
    'A Delta consumer''s store (its server''s oid and location) and the identity of the version read last in the store''s listing (size and ETag or MD5), a line each: either changing is a rollback';
-- lake_observe takes the Delta consumer's identity (seen_identity).
DROP FUNCTION finalize_internal.lake_observe(bigint, bigint, text, text, text, bigint, bigint, bigint, text, text,
                                             boolean, text, text);
CREATE DOMAIN @extschema@.delta_location AS text;
COMMENT ON DOMAIN @extschema@.delta_location IS
    'The location of a Delta Lake table (s3://bucket/path, abfss://container@account.dfs.core.windows.net/path, file:///path)';

-- changes_by_period: ranges whose last commit is stamped after their end,
-- as src/sql/03_tables.once.sql creates the index.
-- Ranges whose last commit is stamped after their end (SQL Server's clock
-- went back inside them) are rare: changes_by_period reaches back by their
-- lag when it searches ranges by end_commit_time.
CREATE INDEX fact_clock_lag_idx
    ON @extschema@.fact (table_id)
    WHERE kind = 'range' AND last_commit_time > end_commit_time;

-- Kerberos logins (issue 46): the condition of a source that has no ticket,
-- and when its ticket ends, as src/sql/03_tables.once.sql creates them.
ALTER TABLE @extschema@.source_status DROP CONSTRAINT source_status_condition_check,
    ADD CONSTRAINT source_status_condition_check
        CHECK (condition IN ('starting', 'ok', 'capture_stalled', 'no_worker', 'server_dropped',
                             'configuration', 'commit_time_ahead', 'unreachable', 'timeout',
                             'cancelled', 'sql_error', 'no_max_lsn', 'timezone_mismatch',
                             'clock_skew', 'internal_error', 'tls_failed', 'kerberos_failed')),
    ADD COLUMN ticket_expires timestamptz;
COMMENT ON COLUMN @extschema@.source_status.ticket_expires IS
    'authentication kerberos: when the service ticket for SQL Server ends (finalize gets a new one from the keytab before); NULL otherwise, or when it has none';
