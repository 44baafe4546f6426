/*
 * gate.c
 *     finalize.release_gate(manifest): a partition is released only when its
 *     manifest, the object-store listing and the catalog agree.
 *
 * The gate runs as its caller for everything that touches the store (the
 * caller's user mapping holds the keys, the caller needs USAGE on the
 * server; local file:// stores need pg_read_server_files), then as the
 * extension's owner for the catalog: reading the catalog view and the CDC
 * facts, and storing the attempt. The attempt, its report and (when it
 * passed) the switch of the published marker are written in the caller's
 * transaction, so a release is all or nothing.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "foreign/foreign.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "common/fdw_options.h"
#include "common/settings.h"
#include "gate/filestore.h"
#include "gate/inventory.h"
#include "common/io_interrupts.h"
#include "gate/manifest.h"
#include "gate/objstore.h"
#include "common/owner.h"

PG_FUNCTION_INFO_V1(finalize_release_gate);
PG_FUNCTION_INFO_V1(finalize_compare_inventories);

#if PG_VERSION_NUM >= 160000
#define server_usage_check(srv, role) object_aclcheck(ForeignServerRelationId, (srv), (role), ACL_USAGE)
#else
#define server_usage_check(srv, role) pg_foreign_server_aclcheck((srv), (role), ACL_USAGE)
#endif

/* The sorted paths of the manifest entries that carry a checksum. */
typedef struct EtagPaths
{
	const char **paths;
	int			n;
} EtagPaths;

/* Orders C strings. */
static int
str_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *) a, *(const char *const *) b);
}

/* For the file store: whether a listed file needs a checksum computed. */
static bool
manifest_has_etag(const char *path, void *arg)
{
	const EtagPaths *e = (const EtagPaths *) arg;

	return bsearch(&path, e->paths, e->n, sizeof(char *), str_cmp) != NULL;
}

/* Collects the manifest paths with a checksum, sorted for lookups. */
static void
etag_paths(const Inventory *files, EtagPaths *out)
{
	out->paths = palloc(sizeof(char *) * Max(files->n, 1));
	out->n = 0;
	for (int i = 0; i < files->n; i++)
		if (files->items[i].etag != NULL)
			out->paths[out->n++] = files->items[i].path;
	qsort(out->paths, out->n, sizeof(char *), str_cmp);
}

/* A hint for an S3 error code: what the publisher can do. */
static const char *
s3_hint(const S3Error *err)
{
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
	if (strcmp(err->code, "InvalidCredentials") == 0)
		return "Set the keys of your user mapping again: ALTER USER MAPPING FOR CURRENT_USER SERVER ... OPTIONS (SET ...).";
	if (strcmp(err->code, "MalformedResponse") == 0)
		return "The endpoint does not answer like S3; check the endpoint and url_style options.";
	if (err->http_status >= 500)
		return "The store had an internal problem; try again later.";
	return "Nothing was released; fix the cause and call finalize.release_gate again.";
}

/*
 * Lists the manifest's prefix in its store, as the caller, with the
 * caller's credentials.
 */
