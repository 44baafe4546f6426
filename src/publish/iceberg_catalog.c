/*
 * iceberg_catalog.c
 *     A release's Iceberg table through its finalize_iceberg catalog, as
 *     the caller: the caller needs USAGE on the server, and its user
 *     mapping (else PUBLIC's) holds the credentials, so a release can do
 *     in the catalog only what its caller may.
 *
 * The publish is one commit (updateTable) whose requirement is the target
 * ref's head as loaded (assert-ref-snapshot-id; null for a tag that must
 * not exist yet) and whose update sets the ref to the audited snapshot: a
 * writer that committed in between makes the catalog refuse it (409), and
 * nothing is overwritten. A branch is only fast-forwarded: the audited
 * snapshot must descend from its head. A commit whose answer was lost is
 * never sent again blindly: the next call loads the table, finds the ref
 * at the audited snapshot, and records the release without a commit.
 */
#include "postgres.h"

#include "catalog/pg_foreign_server.h"
#include "foreign/foreign.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/memutils.h"

#include "core/pg_compat.h"
#include "gate/manifest.h"
#include "gate/manifest_error.h"
#include "lake/metadata.h"
#include "publish/iceberg_catalog.h"

/* Raises a catalog's failure to answer as the release's error. */
static void
catalog_failed(const ReleaseRequest *r, const LakeAnswer *a)
{
	ereport(ERROR,
			(errcode(a->condition == LAKE_AUTH_FAILED ? ERRCODE_INSUFFICIENT_PRIVILEGE :
					 a->condition == LAKE_TABLE_NOT_FOUND ? ERRCODE_UNDEFINED_OBJECT :
					 ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
			 errmsg("could not load Iceberg table \"%s\" from catalog \"%s\"", r->iceberg_table, r->catalog),
			 errdetail("%s", a->error != NULL ? a->error : "The catalog did not answer."),
			 errhint("%s", a->condition == LAKE_AUTH_FAILED
					 ? "Check the credentials of your user mapping for the server."
					 : a->condition == LAKE_TABLE_NOT_FOUND
					 ? "Check \"iceberg_table\" (namespace.table) and the server's warehouse and prefix."
					 : "Nothing was released; try again when the catalog answers.")));
}

/*
 * The request's catalog, checked as the caller: a finalize_iceberg
 * server the caller may use, with its options and the caller's
 * credentials.
 */
static LakeCatalog *
caller_catalog(const ReleaseRequest *r)
{
	ForeignServer *server = GetForeignServerByName(r->catalog, true);
	LakeCatalog *cat;
	char	   *error;

	if (server == NULL || strcmp(GetForeignDataWrapper(server->fdwid)->fdwname, "finalize_iceberg") != 0)
		request_error("catalog", "\"%s\" is not a finalize_iceberg server", r->catalog);
	if (compat_server_aclcheck(server->serverid, GetUserId()) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for server %s", server->servername),
				 errhint("An administrator can run GRANT USAGE ON FOREIGN SERVER %s TO the publishing role.",
						 quote_identifier(server->servername))));
	cat = lake_catalog_config_as(server->serverid, GetUserId(), CurrentMemoryContext, &error);
	if (cat == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("catalog \"%s\" cannot be used", r->catalog),
				 errdetail("%s.", error)));
	return cat;
}

/* Loads the table (every snapshot) into t->body and reads its layout. */
static void
load(const ReleaseRequest *r, IcebergTable *t)
{
	LakeAnswer	a;
	char	   *error;

	lake_catalog_load_table(t->cat, t->client, r->iceberg_table, NULL, &a);
	if (a.condition != LAKE_OK)
		catalog_failed(r, &a);
	t->body = a.body;
	if (!lake_parse_layout(t->body, &t->layout, &error))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_JSON_TEXT),
				 errmsg("catalog \"%s\" answered for table \"%s\" with metadata finalize cannot read", r->catalog,
						r->iceberg_table),
				 errdetail("%s.", lake_redact(t->cat, error))));
}

/*
 * Opens the request's table as the caller: its catalog (checked), an
 * HTTP client, the catalog's token and prefix, and the table loaded.
 */
