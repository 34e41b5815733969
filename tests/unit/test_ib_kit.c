/* The runtime kit of common/: full-jitter backoff and its random state
 * (ib_backoff.c), the hex codec, percent and JSON string encoders and the
 * percent decoder (ib_enc.c), and the monotonic sleep and
 * condition-variable deadline (ib_time.c). */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "ib_backoff.h"
#include "ib_enc.h"
#include "ib_test.h"
#include "ib_time.h"
#include "ib_utf8.h"

/* Every draw lies in [0, min(max, base * 2^(n-1))] and the cap is reached. */
static void test_backoff_bounds(void)
{
    ib_rand_t st = 0;
    for (int n = -1; n <= 40; n++) {
        long long cap = 100;
        for (int i = 1; i < n && cap < 30000; i++)
            cap *= 2;
        if (cap > 30000)
            cap = 30000;
        long long hi = -1;
        for (int k = 0; k < 4000; k++) {
            long long w = ib_backoff_ms(100, 30000, n, &st);
            if (w < 0 || w > cap)
                IB_FAIL_("n=%d: %lld outside [0, %lld]", n, w, cap);
            if (w > hi)
                hi = w;
        }
        if (hi < cap * 9 / 10)
            IB_FAIL_("n=%d: highest of 4000 draws %lld, cap %lld", n, hi, cap);
    }
    ASSERT_EQ(ib_backoff_ms(0, 1000, 3, &st), 0);
    ASSERT_EQ(ib_backoff_ms(500, 0, 3, &st), 0);
    /* A base above the cap is capped; a huge attempt number does not overflow. */
    for (int k = 0; k < 100; k++) {
        ASSERT_TRUE(ib_backoff_ms(5000, 1000, 1, &st) <= 1000);
        ASSERT_TRUE(ib_backoff_ms(1LL << 40, 1LL << 62, 1000, &st) <= (1LL << 62));
    }
    ASSERT_EQ(ib_rand_range(&st, 7, 7), 7);
    ASSERT_EQ(ib_rand_range(&st, 9, 3), 9);
}

/* Full jitter: spread over the whole range, mean near half the cap, every
 * decile hit; not the half-to-all or 80-100% jitter it replaced. */
static void test_backoff_jitter(void)
{
    ib_rand_t st = 0;
    int decile[10] = {0};
    double sum = 0;
    const int draws = 20000;
    for (int k = 0; k < draws; k++) {
        long long w = ib_backoff_ms(100, 100000, 5, &st); /* cap 1600 */
        sum += (double)w;
        decile[w * 10 / 1601]++;
    }
    double mean = sum / draws;
    if (mean < 760 || mean > 840)
        IB_FAIL_("mean %.1f, want about 800", mean);
    for (int d = 0; d < 10; d++)
        if (decile[d] < draws / 10 * 8 / 10 || decile[d] > draws / 10 * 12 / 10)
            IB_FAIL_("decile %d holds %d of %d draws", d, decile[d], draws);
}

/* Two zero states seed apart (no shared sequence between threads or callers). */
static void test_seeds_differ(void)
{
    ib_rand_t a = 0, b = 0;
    int same = 0;
    for (int k = 0; k < 64; k++)
        same += ib_rand_range(&a, 0, 1000000) == ib_rand_range(&b, 0, 1000000);
    ASSERT_TRUE(same < 4);
}

static void test_hex(void)
{
    char out[11];
    ib_enc_hex(out,
               "\x00\x7f\xab\xff"
               "A",
               5);
    ASSERT_STREQ(out, "007fabff41");
    ib_enc_hex(out, "", 0);
    ASSERT_STREQ(out, "");
}

/* The decoder: either case or lowercase only; a non-digit or a short string
 * is refused without reading past its NUL. */
