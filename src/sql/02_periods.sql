-- Period arithmetic and time conversion, in C so the sensors, the write
-- path and the catalog share one implementation (src/core/period.c).
-- A table's periods are its granularity cut in its zone (period_zone): a
-- fixed stride of local time counted from 2000-01-01 00:00 (whole weeks
-- from Monday 2000-01-03: ISO weeks), or calendar months (1, 2, 3, 4, 6
-- months, whole years) from January; local boundaries resolve to the
-- earliest instant that shows them, or to the end of the DST gap that
-- skips them. In UTC a stride is date_bin's arithmetic with origin
-- 2000-01-01.

CREATE OR REPLACE FUNCTION @extschema@.period_start(ts timestamptz, granularity interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_period_start'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.period_start(timestamptz, interval) IS
    'Start of the period of the given granularity (in UTC) that contains ts';

CREATE OR REPLACE FUNCTION @extschema@.period_end(ts timestamptz, granularity interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_period_end'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.period_end(timestamptz, interval) IS
    'End (exclusive) of the period of the given granularity (in UTC) that contains ts';

CREATE OR REPLACE FUNCTION @extschema@.period_start(ts timestamptz, granularity interval, zone text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_period_start'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.period_start(timestamptz, interval, text) IS
    'Start of the period of the given granularity, cut in the given zone, that contains ts';

CREATE OR REPLACE FUNCTION @extschema@.period_end(ts timestamptz, granularity interval, zone text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_period_end'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.period_end(timestamptz, interval, text) IS
    'End (exclusive) of the period of the given granularity, cut in the given zone, that contains ts';

-- Checks that a granularity can define periods (a positive length that fits
-- in 64 bits of microseconds, or months that tile a year): the C code that
-- computes periods decides; the error names the argument.
CREATE OR REPLACE FUNCTION finalize_internal.check_granularity(granularity interval, argname text)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_check_granularity'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- The same rule as a boolean, for the CHECK constraint of
-- finalize.tracked_table.granularity: the table and the functions that take
-- a granularity cannot disagree.
CREATE OR REPLACE FUNCTION finalize_internal.granularity_valid(granularity interval)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_granularity_valid'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- A zone name of the zone database, as it spells it ('asia/seoul' is
-- 'Asia/Seoul'), or the error that names the argument.
CREATE OR REPLACE FUNCTION finalize_internal.check_zone(zone text, argname text)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_check_zone'
LANGUAGE C STABLE PARALLEL SAFE;

-- For the CHECK constraint of finalize.tracked_table.period_zone: a zone
-- the server knows, spelt as _check_zone spells it.
CREATE OR REPLACE FUNCTION finalize_internal.zone_valid(zone text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_zone_valid'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- The verdict for the period containing ts under a watermark, as is_final
-- gives it (false while there is no watermark). Every SQL function that
-- reports finality uses this: adding a granularity to a timestamptz in SQL
-- would be calendar arithmetic in the session's TimeZone.
CREATE OR REPLACE FUNCTION finalize_internal.period_final(ts timestamptz, granularity interval, zone text,
                                          finalized_until timestamptz)
RETURNS boolean
AS 'MODULE_PATHNAME', 'finalize_period_final'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- The periods that intersect [from_time, to_time), at most 100000.
CREATE OR REPLACE FUNCTION finalize_internal.periods(from_time timestamptz, to_time timestamptz, granularity interval,
                                     zone text, OUT period_start timestamptz, OUT period_end timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'finalize_periods'
LANGUAGE C IMMUTABLE PARALLEL SAFE ROWS 24;

-- The end of a span of whole periods [period_start, period_end) of a
-- table (period_end NULL: the one period at period_start), or the error
-- that names the boundary that is off, the object (what) and the nearest
-- boundaries: a partition holds whole periods.
CREATE OR REPLACE FUNCTION finalize_internal.check_period_span(period_start timestamptz, period_end timestamptz,
                                               granularity interval, zone text, what text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_check_period_span'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- An instant as PostgreSQL writes a timestamptz in ISO style with TimeZone
-- set to zone ("2026-12-06 00:00:00+09"), whatever the session's: how
-- finalize.status and explain_verdict show a verdict in its table's zone.
-- Readers may call it (finalize.status does).
CREATE OR REPLACE FUNCTION finalize_internal.local_time(ts timestamptz, zone text)
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_local_time'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

-- SQL Server local commit time to an instant, as the worker converts it: an
-- ambiguous local time (DST fall-back) is the earlier instant, a skipped one
-- (spring-forward) the earliest any nearby offset gives.
CREATE OR REPLACE FUNCTION @extschema@.mssql_local_to_instant(local_time timestamp, zone text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'finalize_local_to_instant'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.mssql_local_to_instant(timestamp, text) IS
    'Instant of a SQL Server local time in the given zone, the earliest when ambiguous';

-- An instant rounded down to a start of a table's periods (infinite and
-- NULL ones stay): how a verdict is kept when its periods change.
CREATE OR REPLACE FUNCTION finalize_internal.round_down(ts timestamptz, granularity interval, zone text)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN isfinite(ts) THEN @extschema@.period_start(ts, granularity, zone) ELSE ts END;

-- The version this library was built as; every update script compares it
-- with the version it updates to (src/sql/updates/pre-update.sql).
CREATE OR REPLACE FUNCTION finalize_internal.library_version()
RETURNS text
AS 'MODULE_PATHNAME', 'finalize_library_version'
LANGUAGE C IMMUTABLE PARALLEL SAFE;
