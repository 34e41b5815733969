/*
 * db_testlib.h - helpers of the db integration tests: a throwaway database
 * per test (a uniquely named PostgreSQL database on the run's shared server,
 * or a SQLite file), connections to it, and scalar queries for asserting
 * final state.
 *
 * PostgreSQL comes from INBOXD_TEST_PG_PORT (127.0.0.1, user postgres, trust).
 * Unset: the test exits 77 (skipped) unless INBOXD_TEST_REQUIRE_PG=1.
 */
#ifndef DB_TESTLIB_H
#define DB_TESTLIB_H

#include "db_inbox.h"

typedef struct tl_db {
    db_dialect_t dialect;
    char name[96];     /* database name (PostgreSQL) */
    char path[256];    /* file (SQLite) */
    char connstr[512]; /* ODBC connection string of the test database */
    char admin[512];   /* PostgreSQL: the maintenance database */
} tl_db_t;

/* "postgresql" or "sqlite" from argv[1]; exits 2 on anything else. */
db_dialect_t tl_dialect_arg(int argc, char **argv);
/* Creates the database; exits 77 (skip) or 1 (failure) as the contract says. */
void tl_db_create(tl_db_t *t, db_dialect_t d, const char *tag);
void tl_db_drop(tl_db_t *t);
/* A connection through db_conn_new; exits 1 on failure. */
db_conn_t *tl_conn(const tl_db_t *t);
db_conn_t *tl_conn_opts(const tl_db_t *t, const db_options_t *extra);
/* A connection whose errors.transient_native is the JSON array codes; exits 1 on failure. */
db_conn_t *tl_conn_transient(const tl_db_t *t, const char *codes);
/* Runs sql and commits (autocommit, raw ODBC); returns 0 or -1 (printed). */
int tl_exec(const tl_db_t *t, const char *sql);
/* tl_exec on the maintenance database (PostgreSQL only). */
int tl_admin_exec(const tl_db_t *t, const char *sql);
/*
 * The first column of the first row of sql as an integer; exits 1 on
 * failure and when there is no row or it is NULL (never a silent 0).
 */
long long tl_scalar(const tl_db_t *t, const char *sql);
/* A claim with body text: fills hash (65 bytes) from body. */
db_claim_t tl_claim(const char *consumer, const char *message_id, const char *idem,
                    const char *body, char hash[65]);
/*
 * Runs the ```sql block CHANGELOG.md gives for t's dialect (the one after
 * "PostgreSQL:" or "SQLite" past the text marker), statement by statement,
 * with the default table name from replaced by table. Returns how many
 * statements ran, or -1 (printed) when the block is missing or one failed.
 */
int tl_changelog_exec(const tl_db_t *t, const char *marker, const char *from, const char *table);
/* Seconds scaled by INBOXD_TEST_TIMEOUT_MULTIPLIER. */
double tl_timeout(double seconds);

#endif
