/*
 * zone_link.h
 *     The zone a name of the zone database is a link to (see zone_link.c).
 */
#ifndef FINALIZE_ZONE_LINK_H
#define FINALIZE_ZONE_LINK_H

extern const char *zone_link_target(const char *name);

#endif							/* FINALIZE_ZONE_LINK_H */
