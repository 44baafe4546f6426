-- The durable alert log (docs/design/alerts.md): one row per incident,
-- deduplicated while it is open, resolved when its condition clears or
-- acknowledged by a person. NOTIFY finalize_alert (_alert) stays for
-- listeners; the incidents are what a person (or a webhook) reads later.

CREATE TABLE @extschema@.alert (
    alert_id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             text NOT NULL
                     CONSTRAINT alert_kind_check
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
                                     'store_unreachable', 'store_auth_failed', 'log_malformed',
                                     'checkpoint_only', 'lsn_missing', 'kerberos_failed')),
    severity         text NOT NULL
                     CONSTRAINT alert_severity_check CHECK (severity IN ('info', 'warning', 'critical')),
    table_id         bigint REFERENCES @extschema@.tracked_table ON DELETE SET NULL,
    table_name       text,
    server_name      text,
    subject          text NOT NULL DEFAULT '',
    state            text NOT NULL DEFAULT 'open'
                     CONSTRAINT alert_state_check CHECK (state IN ('open', 'acknowledged', 'resolved')),
    opened_at        timestamptz NOT NULL DEFAULT now(),
    last_seen        timestamptz NOT NULL DEFAULT now(),
    count            bigint NOT NULL DEFAULT 1 CHECK (count >= 1),
    message          text NOT NULL,
    detail           jsonb,
    resolved_at      timestamptz,
    acknowledged_at  timestamptz,
    acknowledged_by  name,
    acknowledge_note text,
    -- The incident's name at webhook targets (PagerDuty's dedup_key,
    -- Opsgenie's alias): random, so two clusters, a reinstall or a copy
    -- restored elsewhere never share an incident there, and kept with the
    -- row, so a restore or a renamed database resolves what it opened.
    dedup_key        text NOT NULL UNIQUE DEFAULT 'finalize-' || pg_catalog.gen_random_uuid()::text,
    CHECK ((state = 'resolved') = (resolved_at IS NOT NULL)),
    CHECK ((state = 'acknowledged') <= (acknowledged_at IS NOT NULL))
);
COMMENT ON TABLE @extschema@.alert IS
    'Incidents: one row per condition that froze or endangered a verdict, deduplicated while open, resolved when it clears';
-- At most one incident per condition is not resolved: raising it again
-- updates that one. By table name, which stays when a deleted table's id
-- turns NULL (two tables' incidents never collapse into one).
CREATE UNIQUE INDEX alert_open_idx
    ON @extschema@.alert (kind, coalesce(table_name, ''), coalesce(server_name, ''), subject)
    WHERE state <> 'resolved';
-- Retention deletes resolved incidents by age.
CREATE INDEX alert_last_seen_idx ON @extschema@.alert (last_seen);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.alert', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.alert_alert_id_seq', '');
