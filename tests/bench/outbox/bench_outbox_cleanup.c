/*
 * bench_outbox_cleanup - what outbox cleanup costs on a 1,000,000-row table.
 *
 *   bench_outbox_cleanup postgresql|sqlite [ROWS]
 *
 * 1. ROWS published rows inside the retention, plus 100 pending: one
 *    cleanup turn (nothing is due) and one relay claim of 100 rows, both
 *    timed: they must not grow with the table.
 * 2. The same rows made due: db_outbox_cleanup deletes them in batches of
 *    1,000 (one transaction each); prints rows/s, the mean and the longest
 *    batch (how long one batch holds its locks), and a claim timed between
 *    two cleanup turns.
 * 3. The claim on the emptied table, for the ratio.
 * Not a test: nothing here asserts a speed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db_outbox.h"
#include "db_testlib.h"
#include "ib_log.h"

#define TB "inboxd_outbox"

static tl_db_t T;

static void must(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "bench: %s failed\n", what);
        exit(1);
    }
}

static void fill(long rows, const char *published_at)
{
    char sql[1024];
    /* Chunks keep each statement's transaction moderate. */
    for (long done = 0; done < rows; done += 100000) {
        long n = rows - done < 100000 ? rows - done : 100000;
        snprintf(sql, sizeof(sql),
                 "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %ld) "
                 "INSERT INTO " TB " (entity, message_id, session_id, body, status, attempts, "
                 "published_at) SELECT 'shipments', 'm-%ld-' || i, NULL, "
                 "'{\"orderId\":\"' || i || '\",\"pad\":\"0123456789012345678901234567890123456789\"}', "
                 "'published', 1, %s FROM s",
                 n, done, published_at);
        must(tl_exec(&T, sql) == 0, "fill");
    }
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static double claim_ms(db_conn_t *dbc)
{
    db_outbox_row_t *rows;
    size_t n;
    ib_error_t err;
    double t0 = now_ms();
    must(db_outbox_claim(dbc, TB, 100, &rows, &n, &err) == IB_E_OK, "claim");
    double ms = now_ms() - t0;
    db_end(dbc, false, &err); /* give them back: the next claim sees the same rows */
    db_outbox_rows_free(rows, n);
    must(n == 100, "claim of 100 pending rows");
    return ms;
}

int main(int argc, char **argv)
{
    db_dialect_t d = tl_dialect_arg(argc, argv);
    long rows = argc > 2 ? atol(argv[2]) : 1000000;
    const char *recent = d == DB_DIALECT_SQLITE ? "strftime('%Y-%m-%d %H:%M:%f', 'now')"
                                                : "(now() AT TIME ZONE 'UTC')";
    const char *old = "'2020-01-01 00:00:00'";
    char sql[512];
    ib_error_t err;
    long long t0, total = 0, batches = 0, worst = 0;
    double claim_full, claim_mid = 0, claim_empty, noop_ms;

    ib_log_set_level(IB_LOG_ERROR);
    tl_db_create(&T, d, "obbench");
    db_conn_t *dbc = tl_conn(&T);
    must(db_outbox_migrate(dbc, TB, true, &err) == IB_E_OK, "migrate");
    t0 = ib_mono_ms();
    fill(rows, recent);
    for (int i = 0; i < 100; i++) {
        snprintf(sql, sizeof(sql),
                 "INSERT INTO " TB " (entity, message_id, body) VALUES ('shipments', 'p-%d', '{}')",
                 i);
        must(tl_exec(&T, sql) == 0, "pending rows");
    }
    if (d == DB_DIALECT_POSTGRESQL)
        must(tl_exec(&T, "VACUUM ANALYZE " TB) == 0, "analyze");
    printf("dialect %s: %ld published rows + 100 pending, filled in %.1f s\n", db_dialect_name(d),
           rows, (double)(ib_mono_ms() - t0) / 1000.0);

    /* 1. Nothing due. */
    claim_ms(dbc); /* the first statement of a connection pays for planning and caches */
    claim_full = claim_ms(dbc);
    noop_ms = now_ms();
    must(db_outbox_cleanup(dbc, TB, 3600, 1000, 0, &err) == 0, "no-op cleanup");
    noop_ms = now_ms() - noop_ms;

    /* 2. Everything due: batches of 1,000, timed one by one. */
    snprintf(sql, sizeof(sql), "UPDATE " TB " SET published_at = %s WHERE status = 'published'",
             old);
    must(tl_exec(&T, sql) == 0, "age rows");
    if (d == DB_DIALECT_POSTGRESQL)
        must(tl_exec(&T, "VACUUM ANALYZE " TB) == 0, "analyze");
    t0 = ib_mono_ms();
    for (;;) {
        long long b0 = ib_mono_ms(), n;
        n = db_outbox_cleanup(dbc, TB, 3600, 1000, 1, &err);
        must(n >= 0, "cleanup");
        if (ib_mono_ms() - b0 > worst)
            worst = ib_mono_ms() - b0;
        total += n;
        batches += n > 0;
        if (batches == rows / 2000 && claim_mid == 0)
            claim_mid = claim_ms(dbc);
        if (n < 1000)
            break;
    }
    double secs = (double)(ib_mono_ms() - t0) / 1000.0;
    claim_empty = claim_ms(dbc);

    printf("no-op cleanup turn (nothing due) on %ld rows: %.1f ms\n", rows, noop_ms);
    printf("cleanup of %lld rows: %.1f s, %.0f rows/s, %lld batches of 1000, mean %.1f ms, "
           "longest %lld ms\n",
           total, secs, secs > 0 ? (double)total / secs : 0.0, batches,
           batches ? secs * 1000.0 / (double)batches : 0.0, worst);
    printf("claim of 100 pending rows: %.1f ms with %ld rows in the table, %.1f ms mid-cleanup, "
           "%.1f ms on the emptied table (ratio full/empty %.2f)\n",
           claim_full, rows, claim_mid, claim_empty,
           claim_empty > 0 ? claim_full / claim_empty : 0.0);
    db_conn_free(dbc);
    tl_db_drop(&T);
    return total == rows ? 0 : 1;
}
