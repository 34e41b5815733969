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
 * timestamps datetime2, the batch claim's rows come in key order, an
 * HTTP batch claim and finish are one request each (exact rows, the
 * per-row path deciding what the claim leaves), the
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

/* How many events of [from, to) have SQL containing s. */
static int count_sql(const tdsrec_event_t *ev, size_t from, size_t to, const char *s)
{
    int n = 0;
    for (size_t i = from; i < to; i++)
        n += ev[i].sql && strstr(ev[i].sql, s) != NULL;
    return n;
}

#define HTTP_CLAIM "OUTPUT inserted.message_id SELECT"
#define HTTP_FINISH "UPDATE x SET status = v.s"

/*
 * An HTTP batch claim: one INSERT ... OUTPUT request for the batch (no
 * lookup, no per-row insert), its rows in key order, ten parameters a row
 * declared as SQL Server expects, the ids returned as sent (UTF-16 both
 * ways: a returned id that did not match would fail the claim), one COMMIT.
 */
static void test_http_claim_batch(void)
{
    char uid[32];
    snprintf(uid, sizeof uid, "h-%s", UNICODE_TEXT);
    const char *ids[3] = {uid, "h-a", "h-b"};
    db_claim_t c[3];
    db_effect_claim_item_t it[3];
    size_t from = mark(), n, total;
    ib_error_t err;
    for (int i = 0; i < 3; i++) {
        c[i] = claim_of(ids[i], HASH);
        it[i] = (db_effect_claim_item_t){.claim = &c[i], .lease_s = 30};
    }
    c[1].idempotency_key = "k-a";
    ASSERT_EQ(db_effect_claim_batch(dbc, it, 3, &err), 3);
    for (int i = 0; i < 3; i++)
        ASSERT_TRUE(it[i].claimed && it[i].row.token[0] && it[i].row.status == DB_ROW_CLAIMED);
    tdsrec_event_t *ev = events_since(from, &n, &total);
    unsigned long long desc;
    ASSERT_TRUE(in_transactions(ev, from, total, 1, &desc));
    ASSERT_EQ(count_sql(ev, from, total, HTTP_CLAIM), 1);
    ASSERT_EQ(count_sql(ev, from, total, "UNION ALL"), 0);          /* no lookup */
    ASSERT_EQ(count_sql(ev, from, total, "attempts) VALUES"), 0);   /* no per-row insert */
    const tdsrec_event_t *cl = find(ev, from, total, HTTP_CLAIM);
    ASSERT_TRUE(cl != NULL && cl->kind == TDSREC_RPC);
    ASSERT_CONTAINS(cl->sql, "INSERT INTO dbo.inbox (consumer, message_id,");
    ASSERT_CONTAINS(cl->sql, "FROM dbo.inbox AS x WITH (UPDLOCK, HOLDLOCK) WHERE x.consumer = "
                             "v.c AND x.message_id = v.m");
    ASSERT_CONTAINS(cl->sql, "(v.k IS NULL OR NOT EXISTS (SELECT 1 FROM dbo.inbox AS y WITH "
                             "(UPDLOCK, HOLDLOCK)");
    ASSERT_CONTAINS(cl->sql, "DATEADD(second, 30, SYSUTCDATETIME())");
    ASSERT_NOT_CONTAINS(cl->sql, "MERGE");
    ASSERT_EQ(cl->nvalues, 30); /* exactly the three rows: no padding copy */
    ASSERT_TRUE(sizes_fixed(cl->decl));
    ASSERT_NOT_CONTAINS(cl->decl, "VARCHAR(1)");
    ASSERT_CONTAINS(cl->types, "datetime2(7),datetime2(7),nvarchar(4000)");
    ASSERT_NOT_CONTAINS(cl->types, "datetime,");
    /* Key order (byte for byte): h-a, h-b, then h-é... */
    ASSERT_STREQ(cl->values[1], "h-a");
    ASSERT_STREQ(cl->values[2], "k-a");
    ASSERT_TRUE(cl->values[12] == NULL); /* h-b: no idempotency key */
    ASSERT_STREQ(cl->values[11], "h-b");
    ASSERT_STREQ(cl->values[21], uid);
    ASSERT_STREQ(cl->values[9], it[1].row.token);
    tdsrec_events_free(ev, total);
}

