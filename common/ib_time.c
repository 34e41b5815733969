/*
 * ib_time.c - monotonic and wall clocks, sleep, condition-variable deadlines
 * (see ib_time.h). thread: any.
 */
#include "ib_time.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

long long ib_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long long ib_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* v (0 <= v < 10^width) in width digits, zeros first; the end. */
static char *digits(char *p, int v, int width)
{
    for (int i = width - 1; i >= 0; i--, v /= 10)
        p[i] = (char)('0' + v % 10);
    return p + width;
}

/* ms as UTC: the date, sep, the time with milliseconds, then zone. */
static void utc_format(char *buf, size_t size, long long ms, char sep, const char *zone)
{
    struct tm tm;
    time_t sec;

    if (ms < 0)
        ms = ib_now_ms();
    sec = (time_t)(ms / 1000);
    gmtime_r(&sec, &tm);
    if (tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999 || ms % 1000 < 0 ||
        size < 24 + strlen(zone)) {
        snprintf(buf, size, "%04d-%02d-%02d%c%02d:%02d:%02d.%03d%s", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, sep, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 (int)(ms % 1000), zone);
        return;
    }
    /* As the snprintf above writes it, digit by digit: a log line has two of these. */
    char *p = buf;
    p = digits(p, tm.tm_year + 1900, 4);
    *p++ = '-';
    p = digits(p, tm.tm_mon + 1, 2);
    *p++ = '-';
    p = digits(p, tm.tm_mday, 2);
    *p++ = sep;
    p = digits(p, tm.tm_hour, 2);
    *p++ = ':';
    p = digits(p, tm.tm_min, 2);
    *p++ = ':';
    p = digits(p, tm.tm_sec, 2);
    *p++ = '.';
    p = digits(p, (int)(ms % 1000), 3);
    memcpy(p, zone, strlen(zone) + 1);
}

void ib_time_rfc3339(char *buf, size_t size, long long ms)
{
    utc_format(buf, size, ms, 'T', "Z");
}

void ib_time_sql(char *buf, size_t size, long long ms)
{
    utc_format(buf, size, ms, ' ', "");
}

static struct timespec mono_at(long long ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    return ts;
}

bool ib_sleep_ms(long long ms, const volatile sig_atomic_t *stop)
{
    if (ms <= 0)
        return !(stop && *stop);
    /* An absolute monotonic deadline: a resumed sleep never drifts past it. */
    struct timespec until = mono_at(ib_mono_ms() + ms);
    for (;;) {
        if (stop && *stop)
            return false;
        int rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL);
        if (rc == 0)
            return !(stop && *stop);
        if (rc != EINTR)
            return true; /* EINVAL cannot happen with a normalised timespec */
    }
}

int ib_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc != 0)
        return rc;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

int ib_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, long long deadline_ms)
{
    if (deadline_ms <= ib_mono_ms())
        return ETIMEDOUT;
    struct timespec until = mono_at(deadline_ms);
    int rc = pthread_cond_timedwait(cv, mu, &until);
    return rc == ETIMEDOUT ? ETIMEDOUT : 0;
}
