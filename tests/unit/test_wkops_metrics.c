/*
 * test_wkops_metrics.c - the metrics registry: counts, label bounds,
 * histogram arithmetic, text-format escaping and concurrent updates.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_log.h"
#include "ib_test.h"
#include "ib_time.h"
#include "wk_metrics.h"

/*
 * Value of the sample whose name-and-labels part is exactly series, or -1
 * when absent. Looks at whole lines only, so "x_total" never matches
 * "x_total_more".
 */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return atof(p + n + 1);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
}

static int count_lines_with(const char *text, const char *prefix)
{
    int k = 0;
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, prefix, n) == 0)
            k++;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return k;
}

static void test_initial_render(void)
{
    wk_metrics_t *m = wk_metrics_new("1.2.3");
    size_t len = 0;
    char *t = wk_metrics_render(m, &len);
    ASSERT_TRUE(t != NULL);
    ASSERT_EQ(len, strlen(t));
    ASSERT_EQ(t[len - 1], '\n');
    ASSERT_EQ(sample(t, "inboxd_messages_total{result=\"applied\"}"), 0);
    ASSERT_EQ(sample(t, "inboxd_messages_total{result=\"dead_lettered\"}"), 0);
    ASSERT_EQ(sample(t, "inboxd_duplicates_total{by=\"inbox\"}"), 0);
    ASSERT_EQ(sample(t, "inboxd_duplicates_total{by=\"business_key\"}"), 0);
    ASSERT_EQ(sample(t, "inboxd_oldest_unsettled_enqueued_seconds"), 0);
    ASSERT_EQ(sample(t, "inboxd_message_age_seconds_count"), 0);
    ASSERT_EQ(sample(t, "inboxd_retries_total{class=\"transient\"}"), 0);
    ASSERT_EQ(sample(t, "inboxd_lock_renewals_total{result=\"ok\"}"), 0);
    ASSERT_EQ(sample(t, "inboxd_lock_lost_total"), 0);
    ASSERT_EQ(sample(t, "inboxd_in_flight"), 0);
    ASSERT_EQ(sample(t, "inboxd_oldest_in_flight_seconds"), 0);
    ASSERT_EQ(sample(t, "inboxd_handler_duration_seconds_count"), 0);
    ASSERT_EQ(sample(t, "inboxd_reconnects_total"), 0);
    ASSERT_EQ(sample(t, "inboxd_batch_fallbacks_total"), 0);
    ASSERT_EQ(sample(t, "inboxd_build_info{version=\"1.2.3\"}"), 1);
    ASSERT_CONTAINS(t, "# TYPE inboxd_messages_total counter\n");
    ASSERT_CONTAINS(t, "# TYPE inboxd_in_flight gauge\n");
    ASSERT_CONTAINS(t, "# TYPE inboxd_handler_duration_seconds histogram\n");
    /* No dead-letter series exists before a message is dead-lettered. */
    ASSERT_EQ(count_lines_with(t, "inboxd_dead_letters_total{"), 0);
    free(t);
    wk_metrics_free(m);
}