static void
list_store(const Manifest *m, Inventory *listing)
{
	Oid			caller = GetUserId();

	if (strncmp(m->store, "file://", 7) == 0)
	{
		char	   *root;
		EtagPaths	etags;

		if (!has_privs_of_role(caller, ROLE_PG_READ_SERVER_FILES))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to list local store \"%s\"", m->store),
					 errdetail("Listing files on the database server needs the privileges of pg_read_server_files."),
					 errhint("Publish through a finalize_s3 server, or have an administrator grant pg_read_server_files.")));
		root = filestore_root(m->store);
		etag_paths(&m->files, &etags);
		filestore_list(root, m->prefix, listing, etags.n > 0 ? manifest_has_etag : NULL, &etags);
		return;
	}
	else
	{
		ForeignServer *server = GetForeignServerByName(m->store, true);
		UserMapping *um;
		S3Location	loc;
		S3Error		err;
		bool		ok;

		if (server == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid manifest: field \"store\": there is no server \"%s\"", m->store),
					 errhint("Name a finalize_s3 server (CREATE SERVER ... FOREIGN DATA WRAPPER finalize_s3) or a file:///path.")));
		if (strcmp(GetForeignDataWrapper(server->fdwid)->fdwname, "finalize_s3") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid manifest: field \"store\": server \"%s\" is not an object store", m->store),
					 errhint("Name a server of the finalize_s3 foreign-data wrapper.")));
		if (server_usage_check(server->serverid, caller) != ACLCHECK_OK)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for server %s", server->servername),
					 errhint("An administrator can run GRANT USAGE ON FOREIGN SERVER %s TO the publishing role.",
							 quote_identifier(server->servername))));
		if (!SearchSysCacheExists2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(caller),
								   ObjectIdGetDatum(server->serverid)) &&
			!SearchSysCacheExists2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(InvalidOid),
								   ObjectIdGetDatum(server->serverid)))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("no user mapping for role \"%s\" on server \"%s\"",
							GetUserNameFromId(caller, false), server->servername),
					 errhint("Create one: CREATE USER MAPPING FOR CURRENT_USER SERVER %s OPTIONS (access_key_id '...', secret_access_key '...').",
							 quote_identifier(server->servername))));
		um = GetUserMapping(caller, server->serverid);

		loc.endpoint = fdw_option_value(server->options, "endpoint", "https://s3.amazonaws.com");
		loc.region = fdw_option_value(server->options, "region", "us-east-1");
		loc.bucket = fdw_option_value(server->options, "bucket", "");
		if (loc.bucket[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
					 errmsg("server \"%s\" has no bucket option", server->servername),
					 errhint("Name the bucket: ALTER SERVER %s OPTIONS (ADD bucket '...').",
							 quote_identifier(server->servername))));
		loc.virtual_host = strcmp(fdw_option_value(server->options, "url_style", "path"), "virtual") == 0;
		loc.access_key = fdw_option_value(um->options, "access_key_id", "");
		loc.secret_key = fdw_option_value(um->options, "secret_access_key", "");
		loc.session_token = fdw_option_value(um->options, "session_token", NULL);
		loc.connect_timeout_ms = finalize_s3_connect_timeout_ms;
		loc.timeout_ms = finalize_s3_timeout_ms;
		loc.max_pages = finalize_s3_max_pages;
		ok = objstore_list(&loc, m->prefix, listing, &err);
		/* An interrupt that arrived meanwhile (a cancel) is served first. */
		io_interrupts_rethrow();
		if (!ok)
		{
			ereport(ERROR,
					(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
					 errmsg("could not list \"%s\" in bucket \"%s\" of server \"%s\": %s",
							m->prefix, loc.bucket, server->servername, err.code),
					 err.http_status > 0
					 ? errdetail("The store answered HTTP %ld: %s", err.http_status, err.message)
					 : errdetail("%s", err.message),
					 errhint("%s", s3_hint(&err))));
		}
	}
}

/* A location as compared: with one trailing slash. */
static char *
with_slash(const char *location)
{
	size_t		len = strlen(location);

	return len > 0 && location[len - 1] == '/' ? pstrdup(location) : psprintf("%s/", location);
}

/*
 * Runs a catalog query that returns at most one row; its values as text
 * (NULL for NULL, all NULL for no row). Every query is schema-qualified and
 * uses no operator, cast or unqualified name: it runs as the extension's
 * owner. Each takes a new snapshot, so it sees what committed before the
 * partition lock was granted.
 */
static char **
query_row(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls, int ncols)
{
	char	  **out = palloc0(sizeof(char *) * ncols);

	if (SPI_execute_with_args(sql, nargs, types, values, nulls, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not run \"%s\"", sql);
	if (SPI_processed == 1)
		for (int i = 0; i < ncols; i++)
		{
			char	   *v = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1);

			out[i] = v ? MemoryContextStrdup(CurrentMemoryContext, v) : NULL;
		}
	return out;
}