void
iceberg_open(const ReleaseRequest *r, IcebergTable *t)
{
	HttpResponse failure;
	LakeAnswer	a;

	memset(t, 0, sizeof(*t));
	t->cat = caller_catalog(r);
	t->client = http_client_create(CurrentMemoryContext, &failure);
	if (t->client == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("could not start an HTTP client for catalog \"%s\": %s", r->catalog, failure.error)));
	if (!lake_catalog_prepare(t->cat, t->client, &a))
		catalog_failed(r, &a);
	load(r, t);
}

/* The one snapshot staged with the request's wap.id (Spark's WAP), or an error. */
static const LakeSnapshot *
wap_snapshot(const ReleaseRequest *r, const IcebergTable *t)
{
	const LakeSnapshot *found = NULL;

	for (int i = 0; i < t->md.nsnapshots; i++)
		if (t->md.snapshots[i].wap_id != NULL && strcmp(t->md.snapshots[i].wap_id, r->audit_name) == 0)
		{
			if (found != NULL)
				request_error("wap_id", "\"%s\" is the wap.id of snapshots %lld and %lld of \"%s\": name the "
							  "audited one by \"snapshot_id\"", r->audit_name, (long long) found->id,
							  (long long) t->md.snapshots[i].id, r->iceberg_table);
			found = &t->md.snapshots[i];
		}
	if (found == NULL)
		request_error("wap_id", "no snapshot of \"%s\" has the wap.id \"%s\" (was it staged with "
					  "spark.wap.id, and not expired?)", r->iceberg_table, r->audit_name);
	return found;
}

/*
 * Reads the loaded table's snapshots (their summaries kept: each lake
 * consumer's LSN property is read from them) and resolves the audited
 * snapshot and the target ref; a name that is not the table's is the
 * request's error.
 */
void
iceberg_resolve(const ReleaseRequest *r, IcebergTable *t)
{
	char	   *error;
	const IcebergRef *ref;

	if (!lake_parse_metadata(t->body, t->target_name, "", &t->md, &error))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_JSON_TEXT),
				 errmsg("catalog \"%s\" answered for table \"%s\" with metadata finalize cannot read", r->catalog,
						r->iceberg_table),
				 errdetail("%s.", lake_redact(t->cat, error))));
	if (r->audit == AUDIT_BRANCH)
	{
		ref = lake_layout_ref(&t->layout, r->audit_name);
		if (ref == NULL || ref->is_tag)
			request_error("branch", "\"%s\" is not a branch of \"%s\"", r->audit_name, r->iceberg_table);
		t->audited = lake_find_snapshot(&t->md, ref->snapshot_id);
	}
	else if (r->audit == AUDIT_WAP_ID)
		t->audited = wap_snapshot(r, t);
	else
		t->audited = lake_find_snapshot(&t->md, r->audit_snapshot_id);
	if (t->audited == NULL)
		request_error(r->audit == AUDIT_BRANCH ? "branch" : "snapshot_id",
					  "names a snapshot that \"%s\" does not have (expired, or of another table)", r->iceberg_table);
	if (t->audited->manifest_list == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("snapshot %lld of \"%s\" has no manifest list", (long long) t->audited->id, r->iceberg_table),
				 errdetail("Format v1 snapshots that list their manifests inline are not read.")));
	t->target = lake_layout_ref(&t->layout, t->target_name);
	if (t->target != NULL && t->target->is_tag != r->to_tag)
		request_error(r->to_tag ? "tag" : "target_branch", "\"%s\" is a %s of \"%s\", not a %s", t->target_name,
					  t->target->is_tag ? "tag" : "branch", r->iceberg_table, r->to_tag ? "tag" : "branch");
}

/*
 * The change log's LSN the audited snapshot holds by a lake consumer's
 * property: its value in the summary of the newest snapshot on the
 * audited one's ancestry that carries it (*carrier). False when none
 * does, or its value is no LSN (then nothing is proven).
 */
bool
iceberg_committed_lsn(const IcebergTable *t, const char *property, Lsn *lsn, int64 *carrier)
{
	const LakeSnapshot *s = t->audited;

	for (int steps = 0; s != NULL && steps <= t->md.nsnapshots; steps++)
	{
		bool		present;
		const char *value = lake_summary_text(s, property, &present);

		if (present)
		{
			*carrier = s->id;
			return value != NULL && lsn_parse_any(value, lsn);
		}
		s = s->has_parent ? lake_find_snapshot(&t->md, s->parent_id) : NULL;
	}
	return false;
}

