-- One message to one target about one transition of an incident. The
-- event is the incident as it was at the transition (the json format's
-- body), so a retry sends the same bytes under the same idempotency key.
CREATE TABLE @extschema@.alert_delivery (
    delivery_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    alert_id        bigint NOT NULL REFERENCES @extschema@.alert ON DELETE CASCADE,
    -- by name, not OID: a dump and restore or pg_upgrade keeps names only
    target_name     text NOT NULL,
    transition      text NOT NULL
                    CONSTRAINT alert_delivery_transition_check
                    CHECK (transition IN ('open', 'acknowledge', 'resolve')),
    idempotency_key text NOT NULL,
    event           jsonb NOT NULL,
    -- the incident's severity as a rank (3 critical .. 1 info): claimed first
    priority        smallint NOT NULL,
    state           text NOT NULL DEFAULT 'pending'
                    CONSTRAINT alert_delivery_state_check CHECK (state IN ('pending', 'delivered', 'failed')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt    timestamptz NOT NULL DEFAULT now(),
    claimed_at      timestamptz,
    last_attempt_at timestamptz,
    last_status     integer,
    last_error      text,
    delivered_at    timestamptz,
    UNIQUE (target_name, idempotency_key)
);
CREATE INDEX alert_delivery_due_idx ON @extschema@.alert_delivery (priority DESC, next_attempt) WHERE state = 'pending';
CREATE INDEX alert_delivery_alert_idx ON @extschema@.alert_delivery (alert_id, target_name);
COMMENT ON TABLE @extschema@.alert_delivery IS
    'Webhook deliveries: one per incident transition and target, retried with backoff until delivered or failed';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.alert_delivery', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.alert_delivery_delivery_id_seq', '');

-- The circuit breaker of each target: after five failures in a row it
-- opens for 30 s, doubling to 10 minutes while probes fail; one delivery
-- probes it once it is due again.
CREATE TABLE @extschema@.alert_target_state (
    target_name          text PRIMARY KEY,
    consecutive_failures integer NOT NULL DEFAULT 0,
    open_until           timestamptz,
    last_success         timestamptz,
    last_failure         timestamptz,
    last_error           text
);
COMMENT ON TABLE @extschema@.alert_target_state IS
    'Webhook targets'' circuit breakers: failures in a row and until when no delivery is tried';
