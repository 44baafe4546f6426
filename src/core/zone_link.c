/*
 * zone_link.c
 *     The zone a name of the zone database is a link to: 'ROK' is
 *     Asia/Seoul, 'US/Eastern' America/New_York, 'Asia/Calcutta'
 *     Asia/Kolkata. A table stores the zone itself, the name PostgreSQL's
 *     pg_timezone_names lists it under once more beside each of its links.
 *
 * The tz database declares its links in tzdata.zi ("L Asia/Seoul ROK"),
 * which distributions' tzdata packages install in the zone directory (the
 * files of the directory do not tell a zone from its links: Debian's links
 * are symbolic links, other systems' hard links or copies). The zone
 * directory is the one PostgreSQL reads: the system's when it was built
 * --with-system-tzdata (the Makefile passes it), else its own under its
 * share directory, which has no tzdata.zi: names stay as given there.
 *
 * One exception: Etc/UTC is spelt UTC, as PostgreSQL's own TimeZone
 * default and finalize's period_zone default spell it.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgtime.h"
#include "storage/fd.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "core/zone_link.h"

#ifndef FINALIZE_SYSTEM_TZDIR
#define FINALIZE_SYSTEM_TZDIR ""
#endif

/* The most links followed from a name to its zone. */
#define MAX_LINK_DEPTH 8

/* One link of tzdata.zi. */
typedef struct ZoneLink
{
	char		name[TZ_STRLEN_MAX + 1];	/* hash key */
	char		target[TZ_STRLEN_MAX + 1];
} ZoneLink;

/* The links of tzdata.zi, read once per backend (none without the file). */
static HTAB *links = NULL;

/* The zone directory PostgreSQL reads its zones from. */
static const char *
zone_directory(void)
{
	static char dir[MAXPGPATH];

	if (dir[0] == '\0')
	{
		if (FINALIZE_SYSTEM_TZDIR[0] != '\0')
			strlcpy(dir, FINALIZE_SYSTEM_TZDIR, sizeof(dir));
		else
		{
			get_share_path(my_exec_path, dir);
			strlcat(dir, "/timezone", sizeof(dir));
		}
	}
	return dir;
}

/*
 * Adds the link of one line of tzdata.zi ("L TARGET NAME"), if it is one;
 * other lines (zones, rules) and names too long for a zone are skipped.
 */
static void
add_link_line(HTAB *map, const char *line)
{
	char		target[TZ_STRLEN_MAX + 2];
	char		name[TZ_STRLEN_MAX + 2];
	ZoneLink   *entry;

	if (line[0] != 'L' || line[1] != ' ' ||
		sscanf(line + 2, "%" CppAsString2(TZ_STRLEN_MAX) "s %" CppAsString2(TZ_STRLEN_MAX) "s", target, name) != 2)
		return;
	entry = hash_search(map, name, HASH_ENTER, NULL);
	strlcpy(entry->target, target, sizeof(entry->target));
}

/*
 * Reads the links of the zone directory's tzdata.zi, once (kept only when
 * read to the end: a cancel on the way leaves them to be read again).
 */
static void
load_links(void)
{
	HASHCTL		ctl;
	HTAB	   *map;
	char		path[MAXPGPATH];
	char		line[1024];
	FILE	   *f;

	if (links != NULL)
		return;
	ctl.keysize = TZ_STRLEN_MAX + 1;
	ctl.entrysize = sizeof(ZoneLink);
	ctl.hcxt = TopMemoryContext;
	map = hash_create("finalize zone links", 512, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	snprintf(path, sizeof(path), "%s/tzdata.zi", zone_directory());
	f = AllocateFile(path, "r");
	if (f != NULL)
	{
		while (fgets(line, sizeof(line), f) != NULL)
		{
			CHECK_FOR_INTERRUPTS();
			add_link_line(map, line);
		}
		FreeFile(f);
	}
	links = map;
}

/*
 * The zone a name of the zone database (spelt as the database spells it)
 * is a link to, or the name itself when it is a zone.
 */
const char *
zone_link_target(const char *name)
{
	const char *zone = name;

	load_links();
	for (int i = 0; i < MAX_LINK_DEPTH; i++)
	{
		ZoneLink   *link = hash_search(links, zone, HASH_FIND, NULL);

		if (link == NULL)
			break;
		zone = link->target;
	}
	if (strcmp(zone, "Etc/UTC") == 0)
		return "UTC";
	return zone;
}
