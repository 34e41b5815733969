/*
 * db_migrate.c - create or check the inbox table, and the retention sweep.
 */
#include "db_conn_int.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "db_effect.h"
#include "ib_backoff.h"
#include "ib_log.h"

#define MIGRATE_ATTEMPTS 8
#define SWEEP_BATCH_DEFAULT 1000
#define SWEEP_BATCH_MAX 10000

/*
 * Runs a catalog query counting the unique keys on (consumer, column) of
 * the inbox table (db_sql_probe_key) into *keys; what names the check in an
 * error. Read-only: rolled back.
 */
static ib_err_t probe_count(db_conn_t *dbc, const char *column, const char *what,
                            long long *keys, ib_error_t *err)
{
    char sql[DB_SQL_MAX];

    *keys = 0;
    if (db_sql_probe_key(dbc->dialect, dbc->table, column, sql, sizeof(sql)) != IB_E_OK)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "db.inbox_table: invalid name");
    if (db_run(dbc, sql, NULL, 0, db_row_first_int, keys, NULL, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        ib_error_prefix(err, "%s", what);
        if (err->cls == IB_CLASS_DUPLICATE)
            err->cls = IB_CLASS_PERMANENT;
        return err->code;
    }
    db_rollback_quiet(dbc);
    return IB_E_OK;
}

ib_err_t db_migrate_check_unique(db_conn_t *dbc, const char *name, ib_error_t *err)
{
    char sql[DB_SQL_MAX], table[256], cols[512];
    long long found = 0;
    int np = 0;
    db_bind_t b[2];

    ib_error_clear(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK)
        return err->code;
    if (db_sql_probe_unique_named(dbc->dialect, name, sql, sizeof(sql), table, sizeof(table), cols,
                                  sizeof(cols), &np) != IB_E_OK)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "unique key '%s': not a name this database gives a unique violation "
                            "(SQLite: \"table.column\" or \"table.a, table.b\")",
                            name);
    b[0] = DB_B(DB_TEXT(np == 2 ? table : name));
    b[1] = DB_B(DB_TEXT(cols));
    if (db_run(dbc, sql, b, (size_t)np, db_row_first_int, &found, NULL, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        ib_error_prefix(err, "unique key '%s' check", name);
        if (err->cls == IB_CLASS_DUPLICATE)
            err->cls = IB_CLASS_PERMANENT;
        return err->code;
    }
    db_rollback_quiet(dbc);
    if (found < 1)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "unique key '%s' does not exist (no unique constraint or index by "
                            "that name); without it two racing copies of one fact would both "
                            "apply",
                            name);
    return IB_E_OK;
}

/* Checks that the table has every inbox column and a unique key on the inbox key. */
static ib_err_t probe(db_conn_t *dbc, ib_error_t *err)
{
    char sql[DB_SQL_MAX];
    long long keys = 0;

    if (db_sql_probe_columns(dbc->dialect, dbc->table, sql, sizeof(sql)) != IB_E_OK)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "db.inbox_table: invalid name");
    if (db_run(dbc, sql, NULL, 0, NULL, NULL, NULL, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        if (err->code == IB_E_DB_CONN || err->cls == IB_CLASS_TRANSIENT)
            return err->code;
        ib_error_t e = *err;
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                     "db.inbox_table: table '%s' is missing or lacks inbox columns "
                     "(create it from db/schema/%s.sql or set db.migrate true): %s",
                     dbc->table, db_dialect_name(dbc->dialect), e.text);
        ib_strlcpy(err->sqlstate, e.sqlstate, sizeof(err->sqlstate));
        err->native = e.native;
        return IB_E_CONFIG;
    }
    if (probe_count(dbc, "message_id", "inbox key check", &keys, err) != IB_E_OK)
        return err->code;
    if (keys < 1)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "db.inbox_table: table '%s' has no primary key or unique index on "
                            "exactly (consumer, message_id); without it duplicates are not "
                            "detected",
                            dbc->table);
    /* The unique index on (consumer, idempotency_key): without it two racing copies both apply. */
    if (probe_count(dbc, "idempotency_key", "idempotency key index check", &keys, err) !=
        IB_E_OK)
        return err->code;
    if (keys < 1)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "db.inbox_table: table '%s' has no unique index on (consumer, "
                            "idempotency_key) (%s_idem in db/schema/%s.sql); without it two "
                            "racing copies of one key would both apply",
                            dbc->table, dbc->table, db_dialect_name(dbc->dialect));
    return IB_E_OK;
}

