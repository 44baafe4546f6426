-- Airflow API servers that publications post asset events to are foreign
-- servers of finalize_airflow (option url, timeout); a token, or a
-- username and password exchanged for one, live in the user mapping of
-- the server's owner, which only its owner and superusers can read.
CREATE OR REPLACE FUNCTION finalize_internal.airflow_validator(options text[], catalog oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_airflow_validator'
LANGUAGE C STRICT;
