/*
 * problem_list.h
 *     The problems of a release attempt (problem_list.c): a list with a
 *     limit per code, sorted and returned as jsonb. Pure logic.
 */
#ifndef FINALIZE_PROBLEM_LIST_H
#define FINALIZE_PROBLEM_LIST_H

#include "utils/jsonb.h"

/* One reason not to release. */
typedef struct Problem
{
	const char *code;
	char	   *path;			/* NULL when about the partition as a whole */
	char	   *detail;
} Problem;

/* How many problems of one code were found, and how many of them are listed. */
typedef struct ProblemTally
{
	const char *code;
	int64		kept;
	int64		dropped;
} ProblemTally;

/* Distinct codes a tally follows (the gate and an Iceberg release have 17). */
#define PROBLEM_CODES_MAX 24

/*
 * The problems of an attempt. With max_per_code > 0 at most that many of
 * each code are kept in detail and the rest are only counted (a listing
 * that disagrees on ten million files must not make ten million entries);
 * problems_summarize then adds one entry per code that had more.
 */
typedef struct ProblemList
{
	Problem    *items;
	int			n;
	int			capacity;
	int			max_per_code;	/* 0: keep every problem */
	int			ncodes;
	ProblemTally tally[PROBLEM_CODES_MAX];
} ProblemList;

extern void problem_push(ProblemList *list, const char *code, char *path, char *detail);
extern void problem_add(ProblemList *list, const char *code, const char *path, char *detail);
extern bool problem_room(ProblemList *list, const char *code);
extern void problems_summarize(ProblemList *list);
extern void problems_sort(ProblemList *list, int first);
extern Jsonb *problems_to_jsonb(const ProblemList *list);

#endif							/* FINALIZE_PROBLEM_LIST_H */
