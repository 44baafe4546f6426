/*
 * catalog.h
 *     An Iceberg REST catalog as the lake worker calls it: a
 *     finalize_iceberg server's options and the credentials of its owner's
 *     user mapping (catalog_config.c), and its requests (catalog.c): the
 *     config, an OAuth2 token, loadTable, and a release's commit (updateTable).
 */
#ifndef FINALIZE_LAKE_CATALOG_H
#define FINALIZE_LAKE_CATALOG_H

#include "core/http.h"

/* Why a catalog's answer gives no metadata: the consumer's condition. */
typedef enum LakeCondition
{
	LAKE_OK = 0,
	LAKE_UNREACHABLE,			/* no answer, a timeout, a 5xx, a 429 */
	LAKE_AUTH_FAILED,			/* 401, 403, a token refused */
	LAKE_TABLE_NOT_FOUND,		/* 404: no such table or namespace */
	LAKE_PROPERTY_MALFORMED,	/* the newest carrier's LSN is not one */
	LAKE_METADATA_MALFORMED,	/* an answer that is not what the REST
								 * specification says */
	/* A Delta consumer's (delta_worker.c): */
	LAKE_STORE_UNREACHABLE,		/* the store did not answer, or failed */
	LAKE_STORE_AUTH_FAILED,		/* the store refused the credentials, or
								 * the declarer may not read it */
	LAKE_LOG_MALFORMED,			/* a commit that cannot be judged */
	LAKE_CHECKPOINT_ONLY,		/* the commits to read were cleaned up;
								 * only a Parquet checkpoint remains */
	LAKE_LSN_MISSING			/* no commit read carries lsn_from */
} LakeCondition;

typedef struct LakeCatalog
{
	char	   *name;			/* the foreign server */
	char	   *uri;			/* without a trailing / */
	char	   *warehouse;		/* NULL when none */
	char	   *prefix;			/* the option, NULL when the config says */
	char	   *oauth_uri;
	char	   *scope;
	char	   *token;			/* a static bearer token */
	char	   *client_id;
	char	   *client_secret;
	char	   *sigv4;			/* "aws:amz:<region>:<signing name>", or NULL */
	char	   *access_key_id;
	char	   *secret_access_key;
	char	   *session_token;
	long		timeout_ms;
	long		poll_interval_ms;
	List	   *secrets;		/* every secret, kept out of messages */
} LakeCatalog;

/* One request's outcome. */
typedef struct LakeAnswer
{
	LakeCondition condition;
	char	   *error;			/* a sentence with the catalog's own words */
	bool		not_modified;	/* 304: the ETag still holds */
	long		status;			/* the HTTP status; 0 without an answer */
	char	   *body;
	char	   *etag;
	double		elapsed_ms;
} LakeAnswer;

extern LakeCatalog *lake_catalog_config(Oid serverid, MemoryContext cxt, char **error);
extern LakeCatalog *lake_catalog_config_as(Oid serverid, Oid user, MemoryContext cxt, char **error);
extern bool lake_catalog_prepare(LakeCatalog *cat, HttpClient *client, LakeAnswer *failure);
extern void lake_catalog_load_table(LakeCatalog *cat, HttpClient *client, const char *iceberg_table,
									const char *etag, LakeAnswer *out);
extern void lake_catalog_commit(LakeCatalog *cat, HttpClient *client, const char *iceberg_table,
								const char *body, LakeAnswer *out);
extern char *lake_redact(const LakeCatalog *cat, const char *text);
extern const char *lake_condition_name(LakeCondition c);

/* in iceberg_options.c */
extern bool lake_prefix_ok(const char *value);

#endif							/* FINALIZE_LAKE_CATALOG_H */
