/*
 * Batches of messages in one inbox transaction against a live database
 * (argv[1]: postgresql|sqlite): the claim statement, route statements as
 * parameter arrays, duplicates and conflicts decided inside the batch, and
 * the fallback to one transaction per message when anything fails - where
 * every message must end exactly as it would alone. Every check reads the
 * rows back. Ends with 4 threads applying overlapping batches at once.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db_testlib.h"
#include "ib_test.h"

static tl_db_t T;
static db_conn_t *dbc;

#define COUNT(sql) tl_scalar(&T, sql)
#define MAXB 1300

/* One message of a test batch, with the storage its claim and statements point to. */
typedef struct msg {
    char id[40], idem[40], body[64], hash[65];
    db_claim_t claim;
    db_param_t p[2][3];
    db_stmt_t s[2];
} msg_t;

static msg_t M[MAXB];
static db_batch_item_t IT[MAXB];

static const char *ORDER_SQL = "INSERT INTO orders (id, qty, note) VALUES (?, ?, ?)";
static const char *AUDIT_SQL = "INSERT INTO audit (id, what) VALUES (?, ?)";

/* Message i: an order (qty, note) and, when audit, a second statement. */
static void msg_set(int i, const char *id, const char *idem, const char *body, long long qty,
                    const char *note, bool audit)
{
    msg_t *m = &M[i];
    snprintf(m->id, sizeof(m->id), "%s", id);
    snprintf(m->idem, sizeof(m->idem), "%s", idem ? idem : "");
    snprintf(m->body, sizeof(m->body), "%s", body);
    m->claim = tl_claim("shop", m->id, idem ? m->idem : NULL, m->body, m->hash);
    m->p[0][0] = DB_TEXT(m->id);
    m->p[0][1] = DB_INT(qty);
    m->p[0][2] = note ? DB_TEXT(note) : DB_NULL();
    m->s[0] = (db_stmt_t){ORDER_SQL, m->p[0], 3};
    m->p[1][0] = DB_TEXT(m->id);
    m->p[1][1] = DB_TEXT("created");
    m->s[1] = (db_stmt_t){AUDIT_SQL, m->p[1], 2};
    IT[i] = (db_batch_item_t){&m->claim, m->s, audit ? 2 : 1, DB_FAILED, {0}};
}

static db_outcome_t alone(db_conn_t *c, int i)
{
    ib_error_t err;
    return db_inbox_apply(c, IT[i].claim, IT[i].stmts, IT[i].nstmts, &err);
}

/* All good: one transaction, no fallback; two routes, NULLs mixed into typed columns. */
static void test_all_applied(void)
{
    char id[32], body[32];
    ib_error_t fell;
    for (int i = 0; i < 40; i++) {
        snprintf(id, sizeof(id), "g%d", i);
        snprintf(body, sizeof(body), "{\"g\":%d}", i);
        msg_set(i, id, i % 3 ? NULL : id, body, i + 1, i % 2 ? NULL : "n", i % 4 == 0);
    }
    size_t got = db_inbox_apply_batch(dbc, IT, 40, &fell);
    ASSERT_EQ(got, 40);
    ASSERT_EQ(fell.code, IB_E_OK);
    for (int i = 0; i < 40; i++)
        ASSERT_EQ(IT[i].outcome, DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE consumer = 'shop' AND message_id LIKE 'g%' "
                    "AND status = 'processed'"),
              40);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id LIKE 'g%'"), 40);
    ASSERT_EQ(COUNT("SELECT SUM(qty) FROM orders WHERE id LIKE 'g%'"), 40 * 41 / 2);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id LIKE 'g%' AND note IS NULL"), 20);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM audit WHERE id LIKE 'g%'"), 10);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id LIKE 'g%' AND "
                    "idempotency_key = message_id"),
              14);
}

