-- finalize 0.3.0 to 0.4.0, after the rerunnable parts (CONTRIBUTING.md,
-- "Changing SQL objects and versions"): what needs a function they make.

-- The finalize_airflow wrapper needs its validator
-- (finalize_internal.airflow_validator, src/sql/11e_airflow_validator.sql).
CREATE FOREIGN DATA WRAPPER finalize_airflow
    VALIDATOR finalize_internal.airflow_validator;
COMMENT ON FOREIGN DATA WRAPPER finalize_airflow IS
    'Airflow API servers that publications post asset events to (finalize.add_publication(..., target => ...))';
GRANT USAGE ON FOREIGN DATA WRAPPER finalize_airflow TO finalize_admin;
