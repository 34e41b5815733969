/*
 * ib_test.h - the one assert family of inboxd's C tests (unit, db, amqp and
 * the others). A failing assert prints file, line, the expression and the
 * value of each side, counts the failure and ends the case: inside RUN (or
 * ib_test_run_) it jumps back to the runner, which goes on with the next
 * case; outside one, or on a thread other than the runner's, the test binary
 * exits 1 at once. Each side is evaluated once.
 *
 *   static void test_parse(void) { ASSERT_EQ(parse("1"), 1); }
 *   int main(void) { RUN(test_parse); return ib_test_done(); }
 *
 * thread: the runner's (see above for the others).
 */
#ifndef IB_TEST_H
#define IB_TEST_H

#include <pthread.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One copy per test binary however many of its files include this (weak). */
__attribute__((weak)) int ib_test_failures = 0;
__attribute__((weak)) int ib_test_count = 0;
__attribute__((weak)) jmp_buf *ib_test_jmp = NULL; /* the running case's, or NULL */
__attribute__((weak)) pthread_t ib_test_runner;    /* the thread that runs the cases */

/* Counts a failure (already printed) and ends the case. */
__attribute__((noreturn)) static inline void ib_test_fail_(void)
{
    ib_test_failures++;
    if (ib_test_jmp && pthread_equal(pthread_self(), ib_test_runner))
        longjmp(*ib_test_jmp, 1);
    fflush(stderr);
    exit(1);
}

#define IB_FAIL_(...)                                                                              \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        ib_test_fail_();                                                                           \
    } while (0)

/* Runs one case; true when none of its asserts failed. */
static inline bool ib_test_run_(void (*fn)(void))
{
    jmp_buf here;
    jmp_buf *outer = ib_test_jmp;
    int before = ib_test_failures;
    ib_test_runner = pthread_self();
    if (setjmp(here) == 0) {
        ib_test_jmp = &here;
        fn();
    }
    ib_test_jmp = outer;
    return ib_test_failures == before;
}

/* Printable forms for the comparisons: each writes into buf (64 bytes). */
static inline const char *ib_show_int(char *buf, long long v)
{
    snprintf(buf, 64, "%lld", v);
    return buf;
}
static inline const char *ib_show_uint(char *buf, unsigned long long v)
{
    snprintf(buf, 64, "%llu", v);
    return buf;
}
static inline const char *ib_show_dbl(char *buf, double v)
{
    snprintf(buf, 64, "%g", v);
    return buf;
}
static inline const char *ib_show_str(char *buf, const char *v)
{
    if (v)
        snprintf(buf, 64, "\"%.60s\"", v);
    else
        snprintf(buf, 64, "(null)");
    return buf;
}
static inline const char *ib_show_ptr(char *buf, const void *v)
{
    if (v)
        snprintf(buf, 64, "%p", v);
    else
        snprintf(buf, 64, "NULL");
    return buf;
}

#define IB_SHOW_(buf, x)                                                                           \
    _Generic((x),                                                                                  \
        char *: ib_show_str,                                                                       \
        const char *: ib_show_str,                                                                 \
        float: ib_show_dbl,                                                                        \
        double: ib_show_dbl,                                                                       \
        _Bool: ib_show_int,                                                                        \
        char: ib_show_int,                                                                         \
        signed char: ib_show_int,                                                                  \
        short: ib_show_int,                                                                        \
        int: ib_show_int,                                                                          \
        long: ib_show_int,                                                                         \
        long long: ib_show_int,                                                                    \
        unsigned char: ib_show_uint,                                                               \
        unsigned short: ib_show_uint,                                                              \
        unsigned: ib_show_uint,                                                                    \
        unsigned long: ib_show_uint,                                                               \
        unsigned long long: ib_show_uint,                                                          \
        default: ib_show_ptr)((buf), (x))

/* a op b, each side evaluated once and printed on failure. */
#define IB_ASSERT_OP_(a, op, b)                                                                    \
    do {                                                                                           \
        __auto_type a_ = (a);                                                                      \
        __auto_type b_ = (b);                                                                      \
        /* a literal side no longer looks constant here: compare as a op b would */                \
        _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wsign-compare\"")      \
        bool ok_ = a_ op b_;                                                                       \
        _Pragma("GCC diagnostic pop")                                                              \
        if (!ok_) {                                                                                \
            char sa_[64], sb_[64];                                                                 \
            IB_FAIL_("%s %s %s: %s vs %s", #a, #op, #b, IB_SHOW_(sa_, a_), IB_SHOW_(sb_, b_));     \
        }                                                                                          \
    } while (0)

#define ASSERT_TRUE(c)                                                                             \
    do {                                                                                           \
        if (!(c))                                                                                  \
            IB_FAIL_("assertion failed: %s", #c);                                                  \
    } while (0)

#define ASSERT_EQ(a, b) IB_ASSERT_OP_(a, ==, b)
#define ASSERT_NE(a, b) IB_ASSERT_OP_(a, !=, b)
#define ASSERT_LT(a, b) IB_ASSERT_OP_(a, <, b)
#define ASSERT_LE(a, b) IB_ASSERT_OP_(a, <=, b)
#define ASSERT_GT(a, b) IB_ASSERT_OP_(a, >, b)
#define ASSERT_GE(a, b) IB_ASSERT_OP_(a, >=, b)

/* Both strings equal (a NULL side fails). */
#define ASSERT_STREQ(a, b)                                                                         \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                                     \
            IB_FAIL_("%s == %s: \"%s\" vs \"%s\"", #a, #b, a_ ? a_ : "(null)",                     \
                     b_ ? b_ : "(null)");                                                          \
    } while (0)

#define ASSERT_CONTAINS(hay, needle)                                                               \
    do {                                                                                           \
        const char *h_ = (hay), *n_ = (needle);                                                    \
        if (!h_ || !strstr(h_, n_))                                                                \
            IB_FAIL_("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_);                    \
    } while (0)

#define ASSERT_NOT_CONTAINS(hay, needle)                                                           \
    do {                                                                                           \
        const char *h_ = (hay), *n_ = (needle);                                                    \
        if (h_ && strstr(h_, n_))                                                                  \
            IB_FAIL_("\"%s\" contains \"%s\"", h_, n_);                                            \
    } while (0)

#define RUN(fn)                                                                                    \
    do {                                                                                           \
        ib_test_count++;                                                                           \
        fprintf(stderr, "%s %s\n", ib_test_run_(fn) ? "ok  " : "FAIL", #fn);                       \
    } while (0)

static inline int ib_test_done(void)
{
    fprintf(stderr, "%d tests, %d failed\n", ib_test_count, ib_test_failures);
    return ib_test_failures ? 1 : 0;
}

/* Seconds scaled for slow machines and sanitizers (INBOXD_TEST_TIMEOUT_MULTIPLIER). */
static inline double ib_test_timeout(double seconds)
{
    const char *m = getenv("INBOXD_TEST_TIMEOUT_MULTIPLIER");
    double k = m ? atof(m) : 1.0;
    return seconds * (k > 0 ? k : 1.0);
}

#endif