/* Pushes key: the JSON document in text (or null) into the report. */
static void
push_json_text(JsonbParseState **st, const char *key, const char *json)
{
	JsonbValue	v;

	jsonb_push_key(st, key, strlen(key));
	if (json == NULL)
	{
		v.type = jbvNull;
		pushJsonbValue(st, WJB_VALUE, &v);
		return;
	}
	v.type = jbvBinary;
	v.val.binary.data = &DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(json)))->root;
	v.val.binary.len = 0;
	pushJsonbValue(st, WJB_VALUE, &v);
}

/*
 * The report stored with a release attempt: the manifest's set, the
 * listing, the catalog view, the CDC facts and the problems. The two
 * inventories (possibly millions of entries) are pushed as values, not
 * printed and parsed again.
 */
static Jsonb *
build_report(const Manifest *m, const Inventory *listing, const char *catalog_json,
			 const char *facts_json, const char *problems_json)
{
	JsonbParseState *st = NULL;
	JsonbValue	v;

	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	jsonb_push_key(&st, "manifest", 8);
	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	jsonb_push_key(&st, "prefix", 6);
	v.type = jbvString;
	v.val.string.val = m->prefix;
	v.val.string.len = strlen(m->prefix);
	pushJsonbValue(&st, WJB_VALUE, &v);
	jsonb_push_key(&st, "empty", 5);
	v.type = jbvBool;
	v.val.boolean = m->empty;
	pushJsonbValue(&st, WJB_VALUE, &v);
	jsonb_push_key(&st, "files", 5);
	inventory_push_jsonb(&st, &m->files);
	pushJsonbValue(&st, WJB_END_OBJECT, NULL);
	jsonb_push_key(&st, "listing", 7);
	inventory_push_jsonb(&st, listing);
	push_json_text(&st, "catalog", catalog_json);
	push_json_text(&st, "facts", facts_json);
	push_json_text(&st, "problems", problems_json);
	return JsonbValueToJsonb(pushJsonbValue(&st, WJB_END_OBJECT, NULL));
}

/* The id of the manifest's table, or the not-tracked error (as the owner). */
static int64
tracked_table_id(const Manifest *m)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	int64		id;

	SPI_connect();
	values[0] = CStringGetTextDatum(m->table);
	id = pg_strtoint64(query_row("SELECT " FINALIZE_SCHEMA "._tracked_id($1)", 1, types, values, NULL, 1)[0]);
	SPI_finish();
	return id;
}

/*
 * Stores a release attempt and, when it passed, switches the partition's
 * published marker: in the caller's transaction, so the release is all or
 * nothing. The insert runs as a generic plan: a custom plan would fold the
 * report (possibly hundreds of megabytes) into a constant, copying it.
 */
static void
store_release(int64 table_id, const Manifest *m, bool released, const char *problems_json, Jsonb *report,
			  const char *requested_by)
{
	Oid			types[10] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, BOOLOID, JSONBOID, JSONBOID, NAMEOID,
	TIMESTAMPTZOID};
	Datum		values[10];
	char		nulls[10] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', m->has_period ? ' ' : 'n'};
	SPIPlanPtr	plan;
	bool		isnull;
	Datum		release_id;

	values[0] = Int64GetDatum(table_id);
	values[1] = CStringGetTextDatum(m->partition);
	values[2] = CStringGetTextDatum(m->generation);
	values[3] = CStringGetTextDatum(m->store);
	values[4] = CStringGetTextDatum(m->prefix);
	values[5] = BoolGetDatum(released);
	values[6] = DirectFunctionCall1(jsonb_in, CStringGetDatum(problems_json));
	values[7] = JsonbPGetDatum(report);
	values[8] = DirectFunctionCall1(namein, CStringGetDatum(requested_by));
	values[9] = m->has_period ? TimestampTzGetDatum(m->period_start) : (Datum) 0;

	plan = SPI_prepare_cursor("INSERT INTO " FINALIZE_SCHEMA ".release (table_id, partition, generation, store, "
							  "prefix, released, problems, report, requested_by, period_start) "
							  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING release_id",
							  10, types, CURSOR_OPT_GENERIC_PLAN);
	if (plan == NULL || SPI_execute_plan(plan, values, nulls, false, 1) != SPI_OK_INSERT_RETURNING ||
		SPI_processed != 1)
		elog(ERROR, "could not store the release attempt of partition \"%s\"", m->partition);
	release_id = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	SPI_freeplan(plan);
	if (!released)
		return;

	{
		Oid			ptypes[5] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, INT8OID};
		Datum		pvalues[5] = {values[0], values[1], values[2], values[4], release_id};

		if (SPI_execute_with_args("INSERT INTO " FINALIZE_SCHEMA ".published AS p "
								  "(table_id, partition, generation, prefix, release_id, published_at) "
								  "VALUES ($1, $2, $3, $4, $5, pg_catalog.now()) "
								  "ON CONFLICT ON CONSTRAINT published_pkey DO UPDATE "
								  "SET generation = excluded.generation, prefix = excluded.prefix, "
								  "release_id = excluded.release_id, published_at = excluded.published_at",
								  5, ptypes, pvalues, NULL, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "could not publish partition \"%s\"", m->partition);
	}
}

