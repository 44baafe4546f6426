-- finalize install script, assembled by the Makefile from src/sql/*.sql in
-- name order. The user's API lives in schema finalize (not relocatable),
-- the internal functions in schema finalize_internal, which is on no one's
-- search_path (as TimescaleDB keeps its own in _timescaledb_functions).

\echo Use "CREATE EXTENSION finalize" to load this file. \quit

CREATE SCHEMA finalize_internal;
COMMENT ON SCHEMA finalize_internal IS
    'Internal functions of extension finalize: not an API, they change between versions';

-- An LSN as SQL Server prints it: 0x and 20 upper-case hex digits. Text in the
-- "C" collation, so string order is LSN order and JSON carries it unchanged.
CREATE DOMAIN @extschema@.lsn AS text COLLATE "C"
    CONSTRAINT lsn_format CHECK (VALUE ~ '^0x[0-9A-F]{20}$');
COMMENT ON DOMAIN @extschema@.lsn IS
    'SQL Server log sequence number as 0x followed by 20 upper-case hex digits';
