CREATE TYPE @extschema@.verdict AS (
    table_name       text,
    period_start     timestamptz,
    period_end       timestamptz,
    is_final         boolean,
    finalized_until  timestamptz,
    captured_until   timestamptz,
    lag              interval,
    state            text,
    reason           text,
    period_zone      text,
    local_period_start text,
    local_finalized_until text,
    tracked_since    timestamptz
);
COMMENT ON TYPE @extschema@.verdict IS
    'A verdict with its explanation, as returned by finalize.explain_verdict';