static void test_counts(void)
{
    wk_metrics_t *m = wk_metrics_new(NULL);
    for (int i = 0; i < 5; i++)
        wk_metrics_message(m, WK_OUT_APPLIED);
    wk_metrics_message(m, WK_OUT_DUPLICATE);
    wk_metrics_message(m, WK_OUT_DUPLICATE);
    wk_metrics_message(m, WK_OUT_LOCK_LOST);
    wk_metrics_message(m, WK_OUT__COUNT); /* ignored */
    wk_metrics_retry(m, IB_CLASS_TRANSIENT);
    wk_metrics_retry(m, IB_CLASS_TRANSIENT);
    wk_metrics_retry(m, IB_CLASS_AMBIGUOUS);
    wk_metrics_lock_renewal(m, WK_RENEW_OK);
    wk_metrics_lock_renewal(m, WK_RENEW_FAILED);
    wk_metrics_lock_renewal(m, WK_RENEW_LOST);
    wk_metrics_reconnect(m);
    wk_metrics_batch_fallback(m);
    wk_metrics_in_flight_add(m, 3);
    wk_metrics_in_flight_add(m, -1);
    char *t = wk_metrics_render(m, NULL);
    ASSERT_EQ(sample(t, "inboxd_messages_total{result=\"applied\"}"), 5);
    ASSERT_EQ(sample(t, "inboxd_messages_total{result=\"duplicate\"}"), 2);
    ASSERT_EQ(sample(t, "inboxd_messages_total{result=\"lock_lost\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_duplicates_total{by=\"inbox\"}"), 2);
    ASSERT_EQ(sample(t, "inboxd_lock_lost_total"), 1);
    ASSERT_EQ(sample(t, "inboxd_retries_total{class=\"transient\"}"), 2);
    ASSERT_EQ(sample(t, "inboxd_retries_total{class=\"ambiguous\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_lock_renewals_total{result=\"ok\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_lock_renewals_total{result=\"failed\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_lock_renewals_total{result=\"lost\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_reconnects_total"), 1);
    ASSERT_EQ(sample(t, "inboxd_batch_fallbacks_total"), 1);
    ASSERT_EQ(sample(t, "inboxd_in_flight"), 2);
    ASSERT_CONTAINS(t, "inboxd_build_info{version=\"" INBOXD_VERSION "\"} 1\n");
    free(t);
    wk_metrics_in_flight_set(m, -4);
    t = wk_metrics_render(m, NULL);
    ASSERT_EQ(sample(t, "inboxd_in_flight"), 0);
    free(t);
    wk_metrics_free(m);
}

static void test_histogram(void)
{
    wk_metrics_t *m = wk_metrics_new("x");
    wk_metrics_handler_duration(m, 0.0005); /* first bucket */
    wk_metrics_handler_duration(m, 0.001);  /* le is inclusive */
    wk_metrics_handler_duration(m, 0.2);
    wk_metrics_handler_duration(m, 100); /* above every bound */
    wk_metrics_handler_duration(m, -1);  /* clamps to 0 */
    char *t = wk_metrics_render(m, NULL);
    ASSERT_EQ(sample(t, "inboxd_handler_duration_seconds_bucket{le=\"0.001\"}"), 3);
    ASSERT_EQ(sample(t, "inboxd_handler_duration_seconds_bucket{le=\"0.1\"}"), 3);
    ASSERT_EQ(sample(t, "inboxd_handler_duration_seconds_bucket{le=\"0.25\"}"), 4);
    ASSERT_EQ(sample(t, "inboxd_handler_duration_seconds_bucket{le=\"30\"}"), 4);
    ASSERT_EQ(sample(t, "inboxd_handler_duration_seconds_bucket{le=\"+Inf\"}"), 5);
    ASSERT_EQ(sample(t, "inboxd_handler_duration_seconds_count"), 5);
    double sum = sample(t, "inboxd_handler_duration_seconds_sum");
    ASSERT_TRUE(sum > 100.2014 && sum < 100.2016);
    ASSERT_EQ(count_lines_with(t, "inboxd_handler_duration_seconds_bucket{"),
              (long long)wk_metrics_duration_bucket_count + 1);
    /* Buckets are cumulative: never decreasing down the page. */
    double prev = 0;
    for (size_t i = 0; i < wk_metrics_duration_bucket_count; i++) {
        char series[96];
        snprintf(series, sizeof series, "inboxd_handler_duration_seconds_bucket{le=\"%g\"}",
                 wk_metrics_duration_buckets[i]);
        double v = sample(t, series);
        ASSERT_TRUE(v >= prev);
        prev = v;
    }
    free(t);
    wk_metrics_free(m);
}

