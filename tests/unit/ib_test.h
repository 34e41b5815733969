/*
 * ib_test.h - the assert macros of inboxd's unit tests. A failing assert
 * prints both sides with file and line and makes the test binary exit 1.
 *
 *   static void test_parse(void) { ASSERT_EQ(parse("1"), 1); }
 *   int main(void) { RUN(test_parse); return ib_test_done(); }
 */
#ifndef IB_TEST_H
#define IB_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ib_test_failures;
static int ib_test_count;

#define IB_FAIL_(...)                                                                              \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        ib_test_failures++;                                                                        \
        return;                                                                                    \
    } while (0)

#define ASSERT_TRUE(c)                                                                             \
    do {                                                                                           \
        if (!(c))                                                                                  \
            IB_FAIL_("assertion failed: %s", #c);                                                  \
    } while (0)

#define ASSERT_EQ(a, b)                                                                            \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_)                                                                              \
            IB_FAIL_("%s == %s: %lld != %lld", #a, #b, a_, b_);                                    \
    } while (0)

#define ASSERT_NE(a, b)                                                                            \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ == b_)                                                                              \
            IB_FAIL_("%s != %s: both %lld", #a, #b, a_);                                           \
    } while (0)

#define ASSERT_STREQ(a, b)                                                                         \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                                     \
            IB_FAIL_("%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)",                     \
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
        int before_ = ib_test_failures;                                                            \
        ib_test_count++;                                                                           \
        fn();                                                                                      \
        fprintf(stderr, "%s %s\n", ib_test_failures == before_ ? "ok  " : "FAIL", #fn);            \
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
