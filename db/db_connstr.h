/*
 * db_connstr.h - ODBC connection strings as SQLDriverConnect takes them:
 *
 *   Driver={ODBC Driver 18 for SQL Server};Server=tcp:h,1433;Pwd={a;b}}c}
 *
 * Attributes are Key=Value separated by ';'. A value in braces may hold ';'
 * and '=' and writes a literal '}' as '}}'. Keys are matched without regard
 * to case.
 */
#ifndef DB_CONNSTR_H
#define DB_CONNSTR_H

#include <stddef.h>

#include "ib_err.h"

typedef struct db_connstr_attr {
    char *key;
    char *value; /* unbraced, unescaped */
} db_connstr_attr_t;

typedef struct db_connstr {
    db_connstr_attr_t *attrs;
    size_t n;
} db_connstr_t;

/* Parses s; IB_E_CONFIG with a text naming the problem (never a value). */
ib_err_t db_connstr_parse(const char *s, db_connstr_t *out, ib_error_t *err);
void db_connstr_free(db_connstr_t *cs);
/* The value of key, or NULL. */
const char *db_connstr_get(const db_connstr_t *cs, const char *key);
/* True for attributes that hold a secret (Pwd, Password, ...). */
int db_connstr_key_is_secret(const char *key);
/*
 * A newly allocated copy of s with every secret value replaced by "***",
 * fit for logs. Returns NULL on a parse failure or out of memory.
 */
char *db_connstr_redact(const char *s);

#endif
