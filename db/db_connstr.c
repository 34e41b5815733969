#include "db_connstr.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CONNSTR_MAX 8192
#define CONNSTR_ATTRS_MAX 64

static ib_err_t fail(ib_error_t *err, size_t pos, const char *what)
{
    return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                        "ODBC connection string: %s (at byte %zu)", what, pos);
}

/*
 * The value at s[*i] (after '=' and its spaces) into val (room for the rest
 * of s): braced, with "}}" as a literal '}', or up to the next ';' with its
 * trailing spaces dropped. Leaves *i on the ';' or the end; *vl its length.
 */
static ib_err_t parse_value(const char *s, size_t len, size_t *i, char *val, size_t *vl,
                            ib_error_t *err)
{
    size_t at = *i, n = 0;
    if (at < len && s[at] == '{') {
        size_t vs = at++;
        for (;;) {
            if (at >= len)
                return fail(err, vs, "a '{' is never closed");
            if (s[at] == '}') {
                if (at + 1 < len && s[at + 1] == '}') {
                    val[n++] = '}';
                    at += 2;
                    continue;
                }
                at++;
                break;
            }
            val[n++] = s[at++];
        }
        while (at < len && isspace((unsigned char)s[at]))
            at++;
        if (at < len && s[at] != ';')
            return fail(err, at, "text follows a closing '}'");
    } else {
        while (at < len && s[at] != ';') {
            if (s[at] == '{' || s[at] == '}')
                return fail(err, at, "a brace inside an unbraced value");
            val[n++] = s[at++];
        }
        while (n > 0 && isspace((unsigned char)val[n - 1]))
            n--;
    }
    val[n] = '\0';
    *i = at;
    *vl = n;
    return IB_E_OK;
}

ib_err_t db_connstr_parse(const char *s, db_connstr_t *out, ib_error_t *err)
{
    size_t i = 0, len;
    ib_err_t rc = IB_E_OK;

    memset(out, 0, sizeof(*out));
    if (!s || !*s)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "ODBC connection string is empty");
    len = strlen(s);
    if (len > CONNSTR_MAX)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "ODBC connection string is longer than %d bytes", CONNSTR_MAX);
    out->attrs = calloc(CONNSTR_ATTRS_MAX, sizeof(*out->attrs));
    if (!out->attrs)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");

    while (i < len && rc == IB_E_OK) {
        size_t ks, ke;
        char *val;
        size_t vl = 0;

        while (i < len && (isspace((unsigned char)s[i]) || s[i] == ';'))
            i++;
        if (i >= len)
            break;
        ks = i;
        while (i < len && s[i] != '=' && s[i] != ';')
            i++;
        if (i >= len || s[i] != '=') {
            rc = fail(err, ks, "an attribute has no '='");
            break;
        }
        ke = i;
        while (ke > ks && isspace((unsigned char)s[ke - 1]))
            ke--;
        if (ke == ks) {
            rc = fail(err, ks, "an attribute has an empty key");
            break;
        }
        if (memchr(s + ks, '{', ke - ks) || memchr(s + ks, '}', ke - ks)) {
            rc = fail(err, ks, "a key contains a brace");
            break;
        }
        i++; /* '=' */
        while (i < len && s[i] == ' ')
            i++;
        val = malloc(len - i + 1);
        if (!val) {
            rc = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
            break;
        }
        if ((rc = parse_value(s, len, &i, val, &vl, err)) != IB_E_OK) {
            free(val);
            break;
        }
        if (out->n == CONNSTR_ATTRS_MAX) {
            free(val);
            rc = fail(err, ks, "too many attributes");
            break;
        }
        for (size_t k = 0; k < out->n; k++) {
            if (strlen(out->attrs[k].key) == ke - ks &&
                strncasecmp(out->attrs[k].key, s + ks, ke - ks) == 0) {
                free(val);
                return db_connstr_free(out), fail(err, ks, "an attribute is given twice");
            }
        }
        out->attrs[out->n].key = strndup(s + ks, ke - ks);
        out->attrs[out->n].value = val;
        if (!out->attrs[out->n].key) {
            free(val);
            rc = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
            break;
        }
        out->n++;
    }
    if (rc == IB_E_OK && out->n == 0)
        rc = ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                          "ODBC connection string has no attributes");
    if (rc != IB_E_OK)
        db_connstr_free(out);
    return rc;
}

void db_connstr_free(db_connstr_t *cs)
{
    if (!cs || !cs->attrs)
        return;
    for (size_t k = 0; k < cs->n; k++) {
        free(cs->attrs[k].key);
        if (cs->attrs[k].value)
            memset(cs->attrs[k].value, 0, strlen(cs->attrs[k].value));
        free(cs->attrs[k].value);
    }
    free(cs->attrs);
    memset(cs, 0, sizeof(*cs));
}

const char *db_connstr_get(const db_connstr_t *cs, const char *key)
{
    for (size_t k = 0; k < cs->n; k++)
        if (strcasecmp(cs->attrs[k].key, key) == 0)
            return cs->attrs[k].value;
    return NULL;
}

int db_connstr_key_is_secret(const char *key)
{
    static const char *const secret_keys[] = {"pwd",         "password",     "authenticationkey",
                                              "accesstoken", "clientsecret", NULL};
    for (int k = 0; secret_keys[k]; k++)
        if (strcasecmp(key, secret_keys[k]) == 0)
            return 1;
    return 0;
}

char *db_connstr_redact(const char *s)
{
    db_connstr_t cs;
    size_t cap = 1, used = 0;
    char *out;

    if (db_connstr_parse(s, &cs, NULL) != IB_E_OK)
        return NULL;
    for (size_t k = 0; k < cs.n; k++)
        cap += strlen(cs.attrs[k].key) + 2 * strlen(cs.attrs[k].value) + 8;
    out = malloc(cap);
    if (out) {
        for (size_t k = 0; k < cs.n; k++) {
            const char *v = db_connstr_key_is_secret(cs.attrs[k].key) ? "***" : cs.attrs[k].value;
            int brace = strpbrk(v, ";{}= ") != NULL;
            used += (size_t)snprintf(out + used, cap - used, "%s%s=%s", k ? ";" : "",
                                     cs.attrs[k].key, brace ? "{" : "");
            for (const char *c = v; *c; c++) {
                out[used++] = *c;
                if (*c == '}')
                    out[used++] = '}';
            }
            if (brace)
                out[used++] = '}';
            out[used] = '\0';
        }
    }
    db_connstr_free(&cs);
    return out;
}