/* Releases the migration lock when it outlives the transaction (a session lock). */
static void migrate_unlock(db_conn_t *dbc, const char *table)
{
    char unlock[DB_SQL_MAX];
    ib_error_t e;

    if (db_sql_migrate_unlock(dbc->dialect, table, unlock, sizeof(unlock)) != IB_E_OK ||
        !unlock[0] || dbc->broken)
        return; /* nothing to release, or the session that held it is gone */
    if (db_run(dbc, unlock, NULL, 0, NULL, NULL, NULL, &e) != IB_E_OK ||
        db_end(dbc, true, &e) != IB_E_OK) {
        /* A lock that may still be held must not stay with a pooled session. */
        db_rollback_quiet(dbc);
        dbc->broken = true;
    }
}

/* Takes the migration lock (waiting up to DB_MIGRATE_LOCK_WAIT_S). */
static ib_err_t migrate_lock(db_conn_t *dbc, const char *lock, ib_error_t *err)
{
    long long got = 0;

    if (db_run(dbc, lock, NULL, 0, db_row_first_int, &got, NULL, err) != IB_E_OK)
        return err->code;
    if (got != 1)
        return ib_error_set(err, IB_E_DB, IB_CLASS_TRANSIENT,
                            "migration lock not granted within %d s (another replica is migrating)",
                            DB_MIGRATE_LOCK_WAIT_S);
    return IB_E_OK;
}

ib_err_t db_migrate_ddl(db_conn_t *dbc, const char *table, const char *const *ddl, size_t n,
                        ib_error_t *err)
{
    char lock[DB_SQL_MAX];

    if (db_sql_migrate_lock(dbc->dialect, table, lock, sizeof(lock)) != IB_E_OK)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "table '%s': invalid name",
                            table);
    if (lock[0] && migrate_lock(dbc, lock, err) != IB_E_OK) {
        db_rollback_quiet(dbc);
        return err->code;
    }
    for (size_t i = 0; i < n; i++)
        if (db_run(dbc, ddl[i], NULL, 0, NULL, NULL, NULL, err) != IB_E_OK)
            goto fail;
    if (db_end(dbc, true, err) != IB_E_OK)
        goto fail;
    migrate_unlock(dbc, table);
    return IB_E_OK;
fail:
    db_rollback_quiet(dbc);
    migrate_unlock(dbc, table);
    return err->code;
}

static ib_err_t create_once(db_conn_t *dbc, ib_error_t *err)
{
    char buf[3 * DB_SQL_MAX];
    const char *ddl[DB_DDL_MAX];
    size_t n = 0;

    if (db_sql_ddl(dbc->dialect, dbc->table, buf, sizeof(buf), ddl, &n) != IB_E_OK)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "db.inbox_table: invalid name");
    return db_migrate_ddl(dbc, dbc->table, ddl, n, err);
}