static void test_dec_hex(void)
{
    unsigned char b[5];
    char back[11];
    ASSERT_TRUE(ib_dec_hex(b, "007fABff41", 5, IB_HEX_ANY_CASE));
    ib_enc_hex(back, b, 5);
    ASSERT_STREQ(back, "007fabff41");
    ASSERT_TRUE(!ib_dec_hex(b, "007fABff41", 5, IB_HEX_LOWER));
    ASSERT_TRUE(ib_dec_hex(b, "007fabff41", 5, IB_HEX_LOWER));
    ASSERT_EQ(b[2], 0xab);
    ASSERT_TRUE(!ib_dec_hex(b, "0g", 1, IB_HEX_ANY_CASE));
    ASSERT_TRUE(!ib_dec_hex(b, "g0", 1, IB_HEX_ANY_CASE));
    char *short_one = strdup("abc"); /* ASan: a read past the NUL would be caught */
    ASSERT_TRUE(!ib_dec_hex(b, short_one, 2, IB_HEX_ANY_CASE));
    ASSERT_TRUE(!ib_dec_hex(b, short_one + 2, 1, IB_HEX_ANY_CASE));
    free(short_one);
    ASSERT_TRUE(ib_dec_hex(b, "", 0, IB_HEX_LOWER));
    ASSERT_EQ(ib_hex_digit('0'), 0);
    ASSERT_EQ(ib_hex_digit('F'), 15);
    ASSERT_EQ(ib_hex_digit('f'), 15);
    ASSERT_EQ(ib_hex_digit('g'), -1);
    ASSERT_EQ(ib_hex_digit('/'), -1);
    ASSERT_EQ(ib_hex_digit(0), -1);
}

/* The one UTC formatter, both styles, on a fixed instant; a small buffer cuts. */
static void test_utc_format(void)
{
    char buf[IB_TIME_TEXT_MAX], small[11];
    const long long ms = 1764918967123LL; /* 2025-12-05 07:16:07.123 UTC */
    ib_time_rfc3339(buf, sizeof buf, ms);
    ASSERT_STREQ(buf, "2025-12-05T07:16:07.123Z");
    ib_time_sql(buf, sizeof buf, ms);
    ASSERT_STREQ(buf, "2025-12-05 07:16:07.123");
    ib_time_sql(buf, sizeof buf, 5);
    ASSERT_STREQ(buf, "1970-01-01 00:00:00.005");
    ib_time_rfc3339(small, sizeof small, ms);
    ASSERT_STREQ(small, "2025-12-05");
    char wide[40];
    ib_time_rfc3339(wide, sizeof wide, 253402300800000LL); /* year 10000: as %04d writes it */
    ASSERT_STREQ(wide, "10000-01-01T00:00:00.000Z");
    ib_time_rfc3339(buf, sizeof buf, -1); /* now */
    ASSERT_EQ(strlen(buf), IB_TIME_TEXT_MAX - 1);
    ASSERT_TRUE(strncmp(buf, "20", 2) == 0 && buf[23] == 'Z');
}

/* Decimal as "%lld" writes it, the extremes included. */
static void test_decimal(void)
{
    const long long v[] = {0, 7, -7, 10, -10, 1234567890123LL, LLONG_MAX, LLONG_MIN};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        char want[IB_ENC_DECIMAL_MAX + 8], got[IB_ENC_DECIMAL_MAX];
        snprintf(want, sizeof(want), "%lld", v[i]);
        ASSERT_EQ(ib_enc_decimal(got, v[i]), strlen(want));
        ASSERT_STREQ(got, want);
    }
}

/* RFC 3986: the unreserved characters stay, everything else (sub-delims
 * such as ! * ' ( ) included) becomes %XX in uppercase hex. */
static void test_pct(void)
{
    char out[64];
    const char *in = "Az09-._~ !*'()/:?#&=+%\xC3\xA9";
    ASSERT_EQ(ib_enc_pct(out, sizeof out, in, strlen(in)), 8 + 14 * 3 + 2 * 3);
    ASSERT_STREQ(out, "Az09-._~%20%21%2A%27%28%29%2F%3A%3F%23%26%3D%2B%25%C3%A9");
    /* Cut: never half an escape; the return says how much was wanted. */
    ASSERT_EQ(ib_enc_pct(out, 5, "ab/cd", 5), 7);
    ASSERT_STREQ(out, "ab");
    ASSERT_EQ(ib_enc_pct(NULL, 0, "a b", 3), 5);
    char *d = ib_enc_pct_dup("sb://ns.example/q 1");
    ASSERT_STREQ(d, "sb%3A%2F%2Fns.example%2Fq%201");
    free(d);
}

/* Decoding in place: either case of hex; a '%' without two hex digits stays. */
static void test_dec_pct(void)
{
    char a[] = "Bearer%20abc%3D%3d", b[] = "100%25 %zz %4 %", c[] = "";
    ASSERT_STREQ(ib_dec_pct(a), "Bearer abc==");
    ASSERT_STREQ(ib_dec_pct(b), "100% %zz %4 %");
    ASSERT_STREQ(ib_dec_pct(c), "");
    char *enc = ib_enc_pct_dup("k=v, x/y \xC3\xA9");
    ASSERT_STREQ(ib_dec_pct(enc), "k=v, x/y \xC3\xA9"); /* the round trip */
    free(enc);
}

