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

bool db_unique_violation(db_dialect_t d, const ib_error_t *err, char *name, size_t size)
{
    const char *text = err->text;

    if (size)
        name[0] = '\0';
    switch (d) {
    case DB_DIALECT_POSTGRESQL:
        if (strcmp(err->sqlstate, "23505") != 0)
            return false;
        quoted_after(text, "unique constraint \"", '"', name, size);
        return true;
    case DB_DIALECT_MSSQL:
        if (strcmp(err->sqlstate, "23000") != 0 || (err->native != 2627 && err->native != 2601))
            return false;
        /* 2627: "Violation of PRIMARY KEY|UNIQUE KEY constraint 'NAME'. ..."
         * 2601: "Cannot insert duplicate key row in object 'T' with unique index 'NAME'. ..." */
        if (err->native == 2627)
            quoted_after(text, "constraint '", '\'', name, size);
        else
            quoted_after(text, "unique index '", '\'', name, size);
        return true;
    case DB_DIALECT_MARIADB:
        if (err->native != 1062)
            return false;
        /* "Duplicate entry 'V' for key 'NAME'" (MariaDB 10.5+: 'table.NAME'). */
        if (quoted_after(text, "for key '", '\'', name, size)) {
            char *dot = strrchr(name, '.');
            if (dot)
                memmove(name, dot + 1, strlen(dot + 1) + 1);
        }
        return true;
    case DB_DIALECT_SQLITE:
        /* 19 is every constraint kind; only the text tells a unique key from a CHECK. */
        if (err->native != 19 || !strstr(text, "UNIQUE constraint failed"))
            return false;
        sqlite_columns(text, name, size);
        return true;
    default:
        return false;
    }
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
    const char *sql = NULL;
    *nparams = 1;
    switch (d) {
    case DB_DIALECT_POSTGRESQL: /* a unique constraint is named as its index */
        sql = "SELECT COUNT(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
              "WHERE i.indisunique AND c.relname::text = ?";
        break;
    case DB_DIALECT_MSSQL: /* PRIMARY KEY and UNIQUE constraints own an index of their name */
        sql = "SELECT COUNT(*) FROM sys.indexes WHERE is_unique = 1 AND name = ?";
        break;
    case DB_DIALECT_MARIADB:
        sql = "SELECT COUNT(*) FROM (SELECT DISTINCT table_name FROM "
              "information_schema.statistics WHERE table_schema = DATABASE() AND "
              "non_unique = 0 AND index_name = ?) k";
        break;
    case DB_DIALECT_SQLITE:
        /* The columns in index order, as the violation lists them. An INTEGER
         * PRIMARY KEY has no index; name the column's own unique index instead. */
        if (!sqlite_name_split(name, table, tsize, cols, csize))
            return IB_E_INVAL;
        *nparams = 2;
        sql = "SELECT COUNT(*) FROM pragma_index_list(?) il WHERE il.\"unique\" = 1 AND "
              "(SELECT group_concat(name, ',') FROM (SELECT name FROM "
              "pragma_index_info(il.name) ORDER BY seqno)) = ?";
        break;
    default:
        return IB_E_INVAL;
    }
    if ((size_t)snprintf(buf, size, "%s", sql) >= size)
        return IB_E_INVAL;
    return IB_E_OK;
}
