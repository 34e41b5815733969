/*
 * db_suite.h - inboxd's database suite against any server (scripts/test-db):
 * the shared state and helpers of its cases. See db_suite.c.
 */
#ifndef DB_SUITE_H
#define DB_SUITE_H

#include "db_inbox.h"
#include "db_testlib.h"
#include "ib_log.h"
#include "ib_test.h"

/* The server under test and the suite's own table names (ibt<pid>_*). */
extern const char *ds_connstr;
extern db_dialect_t ds_dialect;
extern char ds_inbox[48], ds_biz[48], ds_acct[48], ds_prefix[32];
/* Set by a case that cannot run on this server, with the reason. */
extern const char *ds_skip_reason;

#define SKIP(why)                                                                                  \
    do {                                                                                           \
        ds_skip_reason = (why);                                                                    \
        return;                                                                                    \
    } while (0)

/* A connection to the suite's inbox table (statement timeout in s; 0 = 60). Exits on failure. */
db_conn_t *ds_conn(long statement_timeout_s);
/*
 * Runs the query sql and commits: the integer in the first column of its
 * first row. Ends the suite (exit 1, saying why) when the query fails or
 * gives no row or NULL, so that a count never reads 0 by accident.
 */
long long ds_run(db_conn_t *dbc, const char *sql);
long long ds_runf(db_conn_t *dbc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Runs the statement sql (no result read) and commits: 0, or -1 after printing the error. */
int ds_exec(db_conn_t *dbc, const char *sql);
int ds_execf(db_conn_t *dbc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One message whose route inserts (id, thread) into the business table. */
db_outcome_t ds_apply(db_conn_t *dbc, const char *consumer, const char *id, const char *idem,
                      const char *body, int thread, ib_error_t *err);
/* The route statement ds_apply runs, for batches: params must hold 2. */
db_stmt_t ds_biz_stmt(char *sql, size_t size, db_param_t *params, const char *id, int thread);
void ds_sleep_ms(long ms);
/* Claims (tl_claim) and timeouts (tl_timeout) come from db_testlib.h. */

/* The cases (db_suite_cases.c, db_suite_faults.c). */
void case_outcomes(void);
void case_idempotency_backstop(void);
void case_business_unique_key(void);
void case_sweep(void);
void case_batch(void);
void case_migrate_four_processes(void);
void case_concurrent_claims(void);
void case_deadlock(void);
void case_lock_timeout(void);
void case_killed_session(void);
void case_statement_timeout(void);

#endif
