/*
 * bench_db_inbox - the cost of db_inbox_apply against the same transaction
 * sent as plain statements over the same ODBC driver, in the same run.
 *
 *   bench_db_inbox postgresql|sqlite [CLAIMS_PER_THREAD] [THREADS]
 *
 * Phase "plain": INSERT an inbox-shaped row + INSERT a business row + COMMIT
 * through db_exec/db_end (no duplicate handling): the database's and
 * driver's own ceiling for this transaction. Phase "inbox": db_inbox_apply
 * with the same business statement. Phase "batch": db_inbox_apply_batch, 16
 * messages per transaction. Prints claims/s for each and the ratios.
 * Not a test: nothing here asserts a speed.
 *
 * BENCH_PHASES=plain,inbox,batch picks phases (all by default);
 * BENCH_CONNSTR_EXTRA is appended to the connection string (e.g.
 * ";Protocol=7.4-2" for psqlODBC's default savepoints) - roundtrips.sh uses
 * both to count what each phase sends.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_testlib.h"
#include "ib_log.h"

static tl_db_t T;
static int per_thread = 2000;
static int phase_inbox; /* 0 plain, 1 inbox, 2 batch */
#define BATCH 16

static void *run(void *arg)
{
    int t = (int)(long)arg;
    db_conn_t *dbc = tl_conn(&T);
    char id[48], hash[65];
    ib_error_t err;

    if (phase_inbox == 2) {
        static __thread char ids[BATCH][48], hashes[BATCH][65];
        db_claim_t c[BATCH];
        db_param_t biz[BATCH][2];
        db_stmt_t s[BATCH];
        db_batch_item_t it[BATCH];
        for (int k = 0; k < per_thread; k += BATCH) {
            int m = per_thread - k < BATCH ? per_thread - k : BATCH;
            for (int j = 0; j < m; j++) {
                snprintf(ids[j], sizeof(ids[j]), "b-%d-%d", t, k + j);
                c[j] = tl_claim("bench", ids[j], NULL, ids[j], hashes[j]);
                biz[j][0] = DB_TEXT(ids[j]);
                biz[j][1] = DB_INT(k + j);
                s[j] = (db_stmt_t){"INSERT INTO biz (msg_id, n) VALUES (?, ?)", biz[j], 2};
                it[j] = (db_batch_item_t){&c[j], &s[j], 1, DB_FAILED, {0}};
            }
            if (db_inbox_apply_batch(dbc, it, (size_t)m, NULL) != (size_t)m) {
                fprintf(stderr, "batch: %s\n", it[0].err.text);
                exit(1);
            }
        }
        db_conn_free(dbc);
        return NULL;
    }
    for (int k = 0; k < per_thread; k++) {
        snprintf(id, sizeof(id), "%s-%d-%d", phase_inbox ? "i" : "p", t, k);
        db_claim_t c = tl_claim("bench", id, NULL, id, hash);
        db_param_t biz[2] = {DB_TEXT(id), DB_INT(k)};
        if (phase_inbox) {
            db_stmt_t s = {"INSERT INTO biz (msg_id, n) VALUES (?, ?)", biz, 2};
            if (db_inbox_apply(dbc, &c, &s, 1, &err) != DB_APPLIED) {
                fprintf(stderr, "apply: %s\n", err.text);
                exit(1);
            }
        } else {
            db_param_t row[4] = {DB_TEXT("bench"), DB_TEXT(id), DB_TEXT(hash), DB_INT(1)};
            if (db_exec(dbc,
                        "INSERT INTO plain_inbox (consumer, message_id, body_sha256, "
                        "delivery_count) VALUES (?, ?, ?, ?)",
                        row, 4, NULL, &err) != IB_E_OK ||
                db_exec(dbc, "INSERT INTO biz (msg_id, n) VALUES (?, ?)", biz, 2, NULL, &err) !=
                    IB_E_OK ||
                db_end(dbc, true, &err) != IB_E_OK) {
                fprintf(stderr, "plain: %s\n", err.text);
                exit(1);
            }
        }
    }
    db_conn_free(dbc);
    return NULL;
}

static double phase(int inbox, int threads)
{
    pthread_t th[64];
    long long t0 = ib_mono_ms();
    phase_inbox = inbox;
    for (long i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, run, (void *)i);
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    long long ms = ib_mono_ms() - t0;
    return ms ? per_thread * threads * 1000.0 / ms : 0;
}

int main(int argc, char **argv)
{
    db_dialect_t d = tl_dialect_arg(argc, argv);
    int threads = argc > 3 ? atoi(argv[3]) : 8;
    ib_error_t err;

    if (argc > 2)
        per_thread = atoi(argv[2]);
    if (threads < 1 || threads > 64 || per_thread < 1)
        return 2;
    ib_log_set_level(IB_LOG_WARN);
    tl_db_create(&T, d, "bench");
    db_conn_t *dbc = tl_conn(&T);
    if (db_migrate(dbc, true, &err) != IB_E_OK ||
        tl_exec(&T, "CREATE TABLE biz (msg_id varchar(64) NOT NULL, n integer NOT NULL)") ||
        tl_exec(&T, "CREATE TABLE plain_inbox (consumer varchar(200) NOT NULL, message_id "
                    "varchar(128) NOT NULL, body_sha256 char(64) NOT NULL, delivery_count "
                    "integer, PRIMARY KEY (consumer, message_id))")) {
        fprintf(stderr, "setup failed: %s\n", err.text);
        tl_db_drop(&T);
        return 1;
    }
    db_conn_free(dbc);
    const char *phases = getenv("BENCH_PHASES");
    const char *extra = getenv("BENCH_CONNSTR_EXTRA");
    if (extra && *extra)
        strncat(T.connstr, extra, sizeof(T.connstr) - strlen(T.connstr) - 1);
    if (!phases || !*phases)
        phases = "plain,inbox,batch";
    double plain = strstr(phases, "plain") ? phase(0, threads) : 0;
    double inbox = strstr(phases, "inbox") ? phase(1, threads) : 0;
    double batch = strstr(phases, "batch") ? phase(2, threads) : 0;
    printf("%s threads=%d claims=%d plain=%.0f/s inbox=%.0f/s batch%d=%.0f/s "
           "inbox/plain=%.2f batch/plain=%.2f\n",
           db_dialect_name(d), threads, per_thread * threads, plain, inbox, BATCH, batch,
           plain > 0 ? inbox / plain : 0, plain > 0 ? batch / plain : 0);
    tl_db_drop(&T);
    return 0;
}
