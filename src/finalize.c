/*
 * finalize.c
 *     Module entry point: the library only works preloaded (its workers and
 *     its verdict cache need the postmaster).
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

#include "core/error_boundary.h"
#include "core/pg_compat.h"
#include "core/privilege_hint.h"
#include "core/settings.h"
#include "core/shmem.h"
#include "worker/worker.h"

FINALIZE_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Defines the settings, reserves shared memory, installs the hooks (DROP
 * DATABASE, what users see of errors) and registers the launcher; any other
 * load than shared_preload_libraries is refused with a hint.
 */
void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("finalize must be loaded via shared_preload_libraries"),
				 errhint("Add finalize to shared_preload_libraries in postgresql.conf and restart the server.")));

	settings_define();
	shmem_install_hooks();
	dbhooks_install();
	error_boundary_install();
	privilege_hint_install();
	register_launcher();
}
