-- finalize install script, assembled by the Makefile from src/sql/*.sql in
-- name order. Everything lives in schema finalize (not relocatable).

\echo Use "CREATE EXTENSION finalize" to load this file. \quit

-- An LSN as SQL Server prints it: 0x and 20 upper-case hex digits. Text in the
-- "C" collation, so string order is LSN order and JSON carries it unchanged.
CREATE DOMAIN @extschema@.lsn AS text COLLATE "C"
    CONSTRAINT lsn_format CHECK (VALUE ~ '^0x[0-9A-F]{20}$');
COMMENT ON DOMAIN @extschema@.lsn IS
    'SQL Server log sequence number as 0x followed by 20 upper-case hex digits';