/* HTTP routes: requests by route and class, their histogram, uncertain, takeovers. */
static void test_http(void)
{
    wk_metrics_t *m = wk_metrics_new("x");
    char *t = wk_metrics_render(m, NULL);
    /* No route has called yet: no series, but the totals are there at 0. */
    ASSERT_EQ(count_lines_with(t, "inboxd_http_requests_total{"), 0);
    ASSERT_EQ(sample(t, "inboxd_uncertain_total"), 0);
    ASSERT_EQ(sample(t, "inboxd_claims_taken_over_total"), 0);
    ASSERT_EQ(sample(t, "inboxd_http_duration_seconds_count"), 0);
    ASSERT_EQ(sample(t, "inboxd_http_retry_after_capped_total"), 0);
    free(t);
    wk_metrics_retry_after_capped(m);
    wk_metrics_http_request(m, 0, "2xx", 0.02);
    wk_metrics_http_request(m, 0, "2xx", 0.03);
    wk_metrics_http_request(m, 0, "timeout", 10);
    wk_metrics_http_request(m, 2, "5xx", 0.5);
    wk_metrics_http_request(m, 2, "teapot", 0.5); /* unknown class: error */
    wk_metrics_http_request(m, 500, "4xx", 0.1);  /* past the bound: other */
    wk_metrics_uncertain(m);
    wk_metrics_claim_taken_over(m);
    wk_metrics_claim_taken_over(m);
    t = wk_metrics_render(m, NULL);
    ASSERT_EQ(sample(t, "inboxd_http_requests_total{route=\"0\",class=\"2xx\"}"), 2);
    ASSERT_EQ(sample(t, "inboxd_http_requests_total{route=\"0\",class=\"timeout\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_http_requests_total{route=\"0\",class=\"5xx\"}"), 0);
    ASSERT_EQ(sample(t, "inboxd_http_requests_total{route=\"2\",class=\"5xx\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_http_requests_total{route=\"2\",class=\"error\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_http_requests_total{route=\"other\",class=\"4xx\"}"), 1);
    ASSERT_EQ(count_lines_with(t, "inboxd_http_requests_total{route=\"1\""), 0);
    ASSERT_EQ(sample(t, "inboxd_http_duration_seconds_count"), 6);
    ASSERT_EQ(sample(t, "inboxd_http_duration_seconds_bucket{le=\"0.05\"}"), 2);
    ASSERT_EQ(sample(t, "inboxd_uncertain_total"), 1);
    ASSERT_EQ(sample(t, "inboxd_claims_taken_over_total"), 2);
    ASSERT_EQ(sample(t, "inboxd_http_retry_after_capped_total"), 1);
    /* The handler histogram is its own. */
    ASSERT_EQ(sample(t, "inboxd_handler_duration_seconds_count"), 0);
    free(t);
    wk_metrics_free(m);
}

static void test_dead_letter_reasons_bounded(void)
{
    wk_metrics_t *m = wk_metrics_new("x");
    wk_metrics_dead_letter(m, "IdempotencyKeyConflict", IB_CLASS_PERMANENT);
    wk_metrics_dead_letter(m, "IdempotencyKeyConflict", IB_CLASS_PERMANENT);
    wk_metrics_dead_letter(m, NULL, IB_CLASS_PERMANENT);
    wk_metrics_dead_letter(m, "quote\"back\\slash\nnewline", IB_CLASS_PERMANENT);
    for (int i = 0; i < 100; i++) {
        char r[32];
        snprintf(r, sizeof r, "Reason%d", i);
        wk_metrics_dead_letter(m, r, IB_CLASS_PERMANENT);
    }
    wk_metrics_dead_letter(m, "other", IB_CLASS_PERMANENT);
    char *t = wk_metrics_render(m, NULL);
    ASSERT_EQ(sample(t, "inboxd_dead_letters_total{reason=\"IdempotencyKeyConflict\",class=\"permanent\"}"), 2);
    ASSERT_EQ(sample(t, "inboxd_dead_letters_total{reason=\"unknown\",class=\"permanent\"}"), 1);
    /* Newline is a control character: it becomes '_' before escaping. */
    ASSERT_EQ(sample(t, "inboxd_dead_letters_total{reason=\"quote\\\"back\\\\slash_newline\",class=\"permanent\"}"), 1);
    /* 3 reasons above + 29 ReasonN fill the 32 slots; 71 more and "other" fold. */
    ASSERT_EQ(sample(t, "inboxd_dead_letters_total{reason=\"Reason28\",class=\"permanent\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_dead_letters_total{reason=\"Reason29\",class=\"permanent\"}"), -1);
    ASSERT_EQ(sample(t, "inboxd_dead_letters_total{reason=\"other\",class=\"other\"}"), 72);
    ASSERT_EQ(count_lines_with(t, "inboxd_dead_letters_total{"), WK_METRICS_MAX_REASONS + 1);
    free(t);
    /* A reason seen before the cap keeps counting after it. */
    wk_metrics_dead_letter(m, "Reason0", IB_CLASS_PERMANENT);
    t = wk_metrics_render(m, NULL);
    ASSERT_EQ(sample(t, "inboxd_dead_letters_total{reason=\"Reason0\",class=\"permanent\"}"), 2);
    free(t);
    wk_metrics_free(m);
}

