/*
 * store_error.c
 *     What users see of a store's failure: the error raised in a session,
 *     in the store's own words (its code and message, every secret of the
 *     user mapping redacted) with a hint saying what to do.
 */
#include "postgres.h"

#include "utils/builtins.h"

#include "core/redact.h"
#include "store/store.h"

/* A failure to open a store (store_try_open's codes): its SQLSTATE. */
static int
open_errcode(const char *code)
{
	if (strcmp(code, "PermissionDenied") == 0 || strcmp(code, "LocalStoreDenied") == 0)
		return ERRCODE_INSUFFICIENT_PRIVILEGE;
	if (strcmp(code, "NoUserMapping") == 0)
		return ERRCODE_UNDEFINED_OBJECT;
	if (strcmp(code, "NoBucket") == 0 || strcmp(code, "NoContainer") == 0 || strcmp(code, "NoCredentials") == 0)
		return ERRCODE_FDW_OPTION_NAME_NOT_FOUND;
	return ERRCODE_INVALID_PARAMETER_VALUE;
}

/* The hint for a failure to open the store named name (of kind, when it is a server). */
static const char *
open_hint(const char *name, StoreKind kind, const StoreError *err)
{
	const char *q = quote_identifier(name);

	if (strcmp(err->code, "NoSuchServer") == 0)
		return "Name a server of the finalize_s3 or finalize_azure foreign-data wrapper (CREATE SERVER ... "
			"FOREIGN DATA WRAPPER finalize_s3), or a local directory as file:///path.";
	if (strcmp(err->code, "NotAStore") == 0)
		return "Name a server of the finalize_s3 or finalize_azure foreign-data wrapper.";
	if (strcmp(err->code, "PermissionDenied") == 0)
		return psprintf("An administrator can run GRANT USAGE ON FOREIGN SERVER %s TO the role.", q);
	if (strcmp(err->code, "NoUserMapping") == 0 && kind == STORE_AZURE)
		return psprintf("Create one: CREATE USER MAPPING FOR CURRENT_USER SERVER %s OPTIONS (sas_token '...'), or "
						"with account_key, or with tenant_id, client_id and client_secret.", q);
	if (strcmp(err->code, "NoUserMapping") == 0)
		return psprintf("Create one: CREATE USER MAPPING FOR CURRENT_USER SERVER %s OPTIONS (access_key_id '...', "
						"secret_access_key '...').", q);
	if (strcmp(err->code, "NoBucket") == 0)
		return psprintf("Name the bucket: ALTER SERVER %s OPTIONS (ADD bucket '...').", q);
	if (strcmp(err->code, "NoContainer") == 0)
		return psprintf("Name them: ALTER SERVER %s OPTIONS (ADD account '...', ADD container '...').", q);
	if (strcmp(err->code, "NoCredentials") == 0)
		return psprintf("Give the user mapping one kind of credentials: ALTER USER MAPPING FOR CURRENT_USER SERVER %s "
						"OPTIONS (ADD sas_token '...'), or account_key, or tenant_id, client_id and client_secret.", q);
	if (strcmp(err->code, "LocalStoreDenied") == 0)
		return "Reading files on the database server needs the privileges of pg_read_server_files: publish through "
			"a finalize_s3 or finalize_azure server, or have an administrator grant them.";
	return "Local stores are written file:///absolute/path (three slashes).";
}

/* Whether code is one of store_try_open's (no transfer was made). */
static bool
is_open_error(const char *code)
{
	static const char *const codes[] = {"NoSuchServer", "NotAStore", "PermissionDenied", "NoUserMapping",
	"NoBucket", "NoContainer", "NoCredentials", "NotALocalStoreURL", "LocalStoreDenied"};

	for (int i = 0; i < lengthof(codes); i++)
		if (strcmp(code, codes[i]) == 0)
			return true;
	return false;
}

/* Whether a failed read found no object at the key (S3's NoSuchKey, Azure's BlobNotFound). */
bool
store_object_missing(const StoreError *err)
{
	return strcmp(err->code, "NoSuchKey") == 0 || strcmp(err->code, "BlobNotFound") == 0;
}

