/*
 * 8 threads x 500 claims of overlapping message ids on one database
 * (argv[1]: postgresql|sqlite). Every id is claimed by 4 threads, two of
 * them at about the same moment. Transient failures are retried as the
 * worker does. Afterwards: exactly one applied per id, the rest duplicates,
 * one business row and one inbox row per id.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "db_testlib.h"
#include "ib_log.h"
#include "ib_test.h"

#define THREADS 8
#define CLAIMS 500
#define IDS 1000
#define RETRIES 200

static tl_db_t T;
static int applied[IDS], duplicate[IDS];
static long transient_retries, failures;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg)
{
    int t = (int)(long)arg;
    db_conn_t *dbc = tl_conn(&T);

    for (int k = 0; k < CLAIMS; k++) {
        int id = (t * (IDS / THREADS) + k) % IDS;
        char msg_id[32], body[64], hash[65];
        db_outcome_t o = DB_FAILED;
        ib_error_t err;

        snprintf(msg_id, sizeof(msg_id), "msg-%04d", id);
        snprintf(body, sizeof(body), "{\"order\":%d}", id);
        db_claim_t c = tl_claim("orders-consumer", msg_id, NULL, body, hash);
        db_param_t p[2] = {DB_TEXT(msg_id), DB_INT(t)};
        db_stmt_t s = {"INSERT INTO biz (msg_id, thread) VALUES (?, ?)", p, 2};
        for (int attempt = 0; attempt < RETRIES; attempt++) {
            c.delivery_count = attempt + 1;
            o = db_inbox_apply(dbc, &c, &s, 1, &err);
            if (o != DB_FAILED || err.cls != IB_CLASS_TRANSIENT)
                break;
            pthread_mutex_lock(&mu);
            transient_retries++;
            pthread_mutex_unlock(&mu);
            struct timespec ts = {0, (1 + attempt % 10) * 1000000L};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&mu);
        if (o == DB_APPLIED)
            applied[id]++;
        else if (o == DB_DUPLICATE)
            duplicate[id]++;
        else {
            failures++;
            fprintf(stderr, "%s: %s %s\n", msg_id, db_outcome_name(o), err.text);
        }
        pthread_mutex_unlock(&mu);
    }
    db_conn_free(dbc);
    return NULL;
}

static void test_overlapping_claims(void)
{
    pthread_t th[THREADS];
    long long t0 = ib_mono_ms();
    int bad_applied = 0, bad_dup = 0;

    for (long t = 0; t < THREADS; t++)
        ASSERT_EQ(pthread_create(&th[t], NULL, worker, (void *)t), 0);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    long long ms = ib_mono_ms() - t0;
    fprintf(stderr, "%s: %d claims in %lld ms (%.0f claims/s), %ld transient retries\n",
            db_dialect_name(T.dialect), THREADS * CLAIMS, ms,
            ms ? THREADS * CLAIMS * 1000.0 / ms : 0.0, transient_retries);

    ASSERT_EQ(failures, 0);
    for (int id = 0; id < IDS; id++) {
        if (applied[id] != 1)
            bad_applied++;
        if (duplicate[id] != THREADS * CLAIMS / IDS - 1)
            bad_dup++;
    }
    ASSERT_EQ(bad_applied, 0);
    ASSERT_EQ(bad_dup, 0);
    ASSERT_EQ(tl_scalar(&T, "SELECT COUNT(*) FROM biz"), IDS);
    ASSERT_EQ(tl_scalar(&T, "SELECT COUNT(DISTINCT msg_id) FROM biz"), IDS);
    ASSERT_EQ(tl_scalar(&T, "SELECT COUNT(*) FROM inbox WHERE consumer = 'orders-consumer' AND "
                            "status = 'processed'"),
              IDS);
}

int main(int argc, char **argv)
{
    db_dialect_t d = tl_dialect_arg(argc, argv);
    ib_error_t err;

    ib_log_set_level(IB_LOG_WARN);
    tl_db_create(&T, d, "conc");
    db_conn_t *dbc = tl_conn(&T);
    if (db_migrate(dbc, true, &err) != IB_E_OK ||
        /* No key on biz: a second apply of one id would show as a second row. */
        tl_exec(&T, "CREATE TABLE biz (msg_id varchar(32) NOT NULL, thread integer NOT NULL)")) {
        fprintf(stderr, "setup: %s\n", err.text);
        tl_db_drop(&T);
        return 1;
    }
    db_conn_free(dbc);
    RUN(test_overlapping_claims);
    tl_db_drop(&T);
    return ib_test_done();
}
