/*
 * rt_sqltxn.c - finds transaction control in a route's SQL.
 *
 * A route's statements run inside inboxd's own transaction, the one that
 * inserts the inbox row. A statement of the route's own that ends or splits
 * that transaction (a COMMIT on SQL Server commits the inbox row before
 * inboxd can refuse the message) breaks the exactly-once promise, so the
 * route compiler refuses such SQL by name. This is a scanner, not a parser:
 * it skips string literals, quoted identifiers and comments and reads the
 * words that are left, one statement (split at ';') at a time.
 *
 * thread: any (pure).
 */
#include <ctype.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "rt_int.h"

/* PostgreSQL's $tag$...$tag$ string: its end, or c when c starts none. */
static const char *skip_dollar(const char *c)
{
    size_t t = 1;
    const char *e;
    char tag[64];
    while (t < sizeof(tag) - 1 && (isalpha((unsigned char)c[t]) || c[t] == '_'))
        t++;
    if (c[t] != '$')
        return c;
    memcpy(tag, c, t + 1);
    tag[t + 1] = '\0';
    e = strstr(c + t + 1, tag);
    return e ? e + t + 1 : c + strlen(c);
}

/* The end of the literal, quoted identifier or comment starting at c, or c. */
static const char *skip_quoted(const char *c)
{
    char close;
    if (*c == '$')
        return skip_dollar(c);
    if (c[0] == '-' && c[1] == '-') {
        while (*c && *c != '\n')
            c++;
        return c;
    }
    if (c[0] == '/' && c[1] == '*') {
        const char *e = strstr(c + 2, "*/");
        return e ? e + 2 : c + strlen(c);
    }
    if (*c != '\'' && *c != '"' && *c != '[' && *c != '`')
        return c;
    close = *c == '[' ? ']' : *c;
    for (c++; *c; c++) {
        if (*c != close)
            continue;
        if (c[1] != close) /* a doubled quote is the quote itself */
            return c + 1;
        c++;
    }
    return c;
}

static bool word_char(char ch)
{
    return isalnum((unsigned char)ch) || ch == '_' || ch == '@' || ch == '#' || ch == '$';
}

/* Moves *c to the next bare word in the statement (not past ';'); its length, 0 at the end. */
static size_t next_word(const char **c)
{
    const char *p = *c;
    for (;;) {
        const char *q = skip_quoted(p);
        if (q != p) {
            p = q;
            continue;
        }
        if (!*p || *p == ';' || word_char(*p))
            break;
        p++;
    }
    *c = p;
    size_t n = 0;
    while (word_char(p[n]))
        n++;
    return n;
}

static bool is(const char *w, size_t n, const char *kw)
{
    return strlen(kw) == n && strncasecmp(w, kw, n) == 0;
}

/* "TRAN" or "TRANSACTION" (T-SQL's two spellings). */
static bool is_tran(const char *w, size_t n)
{
    return is(w, n, "TRAN") || is(w, n, "TRANSACTION");
}

/*
 * The keyword a statement's words w1 (first), w2 (second) make transaction
 * control with, or NULL. COMMIT and ROLLBACK (reserved words on SQL Server,
 * where a statement needs no ';' before it), BEGIN/SAVE TRAN and START
 * TRANSACTION count anywhere in a statement; BEGIN, END, SAVEPOINT,
 * RELEASE and ABORT only as its first word (END also closes a CASE).
 */
static const char *txn_pair(const char *w1, size_t n1, const char *w2, size_t n2, bool first)
{
    if (is(w1, n1, "COMMIT") || is(w1, n1, "ROLLBACK"))
        return is(w1, n1, "COMMIT") ? "COMMIT" : "ROLLBACK";
    if (is(w1, n1, "BEGIN") && (is_tran(w2, n2) || is(w2, n2, "DISTRIBUTED")))
        return "BEGIN TRANSACTION";
    if (is(w1, n1, "SAVE") && is_tran(w2, n2))
        return "SAVE TRANSACTION";
    if (is(w1, n1, "START") && is(w2, n2, "TRANSACTION"))
        return "START TRANSACTION";
    if (!first)
        return NULL;
    static const char *const lead[] = {"BEGIN", "END", "SAVEPOINT", "RELEASE", "ABORT"};
    for (size_t k = 0; k < sizeof(lead) / sizeof(lead[0]); k++)
        if (is(w1, n1, lead[k]))
            return lead[k];
    return NULL;
}

const char *rt_sql_txn_keyword(const char *sql)
{
    const char *c = sql;
    bool first = true;
    while (*c) {
        const char *w1, *w2;
        size_t n1 = next_word(&c), n2;
        const char *kw;
        if (n1 == 0) {
            if (*c == ';') {
                c++;
                first = true;
            }
            continue;
        }
        w1 = c;
        c += n1;
        w2 = c;
        n2 = next_word(&w2);
        /* A part of a qualified name (t.commit, end.x) is a name. */
        kw = (w1 > sql && w1[-1] == '.') || *c == '.' ? NULL : txn_pair(w1, n1, w2, n2, first);
        if (kw)
            return kw;
        first = false;
    }
    return NULL;
}
