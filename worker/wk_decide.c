/*
 * wk_decide.c - the one way a message's decision is made: wk_decide and
 * wk_decide_dead_letter (see wk_decide.h). thread: a db worker.
 */
#include "wk_decide.h"

#include <stdarg.h>
#include <stdio.h>

#include "ib_utf8.h"

void wk_decide(wk_decision_t *d, wk_outcome_t o)
{
    d->outcome = o;
    d->decided = true;
    switch (o) {
    case WK_OUT_APPLIED:
    case WK_OUT_DUPLICATE:
    case WK_OUT_SKIPPED:
    case WK_OUT_RECORDED:
        d->disposition = SB_COMPLETE;
        break;
    case WK_OUT_ABANDONED:
        d->disposition = SB_ABANDON;
        break;
    case WK_OUT_CONFLICT:
    case WK_OUT_DEAD_LETTERED:
    case WK_OUT_UNCERTAIN:
        d->disposition = SB_DEADLETTER; /* wk_decide_dead_letter gives the reason */
        break;
    case WK_OUT_RELEASED:
    case WK_OUT_LOCK_LOST:          /* what a settlement met, never a decision */
    case WK_OUT_SETTLEMENT_UNKNOWN: /* likewise */
    case WK_OUT__COUNT:
        d->disposition = SB_RELEASE;
        break;
    }
}

sb_disposition_t wk_decide_settlement(const wk_decision_t *d)
{
    if (!d->decided)
        return SB_RELEASE;
    if (d->disposition == SB_COMPLETE && d->carry.unresolved)
        return SB_ABANDON;
    return d->disposition;
}

static void vdead_letter(wk_decision_t *d, const char *word, wk_outcome_t o, ib_class_t cls,
                         const char *fmt, va_list ap)
{
    char raw[sizeof(d->description)];
    wk_decide(d, o);
    d->disposition = SB_DEADLETTER;
    d->reason_class = cls;
    ib_utf8_sanitize(d->reason, sizeof(d->reason), word);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    ib_utf8_sanitize(d->description, sizeof(d->description), raw);
}

void wk_decide_dead_letter(wk_decision_t *d, wk_dl_reason_t r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdead_letter(d, wk_dl_reason_name(r), wk_dl_reason_outcome(r), wk_dl_reason_class(r), fmt, ap);
    va_end(ap);
}

void wk_decide_route_dead_letter(wk_decision_t *d, const char *reason, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdead_letter(d, reason, WK_OUT_DEAD_LETTERED, IB_CLASS_PERMANENT, fmt, ap);
    va_end(ap);
}

void wk_decide_describe_db(const ib_error_t *e, char *buf, size_t size)
{
    if (e->sqlstate[0])
        snprintf(buf, size, "SQLSTATE %s, native %ld: %s", e->sqlstate, e->native, e->text);
    else
        snprintf(buf, size, "%s", e->text);
}
