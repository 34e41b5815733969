/*
 * test_tds_wire.c - inboxd's real db code through the FreeTDS ODBC driver
 * (tdsodbc) against the TDS recorder (tds_recorder.c): what SQL Server
 * would receive, checked at the wire.
 *
 * Asserted from the recorder's log: every statement inboxd sends runs in
 * the transaction the driver opened (the request's transaction descriptor
 * is the open one, @@TRANCOUNT 1), a message's writes lie in one
 * transaction ending in exactly one COMMIT request, a route that ends the
 * transaction itself makes the commit refuse, long texts are declared
 * nvarchar(max) and short ones nvarchar(4000) whatever their length,
 * timestamps datetime2, the batch claim's rows come in key order, the
 * sweep deletes at most 4,000 rows a statement, and N'é€漢😀' returned by
 * the server arrives as the same UTF-8 bytes.
 *
 * What the recorder cannot know, this test does not claim: it runs no SQL
 * (the canned rows are what a table holding them would return), does not
 * check T-SQL syntax, lock behaviour, plan reuse or collations, and sends
 * one DONE per request. Migrate runs its statements and the recorder
 * answers as for tables that exist. The driver's own login statement (set
 * textsize) precedes the first transaction and is not inboxd's.
 *
 * thread: main; the recorder runs its own threads. Takes well under a second.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "db_inbox.h"
#include "db_effect.h"
#include "db_outbox.h"
#include "ib_test.h"
#include "tds_recorder.h"

#ifndef TDSODBC_PATH
#define TDSODBC_PATH "/usr/lib/x86_64-linux-gnu/odbc/libtdsodbc.so"
#endif

static tdsrec_t *rec;
static db_conn_t *dbc;
static const char *const UNICODE_TEXT = "\xc3\xa9\xe2\x82\xac\xe6\xbc\xa2\xf0\x9f\x98\x80";

static db_conn_t *connect_freetds(void)
{
    char cs[512];
    ib_error_t err;
    snprintf(cs, sizeof(cs),
             "Driver=%s;Server=127.0.0.1;Port=%d;TDS_Version=7.4;Encryption=off;"
             "Database=inboxd;UID=inboxd;PWD=not-a-secret",
             TDSODBC_PATH, tdsrec_port(rec));
    db_options_t opt = {.connection_string = cs, .inbox_table = "dbo.inbox"};
    db_conn_t *c = db_conn_new(&opt, &err);
    if (!c)
        fprintf(stderr, "connect: %s\n", err.text);
    return c;
}

/* The events from index from on; *n their number. */
static tdsrec_event_t *events_since(size_t from, size_t *n, size_t *total)
{
    size_t all;
    tdsrec_event_t *ev = tdsrec_events(rec, &all);
    *total = all;
    *n = all > from ? all - from : 0;
    return ev;
}

static size_t mark(void)
{
    size_t n = 0;
    tdsrec_event_t *ev = tdsrec_events(rec, &n);
    tdsrec_events_free(ev, n);
    return n;
}

/*
 * Every statement of ev[from..] ran inside a transaction the server had
 * open, with the descriptor of that transaction, and the span holds
 * exactly `commits` COMMIT requests. Prints the span on failure.
 */
static bool in_transactions(const tdsrec_event_t *ev, size_t from, size_t to, int commits,
                            unsigned long long *desc)
{
    int seen = 0;
    bool good = true;
    *desc = 0;
    for (size_t i = from; i < to; i++) {
        const tdsrec_event_t *e = &ev[i];
        if (e->kind == TDSREC_TM) {
            seen += e->tm == 7;
            continue;
        }
        if (e->trancount != 1 || e->open == 0 || e->hdr != e->open) {
            fprintf(stderr, "outside a transaction (trancount %d, header %llx, open %llx): %s\n",
                    e->trancount, e->hdr, e->open, e->sql ? e->sql : "");
            good = false;
        }
        if (!*desc)
            *desc = e->open;
    }
    if (seen != commits) {
        fprintf(stderr, "%d COMMIT requests, expected %d\n", seen, commits);
        good = false;
    }
    return good;
}

