-- Period arithmetic and time conversion, in C so the sensors, the write
-- path and the catalog share one implementation. Periods are aligned like
-- date_bin with origin 2000-01-01 00:00 UTC; a granularity has no months
-- (their length varies).

CREATE FUNCTION @extschema@.period_start(ts timestamptz, granularity interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_period_start'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.period_start(timestamptz, interval) IS
    'Start of the period of the given granularity that contains ts';

CREATE FUNCTION @extschema@.period_end(ts timestamptz, granularity interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_period_end'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.period_end(timestamptz, interval) IS
    'End (exclusive) of the period of the given granularity that contains ts';

-- Checks that a granularity can define periods (no months, positive, a
-- length that fits in 64 bits of microseconds): the C code that computes
-- periods decides; the error names the argument.
CREATE FUNCTION @extschema@._check_granularity(granularity interval, argname text)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_check_granularity'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- The same rule as a boolean, for the CHECK constraint of
-- finalize.tracked_table.granularity: the table and the functions that take
-- a granularity cannot disagree.
CREATE FUNCTION @extschema@._granularity_valid(granularity interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_granularity_valid'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- The verdict for the period containing ts under a watermark, as is_final
-- gives it (false while there is no watermark). Every SQL function that
-- reports finality uses this: adding a granularity to a timestamptz in SQL
-- would be calendar arithmetic in the session's TimeZone.
CREATE FUNCTION @extschema@._period_final(ts timestamptz, granularity interval, finalized_until timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_period_final'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- The periods that intersect [from_time, to_time), at most 100000.
CREATE FUNCTION @extschema@._periods(from_time timestamptz, to_time timestamptz, granularity interval,
                                     OUT period_start timestamptz, OUT period_end timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'finalize_periods'
LANGUAGE C IMMUTABLE PARALLEL SAFE ROWS 24;

-- SQL Server local commit time to an instant, as the worker converts it: an
-- ambiguous local time (DST fall-back) is the earlier instant, a skipped one
-- (spring-forward) the earliest any nearby offset gives.
CREATE FUNCTION @extschema@.mssql_local_to_instant(local_time timestamp, zone text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_local_to_instant'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.mssql_local_to_instant(timestamp, text) IS
    'Instant of a SQL Server local time in the given zone, the earliest when ambiguous';