static void test_reason_truncated_on_character_boundary(void)
{
    wk_metrics_t *m = wk_metrics_new("x");
    /* 63 ASCII bytes then a 2-byte character: the cut at 64 splits it. */
    char r[80];
    memset(r, 'a', 63);
    memcpy(r + 63, "\xc3\xa9tail", 7);
    wk_metrics_dead_letter(m, r, IB_CLASS_PERMANENT);
    char *t = wk_metrics_render(m, NULL);
    char series[160];
    snprintf(series, sizeof series, "inboxd_dead_letters_total{reason=\"%.63s\",class=\"permanent\"}", r);
    ASSERT_EQ(sample(t, series), 1);
    free(t);
    wk_metrics_free(m);
}

/* Messages per transaction: bucket bounds are message counts, the sum too. */
static void test_batch_sizes_and_start_time(void)
{
    wk_metrics_t *m = wk_metrics_new(NULL);
    wk_metrics_batch(m, 1);
    wk_metrics_batch(m, 3);
    wk_metrics_batch(m, 32);
    wk_metrics_batch(m, 500);
    char *t = wk_metrics_render(m, NULL);
    ASSERT_CONTAINS(t, "# TYPE inboxd_batch_messages histogram\n");
    ASSERT_EQ(sample(t, "inboxd_batch_messages_bucket{le=\"1\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_batch_messages_bucket{le=\"2\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_batch_messages_bucket{le=\"4\"}"), 2);
    ASSERT_EQ(sample(t, "inboxd_batch_messages_bucket{le=\"32\"}"), 3);
    ASSERT_EQ(sample(t, "inboxd_batch_messages_bucket{le=\"128\"}"), 3);
    ASSERT_EQ(sample(t, "inboxd_batch_messages_bucket{le=\"+Inf\"}"), 4);
    ASSERT_EQ(sample(t, "inboxd_batch_messages_sum"), 536);
    ASSERT_EQ(sample(t, "inboxd_batch_messages_count"), 4);
    /* Unix seconds of the start: after 2020, not in the future. */
    double start = sample(t, "process_start_time_seconds");
    ASSERT_TRUE(start > 1577836800.0);
    ASSERT_TRUE(start <= (double)ib_now_ms() / 1000.0);
    free(t);
    wk_metrics_free(m);
}

static void test_oldest_in_flight_age(void)
{
    wk_metrics_t *m = wk_metrics_new("x");
    wk_metrics_oldest_in_flight_set(m, ib_mono_ms() - 2500);
    char *t = wk_metrics_render(m, NULL);
    double age = sample(t, "inboxd_oldest_in_flight_seconds");
    ASSERT_TRUE(age >= 2.5 && age < 2.5 + ib_test_timeout(5));
    free(t);
    wk_metrics_oldest_in_flight_set(m, 0);
    t = wk_metrics_render(m, NULL);
    ASSERT_EQ(sample(t, "inboxd_oldest_in_flight_seconds"), 0);
    free(t);
    wk_metrics_free(m);
}