/* Whether the audited snapshot descends from (or is) the snapshot head. */
static bool
descends_from(const IcebergTable *t, int64 head)
{
	const LakeSnapshot *s = t->audited;

	for (int steps = 0; s != NULL && steps <= t->md.nsnapshots; steps++)
	{
		if (s->id == head)
			return true;
		s = s->has_parent ? lake_find_snapshot(&t->md, s->parent_id) : NULL;
	}
	return false;
}

/* Orders snapshot ids. */
static int
id_cmp(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : x > y;
}

/*
 * The snapshots a fast-forward of the target to the audited snapshot adds
 * to the target's history (the audited one back to the target's head,
 * exclusive; its whole ancestry when the target does not exist), sorted
 * by id into *ids; -1 when the audited snapshot does not descend from the
 * head (no fast-forward), or its ancestry is cut (an expired parent: what
 * it changed cannot be read).
 */
int
iceberg_since_head(const IcebergTable *t, int64 **ids)
{
	const LakeSnapshot *s = t->audited;
	int			n = 0;

	*ids = palloc(sizeof(int64) * (t->md.nsnapshots + 1));
	while (s != NULL && n <= t->md.nsnapshots)
	{
		if (t->target != NULL && s->id == t->target->snapshot_id)
		{
			qsort(*ids, n, sizeof(int64), id_cmp);
			return n;
		}
		(*ids)[n++] = s->id;
		if (!s->has_parent)
			break;
		s = lake_find_snapshot(&t->md, s->parent_id);
		if (s == NULL)
			return -1;
	}
	if (t->target != NULL || n > t->md.nsnapshots)
		return -1;
	qsort(*ids, n, sizeof(int64), id_cmp);
	return n;
}

/* Appends a JSON string (escaped) to buf. */
static void
json_string(StringInfo buf, const char *s)
{
	escape_json(buf, s);
}

/*
 * The commit's body: the table's identifier, its uuid and the target's
 * head as requirements, the target set to the audited snapshot (and the
 * verdict's properties moved, when the release carries them).
 */
static char *
commit_body(const ReleaseRequest *r, const IcebergTable *t)
{
	StringInfoData b;
	char	   *ns = pstrdup(r->iceberg_table);
	char	   *last = strrchr(ns, '.');
	char	   *save = NULL;
	bool		first = true;

	*last = '\0';
	initStringInfo(&b);
	appendStringInfoString(&b, "{\"identifier\": {\"namespace\": [");
	for (char *level = strtok_r(ns, ".", &save); level != NULL; level = strtok_r(NULL, ".", &save))
	{
		appendStringInfoString(&b, first ? "" : ", ");
		json_string(&b, level);
		first = false;
	}
	appendStringInfoString(&b, "], \"name\": ");
	json_string(&b, last + 1);
	appendStringInfoString(&b, "}, \"requirements\": [");
	if (t->md.table_uuid != NULL)
	{
		appendStringInfoString(&b, "{\"type\": \"assert-table-uuid\", \"uuid\": ");
		json_string(&b, t->md.table_uuid);
		appendStringInfoString(&b, "}, ");
	}
	appendStringInfoString(&b, "{\"type\": \"assert-ref-snapshot-id\", \"ref\": ");
	json_string(&b, t->target_name);
	if (t->target != NULL)
		appendStringInfo(&b, ", \"snapshot-id\": %lld}", (long long) t->target->snapshot_id);
	else
		appendStringInfoString(&b, ", \"snapshot-id\": null}");
	appendStringInfoString(&b, "], \"updates\": [{\"action\": \"set-snapshot-ref\", \"ref-name\": ");
	json_string(&b, t->target_name);
	appendStringInfo(&b, ", \"type\": \"%s\", \"snapshot-id\": %lld}", r->to_tag ? "tag" : "branch",
					 (long long) t->audited->id);
	if (t->property_update != NULL)
		appendStringInfo(&b, ", %s", t->property_update);
	appendStringInfoString(&b, "]}");
	return b.data;
}

/*
 * Checks the catalog's answer to a commit it says it applied: the table's
 * new metadata must have the target at the audited snapshot, or what was
 * published is not known (an error: nothing is recorded).
 */
