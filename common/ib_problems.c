/*
 * ib_problems.c - counting and writing configuration problems (see
 * ib_problems.h). thread: main.
 */
#include "ib_problems.h"

#include <stdarg.h>

void ib_problem(ib_problems_t *p, const char *key, const char *fmt, ...)
{
    va_list ap;
    p->n++;
    if (!p->errs)
        return;
    fprintf(p->errs, "config: %s%s%s: ", p->prefix, p->prefix[0] && *key ? "." : "", key);
    va_start(ap, fmt);
    vfprintf(p->errs, fmt, ap);
    va_end(ap);
    fputc('\n', p->errs);
}
