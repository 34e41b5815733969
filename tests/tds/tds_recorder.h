/*
 * tds_recorder.h - a test server speaking enough of MS-TDS 7.4 for the
 * FreeTDS ODBC driver to log in and run inboxd's statements: PRELOGIN
 * (no TLS: it answers ENCRYPT_NOT_SUP), LOGIN7, SQL batches, RPCs
 * (sp_executesql, sp_prepexec, sp_execute, sp_unprepare) and
 * transaction-manager requests. It records every request - SQL text, the
 * parameter declarations and wire types of RPCs, the transaction
 * descriptor each request carries, the transaction-manager requests - to
 * memory and to a log file, and answers with canned results.
 *
 * It is not SQL Server: it runs no SQL. Its transaction state follows the
 * protocol (a descriptor per transaction, @@TRANCOUNT as BEGIN / COMMIT /
 * ROLLBACK requests and the T-SQL statements of those names move it), and
 * each answer to a statement comes from a rule the test gave or from the
 * defaults in tds_recorder.c.
 *
 * thread: the recorder runs one thread per connection plus the acceptor;
 * the calls below may come from any thread.
 */
#ifndef TDS_RECORDER_H
#define TDS_RECORDER_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { TDSREC_BATCH, TDSREC_RPC, TDSREC_TM } tdsrec_kind_t;

#define TDSREC_MAXP 2100

/* One request as the server received it. Strings are UTF-8. */
typedef struct tdsrec_event {
    tdsrec_kind_t kind;
    int conn;                 /* connection number, from 1 */
    unsigned long long hdr;   /* transaction descriptor of the request's ALL_HEADERS */
    unsigned long long open;  /* the descriptor of the transaction open on arrival; 0: none */
    int trancount;            /* @@TRANCOUNT on arrival */
    bool after_begin;         /* a transaction-manager request came before on this connection */
    char *proc;               /* RPC: the procedure ("sp_executesql", "sp_prepexec", ...) */
    char *sql;                /* the batch's text or the RPC's statement; TM: its request name */
    char *decl;               /* RPC: the parameter declarations (@params), or NULL */
    char *types;              /* RPC: the wire type of each value parameter, comma-separated */
    char **values;            /* RPC: each value parameter as text (NULL for NULL) */
    size_t nvalues;
    int tm;                   /* TM: 5 begin, 7 commit, 8 rollback */
    bool tm_cont;             /* TM commit / rollback: a new transaction begins at once */
} tdsrec_event_t;

typedef struct tdsrec tdsrec_t;

/* Listens on 127.0.0.1 (a free port) and logs to log_path. NULL on failure. */
tdsrec_t *tdsrec_start(const char *log_path);
int tdsrec_port(const tdsrec_t *r);
void tdsrec_stop(tdsrec_t *r);

/*
 * A canned answer to every statement whose text contains match: columns
 * like "I:id,N:entity,M:body" (I bigint, N nvarchar(4000), M nvarchar(max)),
 * rows x ncols cells (NULL = SQL NULL), and the row count its DONE reports
 * (-1: the number of rows); columns "" sends the row count alone, no
 * result. The newest matching rule wins. Strings are copied.
 */
void tdsrec_rule(tdsrec_t *r, const char *match, const char *columns, const char *const *cells,
                 size_t rows, long long count);
/* The same with an error (number, message) instead of a result. */
void tdsrec_rule_error(tdsrec_t *r, const char *match, int number, const char *message);

/* A copy of the events so far (free with tdsrec_events_free). */
tdsrec_event_t *tdsrec_events(tdsrec_t *r, size_t *n);
void tdsrec_events_free(tdsrec_event_t *ev, size_t n);

#endif