/* Keys already taken, and keys repeated inside the batch: decided without a fallback. */
static void test_duplicates_in_batch(void)
{
    ib_error_t fell;
    msg_set(0, "d1", NULL, "{\"d\":1}", 1, NULL, false);
    ASSERT_EQ(alone(dbc, 0), DB_APPLIED);
    msg_set(0, "d1", NULL, "{\"d\":1}", 1, NULL, false);    /* duplicate of a committed row */
    msg_set(1, "d1", NULL, "{\"d\":9}", 1, NULL, false);    /* conflict with it */
    msg_set(2, "d2", NULL, "{\"d\":2}", 1, NULL, false);    /* applied */
    msg_set(3, "d2", NULL, "{\"d\":2}", 1, NULL, false);    /* repeat of item 2: duplicate */
    msg_set(4, "d3", "key-d", "{\"d\":3}", 1, NULL, false); /* applied */
    msg_set(5, "d4", "key-d", "{\"d\":4}", 1, NULL, false); /* same key, other body */
    msg_set(6, "d5", "key-d", "{\"d\":3}", 1, NULL, false); /* same key, same body */
    msg_set(7, "d6", NULL, "{\"d\":6}", 1, NULL, true);     /* applied */
    ASSERT_EQ(db_inbox_apply_batch(dbc, IT, 8, &fell), 3);
    ASSERT_EQ(fell.code, IB_E_OK);
    db_outcome_t want[8] = {DB_DUPLICATE, DB_CONFLICT, DB_APPLIED,   DB_DUPLICATE,
                            DB_APPLIED,   DB_CONFLICT, DB_DUPLICATE, DB_APPLIED};
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(IT[i].outcome, want[i]);
    ASSERT_EQ(IT[1].err.code, IB_E_CONFLICT);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id LIKE 'd%'"), 4);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id LIKE 'd%'"), 4);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id IN ('d4', 'd5')"), 0);
}

/*
 * A duplicate, a conflict, a permanent failure (CHECK) and a transient one
 * (a missing table, configured transient) among good messages: the batch
 * falls back and each ends exactly as it would alone.
 */
static void test_mixed_failures_as_alone(void)
{
    db_conn_t *c2 = tl_conn_transient(&T, T.dialect == DB_DIALECT_SQLITE ? "[1]" : "[\"42P01\"]");
    ib_error_t fell;

    msg_set(0, "x1", NULL, "{\"x\":1}", 1, NULL, false);
    ASSERT_EQ(alone(c2, 0), DB_APPLIED);
    msg_set(0, "x1", NULL, "{\"x\":1}", 1, NULL, false);  /* duplicate */
    msg_set(1, "x2", NULL, "{\"x\":2}", 2, NULL, true);   /* good */
    msg_set(2, "x1", NULL, "{\"x\":7}", 1, NULL, false);  /* conflict */
    msg_set(3, "x4", NULL, "{\"x\":4}", -1, NULL, false); /* CHECK: permanent */
    msg_set(4, "x5", NULL, "{\"x\":5}", 5, NULL, false);  /* good */
    msg_set(5, "x6", NULL, "{\"x\":6}", 6, NULL, false);  /* missing table: transient here */
    msg_set(6, "x7", NULL, "{\"x\":7}", 7, "n", true);    /* good */
    M[5].s[0].sql = "INSERT INTO orders_later (id, qty, note) VALUES (?, ?, ?)";
    ASSERT_EQ(db_inbox_apply_batch(c2, IT, 7, &fell), 3);
    ASSERT_NE(fell.code, IB_E_OK);
    ASSERT_EQ(IT[0].outcome, DB_DUPLICATE);
    ASSERT_EQ(IT[1].outcome, DB_APPLIED);
    ASSERT_EQ(IT[2].outcome, DB_CONFLICT);
    ASSERT_EQ(IT[3].outcome, DB_FAILED);
    ASSERT_EQ(IT[3].err.cls, IB_CLASS_PERMANENT);
    ASSERT_EQ(IT[4].outcome, DB_APPLIED);
    ASSERT_EQ(IT[5].outcome, DB_FAILED);
    ASSERT_EQ(IT[5].err.cls, IB_CLASS_TRANSIENT);
    ASSERT_EQ(IT[6].outcome, DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id IN ('x1', 'x2', 'x5', 'x7')"), 4);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id IN ('x4', 'x6')"), 0);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM audit WHERE id IN ('x2', 'x7')"), 2);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id LIKE 'x%'"), 4);
    ASSERT_EQ(COUNT("SELECT qty FROM orders WHERE id = 'x1'"), 1);
    db_conn_free(c2);
}

/*
 * Order keys (sessions): a permanent failure in the middle of key A's run
 * holds A's later items (not run, IB_E_AGAIN) while B applies; a conflict
 * ahead of a later item of its key keeps that one out too.
 */
