-- finalize 0.3.0 to 0.4.0, after the rerunnable parts (CONTRIBUTING.md,
-- "Changing SQL objects and versions"): what needs the functions they made.

-- >>> finalize_dagster (issue 44, the dagster publication target) >>>
-- The wrapper needs its validator, made by src/sql/11d_wrapper_dagster.sql.
CREATE FOREIGN DATA WRAPPER finalize_dagster
    VALIDATOR finalize_internal.dagster_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_dagster IS
    'Dagster webservers that publications report partitions'' materializations to (finalize.add_publication)';
GRANT USAGE ON FOREIGN DATA WRAPPER finalize_dagster TO finalize_admin;
-- <<< finalize_dagster <<<

-- The finalize_airflow wrapper needs its validator, made by
-- src/sql/11d_wrapper_airflow.sql.
CREATE FOREIGN DATA WRAPPER finalize_airflow
    VALIDATOR finalize_internal.airflow_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_airflow IS
    'Airflow API servers that publications post asset events to (finalize.add_publication(..., target => ...))';
GRANT USAGE ON FOREIGN DATA WRAPPER finalize_airflow TO finalize_admin;

-- The finalize_azure wrapper (issue 45) needs its validator, made by
-- src/sql/11d_wrapper_azure.sql.
CREATE FOREIGN DATA WRAPPER finalize_azure
    VALIDATOR finalize_internal.azure_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_azure IS
    'Azure Blob Storage and ADLS Gen2 containers read by finalize.release_gate, release_iceberg and the lake, and written by success_marker publications';
GRANT USAGE ON FOREIGN DATA WRAPPER finalize_azure TO finalize_admin;