/* A hint for a failure that Azure reported, or NULL when the code is no Azure one. */
static const char *
azure_hint(const StoreError *err)
{
	if (strcmp(err->code, "AuthenticationFailed") == 0 || strcmp(err->code, "InvalidAuthenticationInfo") == 0)
		return "Check the credentials of your user mapping for the server (account_key, sas_token, or the client "
			"credentials) and the server's account option; a SAS token may have expired.";
	if (strcmp(err->code, "AuthorizationFailure") == 0 || strcmp(err->code, "AuthorizationPermissionMismatch") == 0 ||
		strcmp(err->code, "AuthorizationResourceTypeMismatch") == 0)
		return "The credentials are valid but may not do this: grant the identity Storage Blob Data Reader on the "
			"container (Storage Blob Data Contributor to write markers), or issue a SAS token with read and list "
			"permissions (write and create for markers).";
	if (strcmp(err->code, "ContainerNotFound") == 0)
		return "Check the container and account options of the server.";
	if (strcmp(err->code, "TokenEndpointUnreachable") == 0)
		return "Check the server's token_endpoint option (or the tenant_id of your user mapping) and that it is "
			"reachable from the database server.";
	if (strcmp(err->code, "MalformedResponse") == 0)
		return "The endpoint does not answer like Azure Blob Storage; check the endpoint option of the server.";
	if (strcmp(err->code, "UnsupportedBlobName") == 0)
		return "Rename the blob: finalize reads only blob names that XML can carry.";
	return NULL;
}

/* A hint for a transfer's failure: what the caller can do. */
const char *
store_hint(const ObjectStore *s, const StoreError *err)
{
	const char *hint = s->kind == STORE_AZURE ? azure_hint(err) : NULL;

	if (hint != NULL)
		return hint;
	if (strcmp(err->code, "AccessDenied") == 0 || strcmp(err->code, "InvalidAccessKeyId") == 0 ||
		strcmp(err->code, "SignatureDoesNotMatch") == 0)
		return "Check access_key_id and secret_access_key in your user mapping for the server, the server's region, and the bucket's policy.";
	if (strcmp(err->code, "NoSuchBucket") == 0)
		return "Check the bucket option of the server.";
	if (strcmp(err->code, "Timeout") == 0)
		return "The store did not answer within finalize.s3_timeout; try again, or raise it.";
	if (strcmp(err->code, "ConnectionFailed") == 0)
		return "Check the endpoint option of the server and that the store is reachable from the database server.";
	if (strcmp(err->code, "RepeatedContinuationToken") == 0 || strcmp(err->code, "TooManyPages") == 0)
		return "The store's listing does not end: check the endpoint, or (for a partition of that many objects) "
			"have a superuser raise finalize.s3_max_pages.";
	if (strcmp(err->code, "InvalidCaFile") == 0)
		return "Point the server's ca_file option at a regular file of PEM certificates of at most 1 MB.";
	if (strcmp(err->code, "InvalidCredentials") == 0)
		return "Set the keys of your user mapping again: ALTER USER MAPPING FOR CURRENT_USER SERVER ... OPTIONS (SET ...).";
	if (strcmp(err->code, "MalformedResponse") == 0)
		return "The endpoint does not answer like S3; check the endpoint and url_style options.";
	if (err->http_status >= 500)
		return "The store had an internal problem; try again later.";
	return "Nothing was released; fix the cause and try again.";
}

/*
 * Raises the error for err, as store_raise does, with hint (NULL: the
 * store's hint for the code).
 */
void
store_raise_hint(const ObjectStore *s, const char *doing, const StoreError *err, const char *hint)
{
	char	   *message = redact_secrets(err->message, s->secrets);

	if (is_open_error(err->code))
		ereport(ERROR,
				(errcode(open_errcode(err->code)),
				 doing ? errmsg("%s: %s", doing, message) : errmsg("%s", message),
				 errhint("%s", hint ? hint : open_hint(s->name ? s->name : "", s->kind, err))));
	ereport(ERROR,
			(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
			 errmsg("could not %s: %s", doing, err->code),
			 err->http_status > 0
			 ? errdetail("The store answered HTTP %ld: %s", err->http_status, message)
			 : errdetail("%s", message),
			 errhint("%s", hint ? hint : store_hint(s, err))));
}

/*
 * Raises the error for err: a store that could not be opened (its message,
 * in SQL's terms, after doing when given: what named the store), or a
 * transfer that failed while doing ("list \"p/\" in
 * bucket ...": what was being done and where), in the store's own words.
 */
void
store_raise(const ObjectStore *s, const char *doing, const StoreError *err)
{
	store_raise_hint(s, doing, err, NULL);
}
