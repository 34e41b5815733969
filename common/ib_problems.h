/*
 * ib_problems.h - the problems found while reading a configuration (the
 * daemon's settings and its routes): counted, and each one written to errs
 * (when not NULL) as "config: <prefix>.<key>: <text>" (the prefix, such as
 * "routes[2]", may be empty), so every bad key is reported the same way.
 *
 * thread: main (start and --check-config).
 */
#ifndef IB_PROBLEMS_H
#define IB_PROBLEMS_H

#include <stdio.h>

typedef struct ib_problems {
    FILE *errs;
    int n;
    char prefix[32];
} ib_problems_t;

void ib_problem(ib_problems_t *p, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