/* The catalog view of a partition, as the gate reads it. */
#define GATE_CATALOG_SQL \
	"SELECT c.catalog, c.source, c.location, c.in_range, c.range_start, c.range_end, " \
	"c.registered_at, c.registered_by FROM " FINALIZE_SCHEMA "._gate_catalog($1, $2, $3) AS c"

/*
 * Under REPEATABLE READ or SERIALIZABLE the gate reads the catalog with the
 * transaction's snapshot, which the partition's lock cannot refresh: a
 * registration committed while the gate waited for the lock would be
 * invisible, and the gate would publish against where readers no longer
 * look. So the catalog is read again with the latest snapshot; if it moved,
 * the transaction fails with a serialization failure, as any other write
 * based on stale data would there.
 */
static void
check_catalog_unchanged(const Manifest *m, const char *seen, Oid *types, Datum *values, const char *nulls)
{
	SPIPlanPtr	plan = SPI_prepare(GATE_CATALOG_SQL, 3, types);
	char	   *latest;

	if (plan == NULL ||
		SPI_execute_snapshot(plan, values, nulls, GetLatestSnapshot(), InvalidSnapshot, true, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read the catalog view of partition \"%s\"", m->partition);
	latest = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (latest == NULL || strcmp(latest, seen) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access to the catalog of partition \"%s\" of \"%s\"",
						m->partition, m->table),
				 errdetail("Another transaction changed where the catalog sends readers of the partition after "
						   "this transaction's snapshot was taken; nothing was released."),
				 errhint("Retry the transaction, or release in a READ COMMITTED transaction.")));
	SPI_freeplan(plan);
}

/*
 * The parts of the gate that read and write the catalog (as the owner). The
 * partition's lock comes first, so a registration cannot change the catalog
 * view between the check and the release.
 */