#define THREADS 4
#define PER_THREAD 20000

static void *hammer(void *arg)
{
    wk_metrics_t *m = arg;
    char reason[16];
    for (int i = 0; i < PER_THREAD; i++) {
        wk_metrics_message(m, WK_OUT_APPLIED);
        wk_metrics_in_flight_add(m, 1);
        wk_metrics_handler_duration(m, 0.003);
        wk_metrics_in_flight_add(m, -1);
        snprintf(reason, sizeof reason, "R%d", i % 40);
        wk_metrics_dead_letter(m, reason, IB_CLASS_PERMANENT);
    }
    return NULL;
}

static void *scrape(void *arg)
{
    for (int i = 0; i < 200; i++)
        free(wk_metrics_render(arg, NULL));
    return NULL;
}

static void test_concurrent_updates(void)
{
    wk_metrics_t *m = wk_metrics_new("x");
    pthread_t th[THREADS + 1];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, hammer, m);
    pthread_create(&th[THREADS], NULL, scrape, m);
    for (int i = 0; i <= THREADS; i++)
        pthread_join(th[i], NULL);
    char *t = wk_metrics_render(m, NULL);
    ASSERT_EQ(sample(t, "inboxd_messages_total{result=\"applied\"}"), THREADS * PER_THREAD);
    ASSERT_EQ(sample(t, "inboxd_handler_duration_seconds_count"), THREADS * PER_THREAD);
    ASSERT_EQ(sample(t, "inboxd_in_flight"), 0);
    /* 40 reasons over 32 slots: every dead-letter counted exactly once. */
    ASSERT_EQ(count_lines_with(t, "inboxd_dead_letters_total{"), WK_METRICS_MAX_REASONS + 1);
    double total = 0;
    for (const char *p = strstr(t, "inboxd_dead_letters_total{"); p;
         p = strstr(p + 1, "inboxd_dead_letters_total{"))
        total += atof(strchr(p, ' ') + 1);
    ASSERT_EQ(total, THREADS * PER_THREAD);
    free(t);
    wk_metrics_free(m);
}

static void test_session_metrics(void)
{
    wk_metrics_t *m = wk_metrics_new("x");
    char *t = wk_metrics_render(m, NULL);
    ASSERT_EQ(sample(t, "inboxd_sessions_active"), 0);
    ASSERT_EQ(sample(t, "inboxd_session_switches_total"), 0);
    ASSERT_EQ(sample(t, "inboxd_session_switch_seconds_count"), 0);
    ASSERT_CONTAINS(t, "# TYPE inboxd_sessions_active gauge\n");
    ASSERT_CONTAINS(t, "# TYPE inboxd_session_switches_total counter\n");
    ASSERT_CONTAINS(t, "# TYPE inboxd_session_switch_seconds histogram\n");
    free(t);
    wk_metrics_sessions_active_set(m, 7);
    wk_metrics_session_switches_add(m, 3);
    wk_metrics_session_switches_add(m, 2);
    wk_metrics_session_switch(m, 0);      /* a replacement held already */
    wk_metrics_session_switch(m, 0.0004); /* sub-millisecond */
    wk_metrics_session_switch(m, 0.002);
    wk_metrics_session_switch(m, 120); /* above every bound */
    t = wk_metrics_render(m, NULL);
    ASSERT_EQ(sample(t, "inboxd_sessions_active"), 7);
    ASSERT_EQ(sample(t, "inboxd_session_switches_total"), 5);
    ASSERT_EQ(sample(t, "inboxd_session_switch_seconds_bucket{le=\"0.0005\"}"), 2);
    ASSERT_EQ(sample(t, "inboxd_session_switch_seconds_bucket{le=\"0.0025\"}"), 3);
    ASSERT_EQ(sample(t, "inboxd_session_switch_seconds_bucket{le=\"60\"}"), 3);
    ASSERT_EQ(sample(t, "inboxd_session_switch_seconds_bucket{le=\"+Inf\"}"), 4);
    ASSERT_EQ(sample(t, "inboxd_session_switch_seconds_count"), 4);
    ASSERT_EQ(count_lines_with(t, "inboxd_session_switch_seconds_bucket{"),
              (long long)wk_metrics_switch_bucket_count + 1);
    double sum = sample(t, "inboxd_session_switch_seconds_sum");
    ASSERT_TRUE(sum > 120.0023 && sum < 120.0025);
    free(t);
    wk_metrics_sessions_active_set(m, -1);
    t = wk_metrics_render(m, NULL);
    ASSERT_EQ(sample(t, "inboxd_sessions_active"), 0);
    free(t);
    wk_metrics_free(m);
}

