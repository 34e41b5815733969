/*
 * db_unique.c - is a database error a unique violation, and on which
 * constraint? The business-key backstop (a route's on_unique_violation)
 * needs the constraint's name, which no ODBC field carries: each dialect
 * spells it in its own message text, read here so that the worker never
 * parses driver text itself.
 *
 * Pure text; thread: any.
 */
#include "db_dialect.h"

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