static bool
check_and_store(const Manifest *m, int64 table_id, const Inventory *listing, const char *requested_by,
				char **result_json)
{
	ProblemList problem_list = {0};
	ProblemList *problems = &problem_list;
	Oid			types[3] = {INT8OID, TEXTOID, TIMESTAMPTZOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', m->has_period ? ' ' : 'n'};
	char	  **row;
	char	   *catalog_json;
	char	   *facts_json = NULL;
	Jsonb	   *report;
	StringInfoData problems_json;
	bool		released;
	MemoryContext caller_cxt = CurrentMemoryContext;

	SPI_connect();
	values[0] = Int64GetDatum(table_id);
	values[1] = CStringGetTextDatum(m->partition);
	values[2] = m->has_period ? TimestampTzGetDatum(m->period_start) : (Datum) 0;
	(void) query_row("SELECT " FINALIZE_SCHEMA "._lock_partition($1, $2)", 2, types, values, NULL, 1);

	/* The manifest against the listing. */
	inventory_compare(&m->files, listing, m->prefix, problems);

	/* The catalog view of the partition. */
	row = query_row(GATE_CATALOG_SQL, 3, types, values, nulls, 8);
	if (row[0] == NULL)
		elog(ERROR, "could not read the catalog view of partition \"%s\"", m->partition);
	if (IsolationUsesXactSnapshot())
		check_catalog_unchanged(m, row[0], types, values, nulls);
	catalog_json = row[0];
	if (strcmp(row[1], "none") == 0)
		problem_add(problems, "catalog_mismatch", NULL,
					psprintf("Partition \"%s\" of \"%s\" is neither registered nor projected, so no reader can find "
							 "it; register it with finalize.register_partition(%s, %s, %s) or declare a projection.",
							 m->partition, m->table, quote_literal_cstr(m->table), quote_literal_cstr(m->partition),
							 quote_literal_cstr(m->prefix)));
	else if (strcmp(row[1], "registration") == 0)
	{
		if (strcmp(with_slash(row[2]), m->prefix) != 0)
			problem_add(problems, "catalog_mismatch", NULL,
						psprintf("The catalog registers partition \"%s\" at \"%s\" (by %s at %s), not at this "
								 "generation's location \"%s\": readers would still read another generation. "
								 "Register the new location in the same transaction as the release.",
								 m->partition, row[2], row[7], row[6], m->prefix));
	}
	else if (row[2] == NULL)
		problem_add(problems, "catalog_mismatch", NULL,
					psprintf("The table uses a projection (%s), but the manifest has no period_start to project; "
							 "add period_start.", row[0]));
	else if (row[3] == NULL || strcmp(row[3], "t") != 0)
		problem_add(problems, "projection_gap", NULL,
					psprintf("The projection's range [%s, %s) omits this partition's period (starting %s), so "
							 "no reader sees it; extend it with finalize.set_projection().",
							 row[4], row[5], timestamptz_to_str(m->period_start)));
	else if (strcmp(with_slash(row[2]), m->prefix) != 0)
		problem_add(problems, "catalog_mismatch", NULL,
					psprintf("The projection places this partition at \"%s\", not at this generation's location "
							 "\"%s\".", row[2], m->prefix));

	/* What the CDC facts say about the period. */
	if (m->has_period)
	{
		Oid			ftypes[2] = {TEXTOID, TIMESTAMPTZOID};
		Datum		fvalues[2] = {CStringGetTextDatum(m->table), values[2]};
		char	  **f;

		f = query_row("SELECT x.facts, x.is_final, x.covered, x.exact, x.changes, x.straddling_ranges "
					  "FROM " FINALIZE_SCHEMA "._period_facts($1, $2) AS x", 2, ftypes, fvalues, NULL, 6);
		facts_json = f[0];
		if (f[1] == NULL || strcmp(f[1], "t") != 0)
		{
			char	  **why = query_row("SELECT v.reason FROM " FINALIZE_SCHEMA ".explain_verdict($1, $2) AS v",
										2, ftypes, fvalues, NULL, 1);

			problem_add(problems, "not_finalized", NULL, why[0] ? why[0] : pstrdup("The period is not final yet."));
		}
		if (listing->n == 0 && m->empty)
		{
			if (f[2] == NULL || strcmp(f[2], "t") != 0)
				problem_add(problems, "empty_location", NULL,
							psprintf("The manifest says the partition is empty, but the CDC facts do not cover its "
									 "period (tracking began later, or the facts were lost or expired), so that "
									 "cannot be confirmed."));
			else if (strcmp(f[4], "0") != 0)
				problem_add(problems, "empty_location", NULL,
							psprintf("The manifest says the partition is empty, but the CDC facts record %s change(s) "
									 "committed in its period%s, so it cannot be empty.", f[4],
									 strcmp(f[3], "t") == 0 ? "" : " (ranges that straddle its boundaries may hold some)"));
			else if (strcmp(f[3], "t") != 0)
				problem_add(problems, "empty_location", NULL,
							psprintf("The manifest says the partition is empty, but %s CDC range(s) with changes "
									 "straddle its boundaries, so that cannot be confirmed.", f[5]));
		}
	}
	if (listing->n == 0 && !m->empty)
		problem_add(problems, "empty_location", NULL,
					psprintf("There are no objects under \"%s\": an empty location is never a release by itself. "
							 "A partition that is empty on purpose says \"empty\": true in its manifest.", m->prefix));

	/* The attempt, with its full report; the marker switches if it passed. */
	released = problems->n == 0;
	initStringInfo(&problems_json);
	problems_to_json(problems, &problems_json);
	report = build_report(m, listing, catalog_json, facts_json, problems_json.data);
	store_release(table_id, m, released, problems_json.data, report, requested_by);
	/* Everything above lives in SPI's memory, which SPI_finish frees. */
	*result_json = MemoryContextStrdup(caller_cxt, problems_json.data);
	SPI_finish();
	return released;
}

/* One release_gate call, shared by the steps that run as the owner. */
typedef struct GateRun
{
	const Manifest *m;
	const Inventory *listing;
	const char *requested_by;
	char	   *problems_json;	/* the problems found, as returned */
	int64		table_id;
	bool		released;
} GateRun;

/* Step: the tracked table of the manifest. */
static void
lookup_step(void *arg)
{
	GateRun    *run = (GateRun *) arg;

	run->table_id = tracked_table_id(run->m);
}

/* Step: the catalog and facts checks, and storing the attempt. */
static void
check_step(void *arg)
{
	GateRun    *run = (GateRun *) arg;

	run->released = check_and_store(run->m, run->table_id, run->listing, run->requested_by, &run->problems_json);
}

/*
 * finalize.release_gate(manifest jsonb) -> (released, generation, problems)
 */
Datum
finalize_release_gate(PG_FUNCTION_ARGS)
{
	Manifest	m;
	Inventory	listing = {0};
	TupleDesc	desc;
	Datum		result[3];
	bool		nulls[3] = {false, false, false};
	Oid			owner;
	GateRun		run = {0};

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid manifest: it is NULL")));
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	manifest_parse(PG_GETARG_JSONB_P(0), &m);
	run.m = &m;
	run.listing = &listing;
	run.requested_by = GetUserNameFromId(GetUserId(), false);
	owner = function_owner(fcinfo->flinfo->fn_oid);

	/* An untracked table is an error before anything goes over the network. */
	run_as_owner(owner, lookup_step, &run);
	/* The store, as the caller. */
	list_store(&m, &listing);
	/* The catalog, as the extension's owner. */
	run_as_owner(owner, check_step, &run);

	result[0] = BoolGetDatum(run.released);
	result[1] = CStringGetTextDatum(m.generation);
	result[2] = DirectFunctionCall1(jsonb_in, CStringGetDatum(run.problems_json));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), result, nulls)));
}

