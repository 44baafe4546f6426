/*
 * azure_options.c
 *     The validator of the finalize_azure wrapper (Azure Blob Storage and
 *     ADLS Gen2 containers, read through the Blob endpoint): its options,
 *     where each belongs and what each accepts. The checking itself is
 *     core/fdw_options.c's; store.c reads the options.
 *
 * Secrets (the account key, a SAS token, a client secret) belong to user
 * mappings only; a user mapping holds one kind of credentials.
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_user_mapping.h"
#include "fmgr.h"

#include "core/fdw_options.h"

PG_FUNCTION_INFO_V1(finalize_azure_validator);

/* Accepts a storage account name: 3 to 24 lower-case letters and digits. */
static bool
check_account(const char *value)
{
	size_t		len = strlen(value);

	if (len < 3 || len > 24)
		return false;
	for (const char *s = value; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9')))
			return false;
	return true;
}

/*
 * Accepts a container name: 3 to 63 lower-case letters, digits and
 * hyphens, starting and ending with a letter or digit, no two hyphens in a
 * row.
 */
static bool
check_container(const char *value)
{
	size_t		len = strlen(value);

	if (len < 3 || len > 63 || value[0] == '-' || value[len - 1] == '-' || strstr(value, "--") != NULL)
		return false;
	for (const char *s = value; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-'))
			return false;
	return true;
}

/* Accepts the absolute path of a PEM file of CA certificates (fdw_check_ca_file's rule). */
static bool
check_ca_file(const char *value)
{
	return strlen(value) <= 1024 && fdw_check_header_value(value) && fdw_check_ca_file(value);
}

/* Accepts a page size of a listing: 1 to 5000 (List Blobs' most). */
static bool
check_page_size(const char *value)
{
	char	   *end;
	long		n = strtol(value, &end, 10);

	return end != value && *end == '\0' && n >= 1 && n <= 5000;
}

/* Accepts a tenant: a GUID or a domain (letters, digits, dots, hyphens). */
static bool
check_tenant(const char *value)
{
	if (value[0] == '\0' || strlen(value) > 253)
		return false;
	for (const char *s = value; *s; s++)
		if (!isalnum((unsigned char) *s) && *s != '.' && *s != '-')
			return false;
	return true;
}

/* Accepts a SAS token: a query string of at least REDACT_MIN_SECRET bytes, no control bytes, spaces or "#". */
static bool
check_sas(const char *value)
{
	return fdw_check_secret(value) && strpbrk(value, " #") == NULL && strchr(value, '=') != NULL;
}

static const FdwOption azure_options[] = {
	{"account", ForeignServerRelationId, false, check_account,
	"The account is a storage account's name: 3 to 24 lower-case letters and digits."},
	{"container", ForeignServerRelationId, false, check_container,
	"The container name has 3 to 63 lower-case letters, digits and hyphens, starts and ends with a letter or digit, and has no two hyphens in a row."},
	{"endpoint", ForeignServerRelationId, false, fdw_check_service_url,
	"The endpoint is the account's Blob URL (default https://<account>.blob.core.windows.net); https://, or http:// only to this machine (the emulator: http://127.0.0.1:10000/devstoreaccount1)."},
	{"token_endpoint", ForeignServerRelationId, false, fdw_check_service_url,
	"The token endpoint is where Entra ID tokens are asked for (default https://login.microsoftonline.com/<tenant_id>/oauth2/v2.0/token); https://, or http:// only to this machine."},
	{"scope", ForeignServerRelationId, false, fdw_check_header_value,
	"The scope is the OAuth2 scope asked for (default https://storage.azure.com/.default), without control characters."},
	{"ca_file", ForeignServerRelationId, false, check_ca_file,
	"The ca_file option is the absolute path of a PEM file of CA certificates the PostgreSQL server can read, a regular file of at most 1 MB (default: the system's trusted CAs)."},
	{"page_size", ForeignServerRelationId, false, check_page_size,
	"The page size is the number of blobs a listing's page asks for, 1 to 5000 (the default)."},
	{"account_key", UserMappingRelationId, true, fdw_check_secret,
	"The account key is the storage account's base64 key (Shared Key), at least 8 characters, without control characters."},
	{"sas_token", UserMappingRelationId, true, check_sas,
	"The SAS token is a shared access signature's query string (sv=...&sig=...), at least 8 characters, without spaces, \"#\" or control characters."},
	{"tenant_id", UserMappingRelationId, false, check_tenant,
	"The tenant id is the Entra ID tenant's GUID or domain."},
	{"client_id", UserMappingRelationId, false, fdw_check_header_value,
	"The client id is the application's id, without control characters."},
	{"client_secret", UserMappingRelationId, true, fdw_check_secret,
	"The client secret is at least 8 characters, without control characters."},
	{NULL}
};

/*
 * Refuses a user mapping with two kinds of credentials, or client
 * credentials without their secret: which one would be used must not be a
 * guess.
 */
static void
check_one_kind(List *opts)
{
	bool		key = fdw_option_value(opts, "account_key", NULL) != NULL;
	bool		sas = fdw_option_value(opts, "sas_token", NULL) != NULL;
	bool		client = fdw_option_value(opts, "client_id", NULL) != NULL ||
		fdw_option_value(opts, "client_secret", NULL) != NULL ||
		fdw_option_value(opts, "tenant_id", NULL) != NULL;

	if ((int) key + (int) sas + (int) client > 1)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
				 errmsg("a user mapping of finalize_azure holds one kind of credentials"),
				 errdetail("It has more than one of account_key (Shared Key), sas_token (SAS) and tenant_id, "
						   "client_id and client_secret (Microsoft Entra ID)."),
				 errhint("Drop the others: ALTER USER MAPPING ... OPTIONS (DROP ...).")));
	if (client && (fdw_option_value(opts, "client_id", NULL) == NULL ||
				   fdw_option_value(opts, "client_secret", NULL) == NULL))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("a user mapping of finalize_azure with Entra ID credentials needs client_id and client_secret"),
				 errhint("Add the missing one: ALTER USER MAPPING ... OPTIONS (ADD ...).")));
}

/*
 * Validator of the finalize_azure wrapper (Azure containers read by the
 * gate, release_iceberg and the lake, written by markers).
 */
Datum
finalize_azure_validator(PG_FUNCTION_ARGS)
{
	List	   *opts = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			context = PG_GETARG_OID(1);

	fdw_validate_options("finalize_azure", azure_options, opts, context);
	if (context == UserMappingRelationId)
		check_one_kind(opts);
	PG_RETURN_VOID();
}