static void test_order_keys(void)
{
    const char *keys[6] = {"A", "A", "A", "B", "A", "C"};
    ib_error_t fell;
    msg_set(0, "k1", NULL, "{\"k\":1}", 1, NULL, false);
    msg_set(1, "k2", NULL, "{\"k\":2}", -1, NULL, false); /* CHECK: permanent */
    msg_set(2, "k3", NULL, "{\"k\":3}", 3, NULL, true);
    msg_set(3, "k4", NULL, "{\"k\":4}", 4, NULL, false);
    msg_set(4, "k5", NULL, "{\"k\":5}", 5, NULL, false);
    msg_set(5, "k6", NULL, "{\"k\":6}", 6, NULL, true);
    ASSERT_EQ(db_inbox_apply_batch_ordered(dbc, IT, keys, 6, &fell), 3);
    ASSERT_NE(fell.code, IB_E_OK);
    ASSERT_EQ(IT[0].outcome, DB_APPLIED);
    ASSERT_EQ(IT[1].outcome, DB_FAILED);
    ASSERT_EQ(IT[1].err.cls, IB_CLASS_PERMANENT);
    ASSERT_EQ(IT[2].outcome, DB_FAILED);
    ASSERT_EQ(IT[2].err.code, IB_E_AGAIN);
    ASSERT_EQ(IT[3].outcome, DB_APPLIED);
    ASSERT_EQ(IT[4].err.code, IB_E_AGAIN);
    ASSERT_EQ(IT[5].outcome, DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id IN ('k1', 'k4', 'k6')"), 3);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id IN ('k2', 'k3', 'k5')"), 0);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id IN ('k2', 'k3', 'k5')"), 0);
    /* The held ones again, after the failed one was dealt with: all of A in order. */
    msg_set(0, "k3", NULL, "{\"k\":3}", 3, NULL, true);
    msg_set(1, "k5", NULL, "{\"k\":5}", 5, NULL, false);
    ASSERT_EQ(db_inbox_apply_batch_ordered(dbc, IT, keys, 2, &fell), 2);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id IN ('k3', 'k5')"), 2);
    /* A conflict of key A ahead of a later A: that one is held, B applies. */
    msg_set(0, "k1", NULL, "{\"k\":9}", 1, NULL, false); /* conflict with k1 */
    msg_set(1, "k7", NULL, "{\"k\":7}", 7, NULL, false);
    msg_set(2, "k8", NULL, "{\"k\":8}", 8, NULL, false);
    const char *keys2[3] = {"A", "A", "B"};
    ASSERT_EQ(db_inbox_apply_batch_ordered(dbc, IT, keys2, 3, &fell), 1);
    ASSERT_EQ(IT[0].outcome, DB_CONFLICT);
    ASSERT_EQ(IT[1].err.code, IB_E_AGAIN);
    ASSERT_EQ(IT[2].outcome, DB_APPLIED);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id IN ('k7')"), 0);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id IN ('k8')"), 1);
}

/* More messages than one claim statement carries: several claims, one transaction. */
static void test_large_batch(void)
{
    char id[32], body[32];
    ib_error_t fell;
    int n = 1200;
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof(id), "L%d", i);
        snprintf(body, sizeof(body), "{\"L\":%d}", i);
        msg_set(i, id, NULL, body, 1, "x", false);
    }
    msg_set(n, "L5", NULL, "{\"L\":5}", 1, "x", false); /* repeats a key of the first claim */
    size_t got = db_inbox_apply_batch(dbc, IT, (size_t)n + 1, &fell);
    if (fell.code != IB_E_OK)
        fprintf(stderr, "batch fell back: %s\n", fell.text);
    ASSERT_EQ(got, (size_t)n);
    ASSERT_EQ(fell.code, IB_E_OK);
    ASSERT_EQ(IT[n].outcome, DB_DUPLICATE);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id LIKE 'L%'"), n);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE message_id LIKE 'L%'"), n);
}

/* An invalid claim is decided before the transaction; the others go on. */
static void test_invalid_claim(void)
{
    ib_error_t fell;
    msg_set(0, "v1", NULL, "{}", 1, NULL, false);
    msg_set(1, "v2", NULL, "{}", 1, NULL, false);
    M[1].claim.body_sha256 = "nothex";
    msg_set(2, "v3", NULL, "{}", 1, NULL, false);
    ASSERT_EQ(db_inbox_apply_batch(dbc, IT, 3, &fell), 2);
    ASSERT_EQ(fell.code, IB_E_OK);
    ASSERT_EQ(IT[1].outcome, DB_FAILED);
    ASSERT_EQ(IT[1].err.code, IB_E_INVAL);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id IN ('v1', 'v3')"), 2);
}

/* ---- concurrent overlapping batches --------------------------------------- */

#define THREADS 4
#define ROUNDS 25
#define PER 20
#define IDS 200