static void json_is(const char *in, size_t n, const char *want)
{
    char out[128], quoted[132];
    size_t used;
    size_t len = ib_enc_json(out, sizeof out, in, n, &used);
    ASSERT_EQ(len, strlen(out));
    ASSERT_EQ(used, n);
    ASSERT_STREQ(out, want);
    /* jansson reads it back as one string, valid UTF-8. */
    snprintf(quoted, sizeof quoted, "\"%s\"", out);
    json_error_t jerr;
    json_t *j = json_loads(quoted, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!j)
        IB_FAIL_("jansson refused %s: %s", quoted, jerr.text);
    json_decref(j);
}

static void test_json(void)
{
    json_is("plain", 5, "plain");
    json_is("q\"b\\s/", 6, "q\\\"b\\\\s/");
    json_is("\n\r\t\b\f", 5, "\\n\\r\\t\\b\\f");
    json_is("\x01\x1f\x7f", 3, "\\u0001\\u001f\\u007f");
    json_is("nul\0in", 6, "nul\\u0000in");
    json_is("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", 14,
            "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
    json_is("bad\xFF\xC3(\xED\xA0\x80", 9, "bad\\ufffd\\ufffd(\\ufffd\\ufffd\\ufffd");

    /* Too small: stops before an escape or a sequence, reports what it took. */
    char out[8];
    size_t used;
    ASSERT_EQ(ib_enc_json(out, 7, "abcde\"f", 7, &used), 5);
    ASSERT_STREQ(out, "abcde");
    ASSERT_EQ(used, 5);
    ASSERT_EQ(ib_enc_json(out, 7, "abcd\xE2\x82\xAC", 7, &used), 4);
    ASSERT_EQ(used, 4);
    ASSERT_TRUE(ib_utf8_valid(out, strlen(out)));
}

static void on_alarm(int sig)
{
    (void)sig;
}

/* A signal does not cut the sleep short, and a stop flag does. */
static void test_sleep(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm; /* no SA_RESTART: the sleep sees EINTR */
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 20000}, {0, 20000}}; /* every 20 ms */
    setitimer(ITIMER_REAL, &it, NULL);
    long long t0 = ib_mono_ms();
    ASSERT_TRUE(ib_sleep_ms(200, NULL));
    long long took = ib_mono_ms() - t0;
    memset(&it, 0, sizeof it);
    setitimer(ITIMER_REAL, &it, NULL);
    if (took < 200)
        IB_FAIL_("slept %lld ms of 200 under a 20 ms timer", took);

    volatile sig_atomic_t stop = 1;
    t0 = ib_mono_ms();
    ASSERT_TRUE(!ib_sleep_ms(5000, &stop));
    ASSERT_TRUE(ib_mono_ms() - t0 < 1000);
    ASSERT_TRUE(ib_sleep_ms(0, NULL));
}

/* The deadline is monotonic: a wait ends at it with ETIMEDOUT, and a
 * deadline already past returns at once. */
static void test_cond_deadline(void)
{
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv;
    ASSERT_EQ(ib_cond_init(&cv), 0);
    pthread_mutex_lock(&mu);
    long long t0 = ib_mono_ms();
    int rc = 0;
    while (rc != ETIMEDOUT)
        rc = ib_cond_wait_until(&cv, &mu, t0 + 150);
    long long took = ib_mono_ms() - t0;
    if (took < 150 || took > 2000)
        IB_FAIL_("waited %lld ms for a 150 ms deadline", took);
    ASSERT_EQ(ib_cond_wait_until(&cv, &mu, t0), ETIMEDOUT);
    pthread_mutex_unlock(&mu);
    pthread_cond_destroy(&cv);
}

int main(void)
{
    RUN(test_backoff_bounds);
    RUN(test_backoff_jitter);
    RUN(test_seeds_differ);
    RUN(test_hex);
    RUN(test_dec_hex);
    RUN(test_dec_pct);
    RUN(test_pct);
    RUN(test_json);
    RUN(test_decimal);
    RUN(test_utc_format);
    RUN(test_sleep);
    RUN(test_cond_deadline);
    return ib_test_done();
}