/*
 * finalize.compare_inventories(manifest_files, listing, prefix) -> problems
 */
Datum
finalize_compare_inventories(PG_FUNCTION_ARGS)
{
	Inventory	files = {0};
	Inventory	listing = {0};
	ProblemList problems = {0};
	JsonbValue	v;
	JsonbValue	w;
	InvCursor	mc;
	InvCursor	lc;
	StringInfoData out;
	char	   *prefix;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("arguments manifest_files and listing must not be NULL")));
	prefix = PG_ARGISNULL(2) ? pstrdup("") : text_to_cstring(PG_GETARG_TEXT_PP(2));
	if (prefix[0] != '\0')
		prefix = with_slash(prefix);

	v.type = jbvBinary;
	v.val.binary.data = &PG_GETARG_JSONB_P(0)->root;
	v.val.binary.len = 0;
	w = v;
	w.val.binary.data = &PG_GETARG_JSONB_P(1)->root;

	/* Two objects come sorted alike: merge them; else hash. */
	if (jsonb_files_cursor(&v, "manifest_files", &mc) && jsonb_files_cursor(&w, "listing", &lc))
		inventory_merge(&mc, &lc, prefix, &problems);
	else
	{
		inventory_from_jsonb(&v, "manifest_files", &files);
		inventory_from_jsonb(&w, "listing", &listing);
		inventory_compare(&files, &listing, prefix, &problems);
	}
	initStringInfo(&out);
	problems_to_json(&problems, &out);
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(out.data)));
}