/* The metrics of a failure: dead letters by class, business-key duplicates, message age. */
static void test_after_failure_metrics(void)
{
    wk_metrics_t *m = wk_metrics_new("x");
    wk_metrics_dead_letter(m, "HandlerError", IB_CLASS_PERMANENT);
    wk_metrics_dead_letter(m, "RetryBudgetExhausted", IB_CLASS_TRANSIENT);
    wk_metrics_dead_letter(m, "HandlerError", IB_CLASS_TRANSIENT);
    wk_metrics_business_key_duplicate(m);
    wk_metrics_message(m, WK_OUT_DUPLICATE);
    wk_metrics_message_age(m, 0.05);
    wk_metrics_message_age(m, 120);
    wk_metrics_message_age(m, 1e9); /* above every bound; the sum is capped */
    wk_metrics_oldest_enqueued_set(m, ib_now_ms() - 90000);
    char *t = wk_metrics_render(m, NULL);
    ASSERT_EQ(sample(t, "inboxd_dead_letters_total{reason=\"HandlerError\",class=\"permanent\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_dead_letters_total{reason=\"HandlerError\",class=\"transient\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_dead_letters_total{reason=\"RetryBudgetExhausted\",class=\"transient\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_duplicates_total{by=\"business_key\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_duplicates_total{by=\"inbox\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_messages_total{result=\"duplicate\"}"), 2);
    ASSERT_EQ(sample(t, "inboxd_message_age_seconds_bucket{le=\"0.1\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_message_age_seconds_bucket{le=\"60\"}"), 1);
    ASSERT_EQ(sample(t, "inboxd_message_age_seconds_bucket{le=\"300\"}"), 2);
    ASSERT_EQ(sample(t, "inboxd_message_age_seconds_bucket{le=\"+Inf\"}"), 3);
    ASSERT_EQ(sample(t, "inboxd_message_age_seconds_count"), 3);
    double sum = sample(t, "inboxd_message_age_seconds_sum");
    ASSERT_TRUE(sum > 2592120 && sum < 2592121);
    double oldest = sample(t, "inboxd_oldest_unsettled_enqueued_seconds");
    ASSERT_TRUE(oldest >= 90 && oldest < 120);
    free(t);
    /* The stats line sums a reason's classes under one key. */
    char json[256];
    wk_metrics_reasons_json(m, json, sizeof json);
    ASSERT_STREQ(json, "{\"HandlerError\":2,\"RetryBudgetExhausted\":1}");
    wk_metrics_free(m);
}

int main(void)
{
    RUN(test_after_failure_metrics);
    RUN(test_initial_render);
    RUN(test_counts);
    RUN(test_histogram);
    RUN(test_session_metrics);
    RUN(test_http);
    RUN(test_dead_letter_reasons_bounded);
    RUN(test_reason_truncated_on_character_boundary);
    RUN(test_batch_sizes_and_start_time);
    RUN(test_oldest_in_flight_age);
    RUN(test_concurrent_updates);
    return ib_test_done();
}