static int applied_n[IDS], dup_n[IDS];
static long failures;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *batcher(void *arg)
{
    int t = (int)(long)arg;
    db_conn_t *c = tl_conn(&T);
    static __thread msg_t m[PER];
    db_batch_item_t it[PER];
    int id[PER];

    for (int r = 0; r < ROUNDS; r++) {
        int pending = PER;
        for (int k = 0; k < PER; k++) {
            id[k] = (r * 7 + t * 13 + k * 3) % IDS;
            snprintf(m[k].id, sizeof(m[k].id), "c%03d", id[k]);
            snprintf(m[k].body, sizeof(m[k].body), "{\"c\":%d}", id[k]);
            m[k].claim = tl_claim("conc", m[k].id, NULL, m[k].body, m[k].hash);
            m[k].p[0][0] = DB_TEXT(m[k].id);
            m[k].p[0][1] = DB_INT(t + 1);
            m[k].p[0][2] = DB_NULL();
            m[k].s[0] = (db_stmt_t){ORDER_SQL, m[k].p[0], 3};
            it[k] = (db_batch_item_t){&m[k].claim, m[k].s, 1, DB_FAILED, {0}};
        }
        /* Transient outcomes (deadlocks, busy) are retried, as the worker does. */
        for (int attempt = 0; pending && attempt < 200; attempt++) {
            db_batch_item_t again[PER];
            int map[PER], n = 0;
            for (int k = 0; k < PER; k++)
                if (it[k].outcome == DB_FAILED &&
                    (attempt == 0 || it[k].err.cls == IB_CLASS_TRANSIENT)) {
                    map[n] = k;
                    again[n++] = it[k];
                }
            if (!n)
                break;
            db_inbox_apply_batch(c, again, (size_t)n, NULL);
            pending = 0;
            for (int q = 0; q < n; q++) {
                it[map[q]] = again[q];
                pending += again[q].outcome == DB_FAILED && again[q].err.cls == IB_CLASS_TRANSIENT;
            }
            if (pending) {
                struct timespec ts = {0, (1 + attempt % 10) * 1000000L};
                nanosleep(&ts, NULL);
            }
        }
        pthread_mutex_lock(&mu);
        for (int k = 0; k < PER; k++) {
            if (it[k].outcome == DB_APPLIED)
                applied_n[id[k]]++;
            else if (it[k].outcome == DB_DUPLICATE)
                dup_n[id[k]]++;
            else {
                failures++;
                fprintf(stderr, "t%d %s: %s %s\n", t, m[k].id, db_outcome_name(it[k].outcome),
                        it[k].err.text);
            }
        }
        pthread_mutex_unlock(&mu);
    }
    db_conn_free(c);
    return NULL;
}

static void test_concurrent_batches(void)
{
    pthread_t th[THREADS];
    int used = 0;
    for (long t = 0; t < THREADS; t++)
        ASSERT_EQ(pthread_create(&th[t], NULL, batcher, (void *)t), 0);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    ASSERT_EQ(failures, 0);
    for (int i = 0; i < IDS; i++) {
        if (applied_n[i] + dup_n[i] == 0)
            continue;
        used++;
        ASSERT_EQ(applied_n[i], 1);
    }
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM orders WHERE id LIKE 'c%'"), used);
    ASSERT_EQ(COUNT("SELECT COUNT(*) FROM inbox WHERE consumer = 'conc'"), used);
}

int main(int argc, char **argv)
{
    db_dialect_t d = tl_dialect_arg(argc, argv);
    ib_error_t err;
    bool lite = d == DB_DIALECT_SQLITE;

    tl_db_create(&T, d, "batch");
    dbc = tl_conn(&T);
    if (db_migrate(dbc, true, &err) != IB_E_OK) {
        fprintf(stderr, "migrate: %s\n", err.text);
        tl_db_drop(&T);
        return 1;
    }
    if (tl_exec(&T, lite ? "CREATE TABLE orders (id TEXT NOT NULL, qty INTEGER NOT NULL CHECK "
                           "(qty > 0), note TEXT)"
                         : "CREATE TABLE orders (id varchar(64) NOT NULL, qty integer NOT NULL "
                           "CHECK (qty > 0), note text)") ||
        tl_exec(&T, "CREATE TABLE audit (id varchar(64) NOT NULL, what varchar(20) NOT NULL)") ||
        tl_exec(&T, "CREATE TABLE audit2 (id varchar(64))")) {
        tl_db_drop(&T);
        return 1;
    }
    RUN(test_all_applied);
    RUN(test_duplicates_in_batch);
    RUN(test_mixed_failures_as_alone);
    RUN(test_order_keys);
    RUN(test_large_batch);
    RUN(test_invalid_claim);
    RUN(test_concurrent_batches);
    db_conn_free(dbc);
    tl_db_drop(&T);
    return ib_test_done();
}
