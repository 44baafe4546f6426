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
