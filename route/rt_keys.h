/*
 * rt_keys.h - every key of the route language in one table: its scope
 * (a route, its "http" object, "http.reconcile", an "emit" entry), type,
 * default, the kinds of route that take it, and what it does. The route
 * compilers refuse a key the table does not hold and take integer bounds
 * and defaults from it; `inboxd --route-reference` prints it as the
 * reference in docs/routes.md (tests/cli checks the two are equal).
 *
 * thread: main (config load); the table is read-only.
 */
#ifndef RT_KEYS_H
#define RT_KEYS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "ib_problems.h"

typedef enum {
    RT_SCOPE_ROUTE,     /* routes[i] */
    RT_SCOPE_MATCH,     /* routes[i].match (an object) */
    RT_SCOPE_HTTP,      /* routes[i].http */
    RT_SCOPE_RECONCILE, /* routes[i].http.reconcile */
    RT_SCOPE_EMIT,      /* routes[i].emit[j] and emit_on_failure[j] */
    RT_SCOPE_CLAIM,     /* routes[i].claim_check */
} rt_scope_t;

/* Which kinds of route take a route-level key. */
enum { RT_KIND_SQL = 1, RT_KIND_HTTP = 2, RT_KIND_ACTION = 4 };

typedef struct {
    rt_scope_t scope;
    const char *key;
    const char *type; /* as the reference shows it */
    const char *def;  /* as the reference shows it */
    int kinds;        /* RT_KIND_* (route scope; the others: the kinds that take the scope) */
    long min, max;    /* integer keys: the accepted range (min <= max); others 0, 0 */
    long dflt;        /* integer keys: the value when absent */
    const char *doc;
} rt_key_t;

/* The key of that scope and name, or NULL. */
const rt_key_t *rt_key_find(rt_scope_t scope, const char *key);

/* Refuses, as "<field>.<key>: unknown key", each key of o that the table
 * does not hold for scope. field is the object's own path ("" at a route). */
void rt_keys_check(const json_t *o, rt_scope_t scope, const char *field, ib_problems_t *p);

/* An integer key of o with the table's bounds and default: the default
 * when absent, a problem naming field when out of range. */
long rt_key_int(const json_t *o, rt_scope_t scope, const char *key, const char *field,
                ib_problems_t *p);

/* The reference tables, markdown (inboxd --route-reference). */
void rt_keys_print_markdown(FILE *fp);

#endif
