/*
 * stubs_pending.c
 *     TEMPORARY until each target kind lands (issue 44): a kind whose
 *     target file is not merged yet refuses to load, so its events wait.
 */
#include "postgres.h"

#include "push/target.h"

/* Refuses: this library has no such target yet. */
static void *
pending_load(const PushEvent *ev, MemoryContext cxt pg_attribute_unused(), char **error)
{
	*error = psprintf("this build of finalize cannot send to %s targets yet", ev->target_kind);
	return NULL;
}

/* Never called: load refuses. */
static void
pending_send(void *target pg_attribute_unused(), const PushEvent *ev pg_attribute_unused(),
			 HttpClient *client pg_attribute_unused(), PushResult *r)
{
	r->error = pstrdup("not built");
}

const PushTargetKind push_success_marker_kind = {"success_marker", pending_load, pending_send};