/* The first event at or after from whose SQL contains s; NULL when none. */
static const tdsrec_event_t *find(const tdsrec_event_t *ev, size_t from, size_t to, const char *s)
{
    for (size_t i = from; i < to; i++)
        if (ev[i].sql && strstr(ev[i].sql, s))
            return &ev[i];
    return NULL;
}

/* Every NVARCHAR declared in decl is NVARCHAR(4000) or NVARCHAR(MAX). */
static bool sizes_fixed(const char *decl)
{
    for (const char *p = decl; p && (p = strcasestr(p, "nvarchar(")) != NULL; p += 9)
        if (strncasecmp(p + 9, "4000)", 5) != 0 && strncasecmp(p + 9, "max)", 4) != 0) {
            fprintf(stderr, "a parameter size that follows the value: %s\n", decl);
            return false;
        }
    return true;
}

static void test_login_and_session(void)
{
    size_t n, total;
    dbc = connect_freetds();
    ASSERT_TRUE(dbc != NULL);
    ASSERT_EQ(db_conn_dialect(dbc), DB_DIALECT_MSSQL);
    tdsrec_event_t *ev = events_since(0, &n, &total);
    size_t first_tm = total;
    for (size_t i = 0; i < total && first_tm == total; i++)
        if (ev[i].kind == TDSREC_TM)
            first_tm = i;
    /* SQL_AUTOCOMMIT_OFF: a BEGIN request, no IMPLICIT_TRANSACTIONS. */
    ASSERT_TRUE(first_tm < total);
    ASSERT_EQ(ev[first_tm].tm, 5);
    const tdsrec_event_t *setup = find(ev, first_tm, total, "SET XACT_ABORT ON; SET NOCOUNT OFF");
    ASSERT_TRUE(setup != NULL);
    ASSERT_TRUE(setup->hdr == setup->open && setup->open != 0);
    ASSERT_TRUE(ev[total - 1].kind == TDSREC_TM && ev[total - 1].tm == 7 && ev[total - 1].tm_cont);
    for (size_t i = 0; i < total; i++)
        ASSERT_TRUE(!ev[i].sql || !strcasestr(ev[i].sql, "IMPLICIT_TRANSACTIONS"));
    tdsrec_events_free(ev, total);
}

static db_claim_t claim_of(const char *id, const char *hash)
{
    return (db_claim_t){.consumer = "orders",
                        .message_id = id,
                        .idempotency_key = NULL,
                        .body_sha256 = hash,
                        .entity = "q",
                        .sequence_number = 7,
                        .delivery_count = 1,
                        .enqueued_at_ms = 1764806400123LL,
                        .received_at_ms = 1764806400456LL};
}

