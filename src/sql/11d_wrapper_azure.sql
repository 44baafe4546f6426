-- Azure Blob Storage and ADLS Gen2 containers (read through the Blob
-- endpoint) are foreign servers of finalize_azure (options account,
-- container, endpoint, token_endpoint, scope, ca_file, page_size); the
-- credentials (account_key, sas_token, or tenant_id, client_id and
-- client_secret) live in user mappings, and each reader uses its own, as
-- with finalize_s3 (src/store/).
CREATE OR REPLACE FUNCTION finalize_internal.azure_validator(options text[], catalog oid)
RETURNS void
AS 'MODULE_PATHNAME', 'finalize_azure_validator'
LANGUAGE C STRICT;
