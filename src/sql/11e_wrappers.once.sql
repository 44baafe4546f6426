-- The foreign-data wrappers whose servers and user mappings hold what
-- finalize reaches: SQL Server, Iceberg catalogs, object stores, webhooks,
-- Airflow API servers.
-- Made once their validators exist (the rerunnable parts before this).

CREATE FOREIGN DATA WRAPPER finalize_mssql
    VALIDATOR finalize_internal.mssql_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_mssql IS
    'SQL Server databases with change data capture, read by the finalize worker';
CREATE FOREIGN DATA WRAPPER finalize_iceberg
    VALIDATOR finalize_internal.iceberg_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_iceberg IS
    'Iceberg REST catalogs whose tables'' snapshots say how far a pipeline got (finalize.add_consumer(..., iceberg_server => ...))';
CREATE FOREIGN DATA WRAPPER finalize_s3
    VALIDATOR finalize_internal.s3_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_s3 IS
    'S3-compatible object stores listed by finalize.release_gate';
CREATE FOREIGN DATA WRAPPER finalize_webhook
    VALIDATOR finalize_internal.webhook_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_webhook IS
    'Webhook targets the finalize alerts worker delivers incidents to (json, slack, pagerduty_v2, opsgenie)';

-- Admins create servers and user mappings of finalize's wrappers.
GRANT USAGE ON FOREIGN DATA WRAPPER finalize_mssql, finalize_iceberg, finalize_s3, finalize_webhook TO finalize_admin;

-- >>> finalize_dagster (issue 44, the dagster publication target) >>>
CREATE FOREIGN DATA WRAPPER finalize_dagster
    VALIDATOR finalize_internal.dagster_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_dagster IS
    'Dagster webservers that publications report partitions'' materializations to (finalize.add_publication)';
GRANT USAGE ON FOREIGN DATA WRAPPER finalize_dagster TO finalize_admin;
-- <<< finalize_dagster <<<

-- Airflow API servers that publications post asset events to (0.4.0).
CREATE FOREIGN DATA WRAPPER finalize_airflow
    VALIDATOR finalize_internal.airflow_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_airflow IS
    'Airflow API servers that publications post asset events to (finalize.add_publication(..., target => ...))';
GRANT USAGE ON FOREIGN DATA WRAPPER finalize_airflow TO finalize_admin;

-- Azure Blob Storage / ADLS Gen2 containers (0.4.0, issue 45).
CREATE FOREIGN DATA WRAPPER finalize_azure
    VALIDATOR finalize_internal.azure_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_azure IS
    'Azure Blob Storage and ADLS Gen2 containers read by finalize.release_gate, release_iceberg and the lake, and written by success_marker publications';
GRANT USAGE ON FOREIGN DATA WRAPPER finalize_azure TO finalize_admin;