static const char HASH[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/* One message: the inbox row and the route's statement in one transaction, one COMMIT. */
static void test_one_message(void)
{
    size_t from = mark(), n, total;
    static char longtext[5001];
    memset(longtext, 'x', 5000);
    db_param_t p[3] = {DB_TEXT("short"), DB_TEXT(longtext), DB_INT(42)};
    db_stmt_t st = {"INSERT INTO dbo.orders (note, doc, qty) VALUES (?, ?, ?)", p, 3};
    db_claim_t c = claim_of("m-1", HASH);
    ib_error_t err;
    db_outcome_t out = db_inbox_apply(dbc, &c, &st, 1, &err);
    if (out != DB_APPLIED)
        fprintf(stderr, "apply: %s\n", err.text);
    ASSERT_EQ(out, DB_APPLIED);
    tdsrec_event_t *ev = events_since(from, &n, &total);
    unsigned long long desc;
    ASSERT_TRUE(in_transactions(ev, from, total, 1, &desc));
    const tdsrec_event_t *ins = find(ev, from, total, "INSERT INTO dbo.inbox");
    const tdsrec_event_t *route = find(ev, from, total, "INSERT INTO dbo.orders");
    const tdsrec_event_t *check = find(ev, from, total, "@@TRANCOUNT");
    ASSERT_TRUE(ins && route && check);
    /* One transaction: the same descriptor from the inbox row to the commit. */
    ASSERT_TRUE(ins->open == desc && route->open == desc && check->open == desc);
    ASSERT_TRUE(ev[total - 1].kind == TDSREC_TM && ev[total - 1].tm == 7);
    ASSERT_TRUE(ins < route && route < check);
    ASSERT_TRUE(sizes_fixed(ins->decl) && sizes_fixed(route->decl));
    ASSERT_STREQ(route->types, "nvarchar(4000),nvarchar(max),int64");
    ASSERT_CONTAINS(route->decl, "NVARCHAR(MAX)");
    ASSERT_NOT_CONTAINS(route->decl, "NTEXT");
    /* enqueued_at and received_at: datetime2 of 7 digits, never datetime. */
    ASSERT_CONTAINS(ins->types, "datetime2(7)");
    ASSERT_NOT_CONTAINS(ins->types, "datetime,");
    ASSERT_STREQ(route->values[1], longtext);
    tdsrec_events_free(ev, total);
}

/* A route that commits on its own: the commit is refused and nothing is reported applied. */
static void test_commit_refused(void)
{
    size_t from = mark(), n, total;
    db_stmt_t st[2] = {{"COMMIT TRANSACTION", NULL, 0}, {"UPDATE dbo.orders SET qty = 1", NULL, 0}};
    db_claim_t c = claim_of("m-2", HASH);
    ib_error_t err;
    ASSERT_EQ(db_inbox_apply(dbc, &c, st, 2, &err), DB_FAILED);
    ASSERT_CONTAINS(err.text, "commit refused: 0 transactions open, expected 1");
    tdsrec_event_t *ev = events_since(from, &n, &total);
    for (size_t i = from; i < total; i++)
        ASSERT_TRUE(!(ev[i].kind == TDSREC_TM && ev[i].tm == 7));
    tdsrec_events_free(ev, total);
    /* The connection is usable again afterwards, in a transaction of its own. */
    from = mark();
    db_claim_t c3 = claim_of("m-3", HASH);
    ASSERT_EQ(db_inbox_apply(dbc, &c3, NULL, 0, &err), DB_APPLIED);
    ev = events_since(from, &n, &total);
    unsigned long long desc;
    /* On a new session (the old one's transaction state was no longer the driver's). */
    const tdsrec_event_t *ins = find(ev, from, total, "INSERT INTO dbo.inbox");
    ASSERT_TRUE(ins != NULL);
    ASSERT_NE(ins->conn, ev[from].conn);
    ASSERT_TRUE(in_transactions(ev, (size_t)(ins - ev), total, 1, &desc));
    tdsrec_events_free(ev, total);
}

/* A batch: one claim statement, its rows in key order, one transaction, one COMMIT. */
static void test_batch(void)
{
    size_t from = mark(), n, total;
    const char *ids[3] = {"m-c", "m-a", "m-b"};
    db_claim_t c[3];
    db_batch_item_t items[3];
    db_param_t p[3][1];
    db_stmt_t st[3];
    ib_error_t fb;
    for (int i = 0; i < 3; i++) {
        c[i] = claim_of(ids[i], HASH);
        p[i][0] = DB_TEXT(ids[i]);
        st[i] = (db_stmt_t){"INSERT INTO dbo.orders (note) VALUES (?)", p[i], 1};
        items[i] = (db_batch_item_t){.claim = &c[i], .stmts = &st[i], .nstmts = 1};
    }
    db_inbox_apply_batch(dbc, items, 3, &fb);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(items[i].outcome, DB_APPLIED);
    tdsrec_event_t *ev = events_since(from, &n, &total);
    unsigned long long desc;
    ASSERT_TRUE(in_transactions(ev, from, total, 1, &desc));
    const tdsrec_event_t *claim = find(ev, from, total, "OUTPUT inserted.consumer");
    ASSERT_TRUE(claim != NULL);
    ASSERT_TRUE(sizes_fixed(claim->decl));
    /* A NULL (the idempotency key, the error columns) is declared like any text. */
    ASSERT_NOT_CONTAINS(claim->decl, "VARCHAR(1)");
    ASSERT_CONTAINS(claim->sql, "x.message_id = v.message_id) AND NOT EXISTS");
    ASSERT_EQ(claim->nvalues, 36);
    /* Rows in key order, whatever the arrival order. */
    ASSERT_STREQ(claim->values[1], "m-a");
    ASSERT_STREQ(claim->values[13], "m-b");
    ASSERT_STREQ(claim->values[25], "m-c");
    tdsrec_events_free(ev, total);
}

/*
 * The relay: claim (rows as a table holding them returns them, with
 * N'é€漢😀' in text columns), the session head, mark, commit. The text
 * arrives as the same UTF-8 bytes.
 */
static void test_outbox_and_charset(void)
{
    const char *cells[] = {"5",          "queue-1", UNICODE_TEXT, "s-1",
                           UNICODE_TEXT, NULL,      NULL,         "{\"k\":\"\xe2\x82\xac\"}",
                           UNICODE_TEXT, "0",
                           "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"};
    const char *head[] = {"s-1", "5"};
    size_t from = mark(), n, total, nrows = 0;
    db_outbox_row_t *rows = NULL;
    ib_error_t err;
    tdsrec_rule(rec, "FROM dbo.ob o WITH (UPDLOCK, READPAST, ROWLOCK)",
                "I:id,N:entity,N:message_id,N:session_id,N:subject,N:correlation_id,"
                "N:content_type,M:properties,M:body,I:attempts,N:trace_context",
                cells, 1, -1);
    tdsrec_rule(rec, "SELECT session_id, MIN(id) FROM dbo.ob", "N:session_id,I:", head, 1, -1);
    ASSERT_EQ(db_outbox_claim(dbc, "dbo.ob", 10, &rows, &nrows, &err), IB_E_OK);
    ASSERT_EQ(nrows, 1);
    ASSERT_EQ(rows[0].id, 5);
    ASSERT_STREQ(rows[0].message_id, UNICODE_TEXT);
    ASSERT_STREQ(rows[0].subject, UNICODE_TEXT);
    ASSERT_STREQ(rows[0].properties, "{\"k\":\"\xe2\x82\xac\"}");
    ASSERT_STREQ(rows[0].trace_context, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    ASSERT_EQ(rows[0].body_len, strlen(UNICODE_TEXT));
    ASSERT_TRUE(memcmp(rows[0].body, UNICODE_TEXT, strlen(UNICODE_TEXT)) == 0);
    ASSERT_EQ(db_outbox_mark(dbc, "dbo.ob", rows[0].id, DB_OUTBOX_PUBLISHED, NULL, &err),
              IB_E_OK);
    ASSERT_EQ(db_end(dbc, true, &err), IB_E_OK);
    db_outbox_rows_free(rows, nrows);
    tdsrec_event_t *ev = events_since(from, &n, &total);
    unsigned long long desc;
    ASSERT_TRUE(in_transactions(ev, from, total, 1, &desc));
    const tdsrec_event_t *h = find(ev, from, total, "SELECT session_id, MIN(id) FROM dbo.ob");
    ASSERT_TRUE(h != NULL);
    ASSERT_CONTAINS(h->sql, "WITH (READCOMMITTEDLOCK)");
    ASSERT_TRUE(find(ev, from, total, "UPDATE dbo.ob") != NULL);
    tdsrec_events_free(ev, total);
}

/* An HTTP route: the claim in a transaction of its own, then the finish and the route's SQL in one. */
static void test_http_claim_finish(void)
{
    size_t from = mark(), n, total;
    db_claim_t c = claim_of("h-1", HASH);
    db_claim_row_t row;
    ib_error_t err;
    ASSERT_EQ(db_effect_claim(dbc, &c, 30, &row, &err), DB_CLAIM_NEW);
    size_t mid = mark();
    db_param_t p[1] = {DB_TEXT(UNICODE_TEXT)};
    db_stmt_t st = {"UPDATE dbo.orders SET note = ? WHERE id = 1", p, 1};
    db_effect_result_t res = {.status = DB_ROW_PROCESSED, .remote_id = "r-1", .remote_status = 201};
    ASSERT_EQ(db_effect_finish(dbc, "orders", &row, &res, &st, 1, &err), DB_APPLIED);
    tdsrec_event_t *ev = events_since(from, &n, &total);
    unsigned long long d1, d2;
    ASSERT_TRUE(in_transactions(ev, from, mid, 1, &d1));
    ASSERT_TRUE(in_transactions(ev, mid, total, 1, &d2));
    ASSERT_TRUE(d1 != d2);
    const tdsrec_event_t *route = find(ev, mid, total, "UPDATE dbo.orders");
    ASSERT_TRUE(route != NULL);
    ASSERT_STREQ(route->values[0], UNICODE_TEXT); /* sent as UTF-16, arrives intact */
    ASSERT_TRUE(sizes_fixed(route->decl));
    tdsrec_events_free(ev, total);
}

/* The sweep: at most 4,000 rows a DELETE (below lock escalation), each batch committed. */
static void test_sweep(void)
{
    size_t from = mark(), n, total;
    ib_error_t err;
    ASSERT_EQ(db_inbox_sweep(dbc, 7, 10000, &err), 1);
    tdsrec_event_t *ev = events_since(from, &n, &total);
    const tdsrec_event_t *del = find(ev, from, total, "DELETE TOP (@P1) FROM dbo.inbox");
    ASSERT_TRUE(del != NULL);
    ASSERT_STREQ(del->values[0], "4000");
    for (size_t i = from; i < total; i++)
        ASSERT_TRUE(ev[i].kind == TDSREC_TM || (ev[i].trancount == 1 && ev[i].hdr == ev[i].open));
    tdsrec_events_free(ev, total);
}

/* Migrate: the lock, the DDL and the unlock, each inside the driver's transaction. */
static void test_migrate(void)
{
    size_t from = mark(), n, total;
    const char *one[] = {"1"};
    ib_error_t err;
    tdsrec_rule(rec, "SELECT COUNT(*) FROM sys.indexes", "I:", one, 1, -1);
    tdsrec_rule(rec, "COL_LENGTH", "I:", one, 1, -1); /* the HTTP claim columns exist */
    ASSERT_EQ(db_migrate(dbc, true, &err), IB_E_OK);
    tdsrec_event_t *ev = events_since(from, &n, &total);
    ASSERT_TRUE(find(ev, from, total, "CREATE TABLE dbo.inbox") != NULL);
    ASSERT_TRUE(find(ev, from, total, "COLLATE Latin1_General_100_BIN2") != NULL);
    ASSERT_TRUE(find(ev, from, total, "WHERE status = 'processed'") != NULL);
    for (size_t i = from; i < total; i++)
        ASSERT_TRUE(ev[i].kind == TDSREC_TM || (ev[i].trancount == 1 && ev[i].hdr == ev[i].open));
    tdsrec_events_free(ev, total);
}

int main(int argc, char **argv)
{
    if (access(TDSODBC_PATH, R_OK) != 0) {
        fprintf(stderr, "skipped: the FreeTDS ODBC driver is not installed (%s; Debian: tdsodbc, "
                        "which scripts/install-deps installs)\n",
                TDSODBC_PATH);
        return 77;
    }
    rec = tdsrec_start(argc > 1 ? argv[1] : NULL);
    if (!rec) {
        fprintf(stderr, "tds recorder: cannot listen\n");
        return 1;
    }
    RUN(test_login_and_session);
    if (!dbc)
        return ib_test_done();
    RUN(test_migrate);
    RUN(test_one_message);
    RUN(test_commit_refused);
    RUN(test_batch);
    RUN(test_outbox_and_charset);
    RUN(test_http_claim_finish);
    RUN(test_sweep);
    db_conn_free(dbc);
    tdsrec_stop(rec);
    return ib_test_done();
}