ib_err_t db_migrate(db_conn_t *dbc, bool create, ib_error_t *err)
{
    ib_error_t local;
    ib_rand_t seed = 0; /* the retry backoff's state, seeded on first use */

    if (!err)
        err = &local;
    ib_error_clear(err);
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK)
        return err->code;
    if (create) {
        for (int attempt = 1;; attempt++) {
            if (create_once(dbc, err) == IB_E_OK)
                break;
            /*
             * Concurrent creators wait on the migration lock, so only
             * weather is retried here (SQLite busy, a lost connection);
             * a catalog unique violation would mean the lock is missing.
             */
            if (err->cls == IB_CLASS_DUPLICATE)
                err->cls = IB_CLASS_PERMANENT;
            if (attempt >= MIGRATE_ATTEMPTS || err->cls != IB_CLASS_TRANSIENT) {
                ib_error_prefix(err, "db.migrate: creating table '%s'", dbc->table);
                return err->code;
            }
            IB_LOG(IB_LOG_WARN, "db_migrate", IB_MSG("migration attempt failed; retrying"),
                   IB_S("table", dbc->table), IB_S("sqlstate", err->sqlstate),
                   IB_I("native_error", err->native), IB_I("attempt", attempt));
            ib_sleep_ms(ib_backoff_ms(50, 800, attempt, &seed), NULL);
            if (db_conn_ensure(dbc, err) != IB_E_OK)
                continue;
        }
        /* The columns of effects beyond the database, on old tables too. */
        if (db_effect_migrate(dbc, true, err) != IB_E_OK)
            return err->code;
    }
    return probe(dbc, err);
}

long long db_inbox_sweep(db_conn_t *dbc, long days, long batch, ib_error_t *err)
{
    char sql[DB_SQL_MAX], lock[DB_SQL_MAX], unlock[DB_SQL_MAX];
    bool limit_first = false;
    long long total = 0, got = 1, cutoff;
    ib_error_t local;

    if (!err)
        err = &local;
    ib_error_clear(err);
    if (days <= 0)
        return 0;
    if (batch <= 0)
        batch = SWEEP_BATCH_DEFAULT;
    if (batch > SWEEP_BATCH_MAX)
        batch = SWEEP_BATCH_MAX;
    if ((size_t)batch > db_sql_delete_rows_max(dbc->dialect))
        batch = (long)db_sql_delete_rows_max(dbc->dialect);
    if (db_sql_sweep(dbc->dialect, dbc->table, sql, sizeof(sql), &limit_first) != IB_E_OK ||
        db_sql_sweep_lock(dbc->dialect, dbc->table, lock, sizeof(lock)) != IB_E_OK ||
        db_sql_sweep_unlock(dbc->dialect, dbc->table, unlock, sizeof(unlock)) != IB_E_OK) {
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "db.inbox_table: invalid name");
        return -1;
    }
    if (dbc->in_txn)
        db_rollback_quiet(dbc);
    if (db_conn_ensure(dbc, err) != IB_E_OK)
        return -1;
    if (lock[0]) {
        got = 0;
        if (db_run(dbc, lock, NULL, 0, db_row_first_int, &got, NULL, err) != IB_E_OK ||
            db_end(dbc, true, err) != IB_E_OK) {
            db_rollback_quiet(dbc);
            ib_error_prefix(err, "sweep lock");
            return -1;
        }
        if (got != 1)
            return 0; /* another replica is sweeping */
    }
    cutoff = ib_now_ms() - (long long)days * 86400000LL;
    for (;;) {
        db_bind_t b[2];
        long long rows = 0;
        b[limit_first ? 0 : 1] = DB_B(DB_INT(batch));
        b[limit_first ? 1 : 0] = DB_B_TS(cutoff);
        if (db_run(dbc, sql, b, 2, NULL, NULL, &rows, err) != IB_E_OK ||
            db_end(dbc, true, err) != IB_E_OK) {
            db_rollback_quiet(dbc);
            ib_error_prefix(err, "sweep");
            total = -1;
            break;
        }
        total += rows;
        if (rows < batch)
            break;
    }
    if (lock[0] && !dbc->broken) {
        ib_error_t e;
        if (db_run(dbc, unlock, NULL, 0, NULL, NULL, NULL, &e) != IB_E_OK)
            db_rollback_quiet(dbc);
        else
            db_end(dbc, true, &e);
    }
    return total;
}
