/*
 * rt_route_test.h - helpers shared by the route unit tests: JSON from text
 * (aborting on a typo in the test itself) and compiling routes while
 * capturing their "config: ..." problem lines.
 */
#ifndef WK_ROUTE_TEST_H
#define WK_ROUTE_TEST_H

#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "rt_route.h"

static inline json_t *J(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j) {
        fprintf(stderr, "bad test JSON: %s: %s\n", e.text, text);
        abort();
    }
    return j;
}

/* Compiles text into *rs; returns the problem lines (free them), *n their count. */
static inline char *compile_errors(const char *text, int *n, rt_routes_t *rs)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    json_t *j = J(text);
    *n = rt_routes_compile(j, rs, fp);
    fclose(fp);
    json_decref(j);
    return buf;
}

#endif