static void
check_committed(const ReleaseRequest *r, const IcebergTable *t, int64 audited_id, const LakeAnswer *a)
{
	IcebergLayout after;
	char	   *error = NULL;
	const IcebergRef *ref = NULL;

	if (lake_parse_layout(a->body, &after, &error))
		ref = lake_layout_ref(&after, t->target_name);
	if (ref == NULL || ref->snapshot_id != audited_id)
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("catalog \"%s\" answered the publish of snapshot %lld of \"%s\" with metadata whose %s \"%s\" is "
						"elsewhere", r->catalog, (long long) audited_id, r->iceberg_table, r->to_tag ? "tag" : "branch",
						t->target_name),
				 errdetail("%s", error != NULL ? lake_redact(t->cat, error)
						   : ref == NULL ? "The answer has no such ref." : psprintf("It is at snapshot %lld.", (long long) ref->snapshot_id)),
				 errhint("Nothing was recorded. Load the table to see where the ref is, then call finalize.release_iceberg again.")));
}

/* Whether the target ref (as last loaded) is at the audited snapshot. */
static bool
target_at_audited(const IcebergTable *t)
{
	return t->target != NULL && t->target->snapshot_id == t->audited->id;
}

/* The catalog_moved sentence for a target that is elsewhere. */
static char *
moved_detail(const ReleaseRequest *r, const IcebergTable *t, const char *words)
{
	if (t->target == NULL)
		return psprintf("The catalog refused the commit: %s", words != NULL ? words : "(no reason given)");
	return psprintf("%s \"%s\" of \"%s\" is at snapshot %lld, which snapshot %lld does not %s%s%s; nothing was "
					"published: audit again on top of it.", r->to_tag ? "Tag" : "Branch", t->target_name,
					r->iceberg_table, (long long) t->target->snapshot_id, (long long) t->audited->id,
					r->to_tag ? "replace (a tag is never moved)" : "descend from (a publish only fast-forwards)",
					words != NULL ? ". The catalog said: " : "", words != NULL ? words : "");
}

/*
 * Publishes the audited snapshot: the target ref moved (fast-forward) or
 * created by one commit that asserts its head. A ref already at the
 * snapshot is not committed again; a ref elsewhere, or a writer that
 * committed first, is PUBLISH_MOVED with *detail. A catalog that does not
 * answer (or fails) is an error: whether it applied the commit is found
 * out by the next call, which loads the table again.
 */
PublishOutcome
iceberg_publish(const ReleaseRequest *r, IcebergTable *t, char **detail)
{
	LakeAnswer	a;
	int64		audited_id = t->audited->id;

	*detail = NULL;
	if (target_at_audited(t))
		return PUBLISH_ALREADY;
	if (t->target != NULL && (r->to_tag || !descends_from(t, t->target->snapshot_id)))
	{
		*detail = moved_detail(r, t, NULL);
		return PUBLISH_MOVED;
	}
	lake_catalog_commit(t->cat, t->client, r->iceberg_table, commit_body(r, t), &a);
	if (a.condition == LAKE_OK)
	{
		check_committed(r, t, audited_id, &a);
		return PUBLISH_DONE;
	}
	if (a.status == 409)
	{
		/* Someone committed first: the same release (then it is published), or a writer. */
		load(r, t);
		iceberg_resolve(r, t);
		t->audited = lake_find_snapshot(&t->md, audited_id);
		if (t->audited != NULL && target_at_audited(t))
			return PUBLISH_ALREADY;
		*detail = t->audited != NULL ? moved_detail(r, t, a.error)
			: psprintf("The catalog refused the commit and snapshot %lld is gone: %s", (long long) audited_id, a.error);
		return PUBLISH_MOVED;
	}
	ereport(ERROR,
			(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
			 errmsg("could not publish snapshot %lld of \"%s\" to %s \"%s\"", (long long) audited_id,
					r->iceberg_table, r->to_tag ? "tag" : "branch", t->target_name),
			 errdetail("%s", a.error != NULL ? a.error : "The catalog did not answer."),
			 errhint("Nothing was recorded. The catalog may have applied the commit before its answer was lost: "
					 "call finalize.release_iceberg again with the same request, which publishes it once.")));
	return PUBLISH_MOVED;		/* not reached */
}