/* The lookup's answer for a row found by the per-row claim. */
static void lookup_answers(const char *hash, const char *status, const char *expired)
{
    const char *cells[] = {"t-c", hash, status, expired, NULL, "1", NULL};
    tdsrec_rule(rec, "remote_status FROM dbo.inbox WHERE consumer = @P1",
                "N:message_id,N:body_sha256,N:status,I:,N:remote_id,I:attempts,I:remote_status",
                cells, 1, -1);
}

/*
 * A batch claim whose statement returns two of three rows (the third's key
 * was taken): two claimed, committed; the third is left to the per-row
 * claim, which decides it as it always did, from the row it finds: a live
 * lease (busy), an expired one (taken over), a finished row (done),
 * another body (conflict).
 */
static void test_http_claim_batch_taken(void)
{
    const char *ids[3] = {"t-a", "t-b", "t-c"};
    const char *back[2] = {"t-a", "t-b"};
    db_claim_t c[3];
    db_effect_claim_item_t it[3];
    db_claim_row_t row;
    ib_error_t err;
    for (int i = 0; i < 3; i++) {
        c[i] = claim_of(ids[i], HASH);
        it[i] = (db_effect_claim_item_t){.claim = &c[i], .lease_s = 30};
    }
    tdsrec_rule(rec, HTTP_CLAIM, "N:message_id", back, 2, -1);
    ASSERT_EQ(db_effect_claim_batch(dbc, it, 3, &err), 2);
    ASSERT_TRUE(it[0].claimed && it[1].claimed && !it[2].claimed);
    ASSERT_EQ(err.code, IB_E_OK);
    tdsrec_rule_error(rec, "attempts) VALUES", 2627,
                      "Violation of PRIMARY KEY constraint 'PK_inbox'. Cannot insert duplicate "
                      "key in object 'dbo.inbox'.");
    lookup_answers(HASH, "claimed", "0");
    ASSERT_EQ(db_effect_claim(dbc, &c[2], 30, &row, &err), DB_CLAIM_BUSY);
    lookup_answers(HASH, "claimed", "1");
    ASSERT_EQ(db_effect_claim(dbc, &c[2], 30, &row, &err), DB_CLAIM_TAKEN_OVER);
    lookup_answers(HASH, "processed", "1");
    ASSERT_EQ(db_effect_claim(dbc, &c[2], 30, &row, &err), DB_CLAIM_DONE);
    lookup_answers("f0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde", "claimed",
                   "1");
    ASSERT_EQ(db_effect_claim(dbc, &c[2], 30, &row, &err), DB_CLAIM_CONFLICT);
}

/* A deadlock (1205) on the batch claim: nothing claimed, transient, no COMMIT. */
static void test_http_claim_batch_deadlock(void)
{
    db_claim_t c[2] = {claim_of("d-a", HASH), claim_of("d-b", HASH)};
    db_effect_claim_item_t it[2] = {{.claim = &c[0], .lease_s = 30}, {.claim = &c[1], .lease_s = 30}};
    size_t from = mark(), n, total;
    ib_error_t err;
    tdsrec_rule_error(rec, HTTP_CLAIM, 1205,
                      "Transaction (Process ID 55) was deadlocked on lock resources with another "
                      "process and has been chosen as the deadlock victim. Rerun the transaction.");
    ASSERT_EQ(db_effect_claim_batch(dbc, it, 2, &err), 0);
    ASSERT_EQ(err.cls, IB_CLASS_TRANSIENT);
    ASSERT_TRUE(!it[0].claimed && !it[1].claimed);
    tdsrec_event_t *ev = events_since(from, &n, &total);
    for (size_t i = from; i < total; i++)
        ASSERT_TRUE(!(ev[i].kind == TDSREC_TM && ev[i].tm == 7));
    tdsrec_events_free(ev, total);
}

