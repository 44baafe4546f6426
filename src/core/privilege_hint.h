/*
 * privilege_hint.h
 *     The hint naming the role to grant when PostgreSQL refuses one of
 *     finalize's objects (see privilege_hint.c).
 */
#ifndef FINALIZE_PRIVILEGE_HINT_H
#define FINALIZE_PRIVILEGE_HINT_H

extern void privilege_hint_install(void);

#endif							/* FINALIZE_PRIVILEGE_HINT_H */
