/*
 * db_unique.c - is a database error a unique violation, and on which
 * constraint? The business-key backstop (a route's on_unique_violation)
 * needs the constraint's name, which no ODBC field carries: each dialect
 * spells it in its own message text, read here so that the worker never
 * parses driver text itself. And the catalog query that finds such a
 * constraint by that same name, so that a route's "constraints" can be
 * checked at start.
 *
 * Pure text; thread: any.
 */
#include "db_dialect.h"

#include <stdio.h>
#include <string.h>

/* Copies the text after the last `open` up to the next `close` into name. */
static bool quoted_after(const char *text, const char *open, char close, char *name, size_t size)
{
    const char *at = NULL, *p = text, *end;
    size_t n;

    while ((p = strstr(p, open)) != NULL)
        at = p++;
    if (!at)
        return false;
    at += strlen(open);
    end = strchr(at, close);
    if (!end)
        return false;
    n = (size_t)(end - at);
    if (n == 0 || n >= size)
        return false;
    memcpy(name, at, n);
    name[n] = '\0';
    return true;
}

/* SQLite: "UNIQUE constraint failed: t.a, t.b" names the columns, up to the end of the line. */
static void sqlite_columns(const char *text, char *name, size_t size)
{
    const char *at = strstr(text, "UNIQUE constraint failed: ");
    size_t n;

    if (!at)
        return;
    at += strlen("UNIQUE constraint failed: ");
    n = strcspn(at, "\r\n(");
    while (n > 0 && at[n - 1] == ' ')
        n--;
    if (n == 0 || n >= size)
        return;
    memcpy(name, at, n);
    name[n] = '\0';
}

/* True when err is the violation shape u describes. */
static bool shape_matches(const db_unique_shape_t *u, const ib_error_t *err)
{
    if (!u->sqlstate && !u->native)
        return false; /* an unused slot */
    if (u->sqlstate && strcmp(err->sqlstate, u->sqlstate) != 0)
        return false;
    if (u->native != DB_NATIVE_ANY && err->native != u->native)
        return false;
    return !u->needs || strstr(err->text, u->needs);
}

bool db_unique_violation(db_dialect_t d, const ib_error_t *err, char *name, size_t size)
{
    const db_traits_t *tr = db_dialect_traits(d);
    const db_unique_shape_t *u = NULL;

    if (size)
        name[0] = '\0';
    for (size_t i = 0; tr && !u && i < sizeof(tr->unique) / sizeof(tr->unique[0]); i++)
        if (shape_matches(&tr->unique[i], err))
            u = &tr->unique[i];
    if (!u)
        return false;
    if (!u->marker) {
        sqlite_columns(err->text, name, size);
    } else if (quoted_after(err->text, u->marker, u->close, name, size) &&
               tr->unique_strip_table) {
        char *dot = strrchr(name, '.');
        if (dot)
            memmove(name, dot + 1, strlen(dot + 1) + 1);
    }
    return true;
}

/* SQLite's "t.a, t.b" into the table "t" and the columns "a,b"; false when not of that shape. */
static bool sqlite_name_split(const char *name, char *table, size_t tsize, char *cols,
                              size_t csize)
{
    size_t tl = 0, cl = 0;
    const char *p = name;

    table[0] = cols[0] = '\0';
    while (*p) {
        const char *dot = strchr(p, '.'), *end = strstr(p, ", ");
        size_t n;
        if (!end)
            end = p + strlen(p);
        if (!dot || dot >= end || dot == p || dot + 1 == end)
            return false;
        n = (size_t)(dot - p);
        if (!tl) {
            if (n >= tsize)
                return false;
            memcpy(table, p, n);
            table[n] = '\0';
            tl = n;
        } else if (n != tl || strncmp(table, p, n) != 0) {
            return false; /* one unique key spans one table */
        }
        n = (size_t)(end - dot - 1);
        if (cl + n + 2 > csize)
            return false;
        if (cl)
            cols[cl++] = ',';
        memcpy(cols + cl, dot + 1, n);
        cl += n;
        cols[cl] = '\0';
        if (*end && !end[2])
            return false; /* a trailing ", " */
        p = *end ? end + 2 : end;
    }
    return tl > 0;
}

ib_err_t db_sql_probe_unique_named(db_dialect_t d, const char *name, char *buf, size_t size,
                                   char *table, size_t tsize, char *cols, size_t csize,
                                   int *nparams)
{
    const db_traits_t *tr = db_dialect_traits(d);
    const char *sql;
    *nparams = 1;
    if (!tr)
        return IB_E_INVAL;
    sql = tr->unique_named_sql;
    if (tr->unique_by_columns) {
        if (!sqlite_name_split(name, table, tsize, cols, csize))
            return IB_E_INVAL;
        *nparams = 2;
    }
    if ((size_t)snprintf(buf, size, "%s", sql) >= size)
        return IB_E_INVAL;
    return IB_E_OK;
}