/*
 * An HTTP batch finish: one UPDATE request for the rows (7 parameters a
 * row, the consumer last), then the routes' statements, one COMMIT; a row
 * no longer ours (2 of 3 updated) rolls it all back as IB_E_LOCK_LOST.
 */
static void test_http_finish_batch(void)
{
    db_claim_row_t rows[3] = {{.message_id = "f-a", .token = "0a"},
                              {.message_id = "f-b", .token = "0b"},
                              {.message_id = "f-c", .token = "0c"}};
    db_effect_result_t ok = {.status = DB_ROW_PROCESSED, .remote_id = UNICODE_TEXT,
                             .remote_status = 201};
    db_effect_result_t bad = {.status = DB_ROW_FAILED, .error_class = "permanent",
                              .error_detail = "HTTP 422"};
    db_param_t p[1] = {DB_INT(1)};
    db_stmt_t st = {"UPDATE dbo.orders SET qty = ? WHERE id = 1", p, 1};
    db_effect_finish_item_t fi[3] = {
        {&rows[0], &ok, &st, 1}, {&rows[1], &bad, &st, 1}, {&rows[2], &ok, &st, 1}};
    size_t from = mark(), n, total;
    ib_error_t err;
    ASSERT_EQ(db_effect_finish_batch(dbc, "orders", fi, 3, &err), DB_APPLIED);
    tdsrec_event_t *ev = events_since(from, &n, &total);
    unsigned long long desc;
    ASSERT_TRUE(in_transactions(ev, from, total, 1, &desc));
    ASSERT_EQ(count_sql(ev, from, total, HTTP_FINISH), 1);
    const tdsrec_event_t *f = find(ev, from, total, HTTP_FINISH);
    ASSERT_TRUE(f != NULL && f->kind == TDSREC_RPC);
    ASSERT_CONTAINS(f->sql, "FROM dbo.inbox AS x INNER JOIN (VALUES (@P1, @P2, CAST(@P3 AS int)");
    ASSERT_CONTAINS(f->sql, "ON x.consumer = @P22 AND x.message_id = v.m WHERE x.status = "
                            "'claimed' AND x.claim_token = v.t");
    ASSERT_EQ(f->nvalues, 22);
    ASSERT_TRUE(sizes_fixed(f->decl));
    ASSERT_STREQ(f->values[0], "processed");
    ASSERT_STREQ(f->values[1], UNICODE_TEXT);
    ASSERT_STREQ(f->values[2], "201");
    ASSERT_STREQ(f->values[7], "failed");
    ASSERT_TRUE(f->values[8] == NULL && f->values[9] == NULL);
    ASSERT_STREQ(f->values[11], "HTTP 422");
    ASSERT_STREQ(f->values[19], "f-c");
    ASSERT_STREQ(f->values[20], "0c");
    ASSERT_STREQ(f->values[21], "orders");
    ASSERT_TRUE(find(ev, from, total, "UPDATE dbo.orders") > f);
    tdsrec_events_free(ev, total);

    from = mark();
    tdsrec_rule(rec, HTTP_FINISH, "", NULL, 0, 2);
    ASSERT_EQ(db_effect_finish_batch(dbc, "orders", fi, 3, &err), DB_FAILED);
    ASSERT_EQ(err.code, IB_E_LOCK_LOST);
    ev = events_since(from, &n, &total);
    for (size_t i = from; i < total; i++)
        ASSERT_TRUE(!(ev[i].kind == TDSREC_TM && ev[i].tm == 7));
    ASSERT_TRUE(find(ev, from, total, "UPDATE dbo.orders") == NULL);
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
    /* These add rules that would answer the tests above: they come last. */
    RUN(test_http_claim_batch);
    RUN(test_http_finish_batch);
    RUN(test_http_claim_batch_taken);
    RUN(test_http_claim_batch_deadlock);
    db_conn_free(dbc);
    tdsrec_stop(rec);
    return ib_test_done();
}
