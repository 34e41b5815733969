/*
 * tds_recorder.c - the TDS recorder (see tds_recorder.h). Protocol facts
 * from MS-TDS (packet header, PRELOGIN, LOGIN7, ALL_HEADERS, RPC and
 * transaction-manager requests, the token stream); what FreeTDS sends
 * from its source (src/tds/query.c, login.c of 1.3.17).
 *
 * thread: an acceptor thread and one thread per connection; the event
 * list and the rules are under one mutex.
 */
#include "tds_recorder.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define PKT_MAX 4096 /* the packet size the recorder announces (ENVCHANGE 4) */

typedef struct rule {
    char *match;
    char *columns; /* NULL with an error */
    char **cells;
    size_t rows, ncols;
    long long count;
    int errnum;
    char *errmsg;
} rule_t;

struct tdsrec {
    int lfd, port;
    pthread_t acceptor;
    pthread_mutex_t mu;
    FILE *log;
    tdsrec_event_t *ev;
    size_t nev, cap;
    rule_t *rules;
    size_t nrules;
    int nconn;
    unsigned long long next_desc;
    int next_handle;
    bool stopping;
    int fds[64];
    pthread_t threads[64];
    size_t nthreads;
};

/* ---- bytes ------------------------------------------------------------- */

typedef struct out {
    unsigned char *b;
    size_t n, cap;
} out_t;

static void put(out_t *o, const void *p, size_t n)
{
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 1024;
        while (cap < o->n + n)
            cap *= 2;
        o->b = realloc(o->b, cap);
        if (!o->b)
            abort();
        o->cap = cap;
    }
    if (n)
        memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void u8(out_t *o, unsigned v)
{
    unsigned char c = (unsigned char)v;
    put(o, &c, 1);
}

static void u16(out_t *o, unsigned v)
{
    u8(o, v & 0xff);
    u8(o, (v >> 8) & 0xff);
}

static void u32(out_t *o, unsigned long v)
{
    u16(o, v & 0xffff);
    u16(o, (v >> 16) & 0xffff);
}

static void u64(out_t *o, unsigned long long v)
{
    u32(o, (unsigned long)(v & 0xffffffffULL));
    u32(o, (unsigned long)(v >> 32));
}

/* UTF-8 to UTF-16LE units in o; returns the number of units. */
static size_t ucs2(out_t *o, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = 0;
    while (*u) {
        unsigned long cp;
        int k = *u < 0x80 ? 0 : *u < 0xE0 ? 1 : *u < 0xF0 ? 2 : 3;
        cp = k == 0 ? *u : k == 1 ? (*u & 0x1Fu) : k == 2 ? (*u & 0x0Fu) : (*u & 0x07u);
        u++;
        for (int i = 0; i < k && (*u & 0xC0) == 0x80; i++, u++)
            cp = (cp << 6) | (*u & 0x3Fu);
        if (cp >= 0x10000) {
            cp -= 0x10000;
            u16(o, 0xD800 + (unsigned)(cp >> 10));
            u16(o, 0xDC00 + (unsigned)(cp & 0x3FF));
            n += 2;
        } else {
            u16(o, (unsigned)cp);
            n++;
        }
    }
    return n;
}

/* n UTF-16LE units at p as a malloc'd UTF-8 string. */
static char *utf8_of(const unsigned char *p, size_t n)
{
    char *s = malloc(n * 3 + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned long cp = p[2 * i] | ((unsigned long)p[2 * i + 1] << 8);
        if (cp >= 0xD800 && cp < 0xDC00 && i + 1 < n) {
            unsigned long lo = p[2 * i + 2] | ((unsigned long)p[2 * i + 3] << 8);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i++;
        }
        if (cp < 0x80) {
            s[o++] = (char)cp;
        } else if (cp < 0x800) {
            s[o++] = (char)(0xC0 | (cp >> 6));
            s[o++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            s[o++] = (char)(0xE0 | (cp >> 12));
            s[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            s[o++] = (char)(0x80 | (cp & 0x3F));
        } else { /* a pair: 4 bytes for 2 units, within the 6 allocated */
            s[o++] = (char)(0xF0 | (cp >> 18));
            s[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            s[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            s[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    s[o] = '\0';
    return s;
}

/* B_VARCHAR: a length in units (one byte), then UTF-16LE. */
static void bvarchar(out_t *o, const char *s)
{
    out_t t = {0};
    size_t n = ucs2(&t, s);
    u8(o, (unsigned)n);
    put(o, t.b, t.n);
    free(t.b);
}

static void usvarchar(out_t *o, const char *s)
{
    out_t t = {0};
    size_t n = ucs2(&t, s);
    u16(o, (unsigned)n);
    put(o, t.b, t.n);
    free(t.b);
}

/* A reader over one message; ok turns false past the end. */
typedef struct in {
    const unsigned char *p;
    size_t n, at;
    bool ok;
} in_t;

static const unsigned char *take(in_t *r, size_t n)
{
    if (!r->ok || r->at + n > r->n) {
        r->ok = false;
        return NULL;
    }
    r->at += n;
    return r->p + r->at - n;
}

static unsigned long long le(in_t *r, size_t n)
{
    const unsigned char *p = take(r, n);
    unsigned long long v = 0;
    for (size_t i = 0; p && i < n; i++)
        v |= (unsigned long long)p[i] << (8 * i);
    return v;
}

/* ---- packets --------------------------------------------------------------- */

static bool read_full(int fd, void *buf, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k <= 0)
            return false;
        got += (size_t)k;
    }
    return true;
}

/* One message (every packet up to end-of-message). */
static bool read_msg(int fd, unsigned char *type, out_t *msg)
{
    unsigned char h[8];
    msg->n = 0;
    do {
        if (!read_full(fd, h, 8))
            return false;
        size_t len = ((size_t)h[2] << 8) | h[3];
        if (len < 8)
            return false;
        unsigned char *body = malloc(len - 8 + 1);
        if (!read_full(fd, body, len - 8)) {
            free(body);
            return false;
        }
        put(msg, body, len - 8);
        free(body);
        *type = h[0];
    } while (!(h[1] & 0x01));
    return true;
}

static bool send_msg(int fd, const out_t *o)
{
    size_t at = 0;
    unsigned char id = 1;
    do {
        size_t chunk = o->n - at > PKT_MAX - 8 ? PKT_MAX - 8 : o->n - at;
        unsigned char pkt[PKT_MAX] = {0x04, at + chunk == o->n ? 0x01 : 0x00,
                                      (unsigned char)((chunk + 8) >> 8), (unsigned char)(chunk + 8),
                                      0, 55, id++, 0};
        if (chunk)
            memcpy(pkt + 8, o->b + at, chunk);
        /* One write per packet: a header sent alone waits on the peer's delayed ACK. */
        if (write(fd, pkt, chunk + 8) != (ssize_t)(chunk + 8))
            return false;
        at += chunk;
    } while (at < o->n);
    return true;
}

/* ---- tokens ---------------------------------------------------------------- */

static const unsigned char COLLATION[5] = {0x09, 0x04, 0xD0, 0x00, 0x34};

static void done(out_t *o, unsigned token, unsigned status, long long count)
{
    u8(o, token);
    u16(o, status | (count >= 0 ? 0x10 : 0));
    u16(o, 0xC1);
    u64(o, count >= 0 ? (unsigned long long)count : 0);
}

static void envchange_str(out_t *o, unsigned type, const char *nv, const char *ov)
{
    out_t t = {0};
    u8(&t, type);
    bvarchar(&t, nv);
    bvarchar(&t, ov);
    u8(o, 0xE3);
    u16(o, (unsigned)t.n);
    put(o, t.b, t.n);
    free(t.b);
}

/* ENVCHANGE with byte values (collation, transaction descriptors); len 0 = empty. */
static void envchange_bytes(out_t *o, unsigned type, const void *nv, size_t nl, const void *ov,
                            size_t ol)
{
    u8(o, 0xE3);
    u16(o, (unsigned)(3 + nl + ol));
    u8(o, type);
    u8(o, (unsigned)nl);
    put(o, nv, nl);
    u8(o, (unsigned)ol);
    put(o, ov, ol);
}

static void error_token(out_t *o, int number, const char *msg)
{
    out_t t = {0};
    u32(&t, (unsigned long)number);
    u8(&t, 1);  /* state */
    u8(&t, 16); /* class: a user error */
    usvarchar(&t, msg);
    bvarchar(&t, "tdsrec");
    bvarchar(&t, "");
    u32(&t, 1);
    u8(o, 0xAA);
    u16(o, (unsigned)t.n);
    put(o, t.b, t.n);
    free(t.b);
}

/* COLMETADATA and ROWs of a result: types "I" bigint, "N" nvarchar(4000), "M" nvarchar(max). */
static void result(out_t *o, const char *columns, char *const *cells, size_t rows, size_t ncols)
{
    char *cols = strdup(columns), *save = NULL;
    char types[64];
    size_t k = 0;
    u8(o, 0x81);
    u16(o, (unsigned)ncols);
    for (char *c = strtok_r(cols, ",", &save); c && k < ncols; c = strtok_r(NULL, ",", &save)) {
        types[k++] = c[0];
        u32(o, 0);
        u16(o, 0x0001); /* nullable */
        if (c[0] == 'I') {
            u8(o, 0x26);
            u8(o, 8);
        } else {
            u8(o, 0xE7);
            u16(o, c[0] == 'M' ? 0xFFFF : 8000);
            put(o, COLLATION, 5);
        }
        bvarchar(o, c[1] == ':' ? c + 2 : "");
    }
    free(cols);
    for (size_t r = 0; r < rows; r++) {
        u8(o, 0xD1);
        for (size_t c = 0; c < ncols; c++) {
            const char *v = cells[r * ncols + c];
            if (types[c] == 'I') {
                if (!v) {
                    u8(o, 0);
                    continue;
                }
                u8(o, 8);
                u64(o, (unsigned long long)strtoll(v, NULL, 10));
                continue;
            }
            out_t t = {0};
            if (v)
                ucs2(&t, v);
            if (types[c] == 'M') {
                u64(o, v ? t.n : ~0ULL);
                if (v && t.n) {
                    u32(o, (unsigned long)t.n);
                    put(o, t.b, t.n);
                }
                if (v)
                    u32(o, 0);
            } else {
                u16(o, v ? (unsigned)t.n : 0xFFFF);
                put(o, t.b, t.n);
            }
            free(t.b);
        }
    }
}

/* ---- requests -------------------------------------------------------------- */

typedef struct prepared {
    int handle;
    char *sql, *decl;
} prepared_t;

typedef struct conn {
    tdsrec_t *rec;
    int fd, num;
    int trancount;
    unsigned long long desc;
    bool after_begin, xact_abort;
    prepared_t prep[256];
    size_t nprep;
} conn_t;

static void record(conn_t *c, tdsrec_event_t *e)
{
    tdsrec_t *r = c->rec;
    e->conn = c->num;
    e->open = c->trancount ? c->desc : 0;
    e->trancount = c->trancount;
    e->after_begin = c->after_begin;
    pthread_mutex_lock(&r->mu);
    if (r->nev == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 256;
        r->ev = realloc(r->ev, r->cap * sizeof(*r->ev));
    }
    r->ev[r->nev++] = *e;
    if (r->log) {
        static const char *const kinds[] = {"BATCH", "RPC", "TM"};
        fprintf(r->log, "conn=%d hdr=%llx open=%llx trancount=%d %s", e->conn, e->hdr, e->open,
                e->trancount, kinds[e->kind]);
        if (e->proc)
            fprintf(r->log, " %s", e->proc);
        if (e->kind == TDSREC_TM)
            fprintf(r->log, " %s%s", e->sql, e->tm_cont ? " (and begin)" : "");
        else
            fprintf(r->log, " sql=[%s]", e->sql ? e->sql : "");
        if (e->decl)
            fprintf(r->log, " decl=[%s]", e->decl);
        if (e->types)
            fprintf(r->log, " types=[%s]", e->types);
        fputc('\n', r->log);
        fflush(r->log);
    }
    pthread_mutex_unlock(&r->mu);
}

/* ALL_HEADERS: the transaction descriptor of the request. */
static unsigned long long all_headers(in_t *r)
{
    size_t start = r->at, total = (size_t)le(r, 4);
    unsigned long long desc = 0;
    while (r->ok && r->at < start + total) {
        size_t hl = (size_t)le(r, 4), at = r->at;
        unsigned type = (unsigned)le(r, 2);
        if (type == 2)
            desc = le(r, 8);
        r->at = at + hl - 4;
    }
    r->at = start + total;
    return desc;
}

static void txn_begin(conn_t *c, out_t *o)
{
    if (c->trancount++ == 0) {
        c->desc = ++c->rec->next_desc;
        unsigned char d[8];
        for (int i = 0; i < 8; i++)
            d[i] = (unsigned char)(c->desc >> (8 * i));
        envchange_bytes(o, 8, d, 8, NULL, 0);
    }
}

/* COMMIT (type 9) or ROLLBACK (type 10) of the open transaction. */
static void txn_end(conn_t *c, out_t *o, unsigned type)
{
    unsigned char d[8];
    for (int i = 0; i < 8; i++)
        d[i] = (unsigned char)(c->desc >> (8 * i));
    c->trancount = 0;
    envchange_bytes(o, type, NULL, 0, d, 8);
}

static const rule_t *find_rule(tdsrec_t *r, const char *sql)
{
    const rule_t *hit = NULL;
    pthread_mutex_lock(&r->mu);
    for (size_t i = r->nrules; i-- > 0 && !hit;)
        if (strstr(sql, r->rules[i].match))
            hit = &r->rules[i];
    pthread_mutex_unlock(&r->mu);
    return hit;
}

/*
 * The answer to one statement: a rule, or the defaults (the server's
 * own @@TRANCOUNT, @@spid, the applock's 1, the batch claims' OUTPUT
 * echoing every row they were given, the HTTP batch finish updating every
 * row it names, one row for other DML). Returns the
 * row count for the DONE, -1 for none; *failed when it answered an error.
 */
static long long answer(conn_t *c, out_t *o, const char *sql, char *const *vals, size_t nvals,
                        bool *failed)
{
    const rule_t *ru = find_rule(c->rec, sql);
    char buf[32];
    *failed = false;
    if (strstr(sql, "XACT_ABORT ON"))
        c->xact_abort = true;
    if (ru && ru->errmsg) {
        error_token(o, ru->errnum, ru->errmsg);
        if (c->xact_abort && c->trancount) /* XACT_ABORT ON: the error rolls back */
            txn_end(c, o, 10);
        *failed = true;
        return -1;
    }
    if (ru) {
        if (ru->columns[0]) /* "": a row count alone, no result */
            result(o, ru->columns, ru->cells, ru->rows, ru->ncols);
        return ru->count >= 0 ? ru->count : (long long)ru->rows;
    }
    if (strstr(sql, "@@TRANCOUNT")) {
        snprintf(buf, sizeof(buf), "%d", c->trancount);
        char *cell[1] = {buf};
        result(o, "I:", cell, 1, 1);
        return 1;
    }
    if (strcasestr(sql, "@@spid")) {
        char *cell[1] = {"55"};
        result(o, "I:", cell, 1, 1);
        return 1;
    }
    if (strstr(sql, "sp_getapplock")) {
        char *cell[1] = {"1"};
        result(o, "I:", cell, 1, 1);
        return 1;
    }
    if (strcasecmp(sql, "BEGIN TRANSACTION") == 0) {
        txn_begin(c, o);
        return -1;
    }
    if (strcasecmp(sql, "COMMIT TRANSACTION") == 0) {
        if (c->trancount)
            txn_end(c, o, 9);
        return -1;
    }
    if (strstr(sql, "OUTPUT inserted.consumer, inserted.message_id")) {
        size_t rows = nvals / 12;
        char **cells = calloc(rows * 2 + 1, sizeof(*cells));
        for (size_t i = 0; i < rows; i++) {
            cells[2 * i] = vals[12 * i];
            cells[2 * i + 1] = vals[12 * i + 1];
        }
        result(o, "N:consumer,N:message_id", cells, rows, 2);
        free(cells);
        return (long long)rows;
    }
    if (strstr(sql, "OUTPUT inserted.message_id SELECT")) { /* the HTTP claim: 10 a row */
        size_t rows = nvals / 10;
        char **cells = calloc(rows + 1, sizeof(*cells));
        for (size_t i = 0; i < rows; i++)
            cells[i] = vals[10 * i + 1];
        result(o, "N:message_id", cells, rows, 1);
        free(cells);
        return (long long)rows;
    }
    if (strncmp(sql, "UPDATE x SET status = v.s", 25) == 0) /* the HTTP finish: 7 a row + 1 */
        return nvals ? (long long)((nvals - 1) / 7) : 0;
    if (strncasecmp(sql, "INSERT", 6) == 0 || strncasecmp(sql, "UPDATE", 6) == 0 ||
        strncasecmp(sql, "DELETE", 6) == 0)
        return 1;
    return -1;
}

/* One parameter: its wire type as text (types) and its value as text (NULL for NULL). */
static char *param(in_t *r, out_t *types)
{
    size_t nl = (size_t)le(r, 1);
    take(r, nl * 2); /* name */
    le(r, 1);        /* status */
    unsigned t = (unsigned)le(r, 1);
    char desc[64] = "?", *val = NULL;
    if (t == 0x26 || t == 0x6D || t == 0x68) { /* INTN, FLTN, BITN */
        size_t len = (size_t)le(r, 1), vl = (size_t)le(r, 1);
        snprintf(desc, sizeof(desc), "%s%zu", t == 0x26 ? "int" : t == 0x6D ? "float" : "bit",
                 len * 8);
        if (vl && t == 0x6D) {
            const unsigned char *p = take(r, vl);
            double d = 0;
            if (p && vl == 8)
                memcpy(&d, p, 8);
            val = malloc(32);
            snprintf(val, 32, "%g", d);
        } else if (vl) {
            unsigned long long v = le(r, vl);
            long long sv = vl == 8 ? (long long)v : vl == 4 ? (int32_t)v : (long long)v;
            val = malloc(32);
            snprintf(val, 32, "%lld", sv);
        }
    } else if (t == 0xE7 || t == 0xA7 || t == 0xEF || t == 0xAF) { /* (N)(VAR)CHAR */
        size_t max = (size_t)le(r, 2);
        take(r, 5);
        bool n = t == 0xE7 || t == 0xEF;
        if (max == 0xFFFF)
            snprintf(desc, sizeof(desc), "%s(max)", n ? "nvarchar" : "varchar");
        else
            snprintf(desc, sizeof(desc), "%s(%zu)", n ? "nvarchar" : "varchar", n ? max / 2 : max);
        out_t v = {0};
        bool null = false;
        if (max == 0xFFFF) { /* PLP */
            unsigned long long total = le(r, 8);
            null = total == ~0ULL;
            for (size_t cl; !null && r->ok && (cl = (size_t)le(r, 4)) != 0;)
                put(&v, take(r, cl), r->ok ? cl : 0);
        } else {
            size_t vl = (size_t)le(r, 2);
            null = vl == 0xFFFF;
            if (!null && r->ok) {
                const unsigned char *p = take(r, vl);
                if (p)
                    put(&v, p, vl);
            }
        }
        if (!null) {
            if (n) {
                val = utf8_of(v.b ? v.b : (const unsigned char *)"", v.n / 2);
            } else {
                val = calloc(1, v.n + 1);
                if (v.n)
                    memcpy(val, v.b, v.n);
            }
        }
        free(v.b);
    } else if (t == 0x63 || t == 0x23) { /* NTEXT, TEXT: FreeTDS's statement texts */
        le(r, 4);
        take(r, 5);
        size_t vl = (size_t)le(r, 4);
        const unsigned char *p = take(r, vl);
        snprintf(desc, sizeof(desc), "%s", t == 0x63 ? "ntext" : "text");
        if (p)
            val = t == 0x63 ? utf8_of(p, vl / 2) : strndup((const char *)p, vl);
    } else if (t == 0x2A) { /* DATETIME2N */
        unsigned scale = (unsigned)le(r, 1);
        size_t vl = (size_t)le(r, 1);
        take(r, vl);
        snprintf(desc, sizeof(desc), "datetime2(%u)", scale);
        if (vl)
            val = strdup("<datetime2>");
    } else if (t == 0x6F) { /* DATETIMN */
        le(r, 1);
        size_t vl = (size_t)le(r, 1);
        take(r, vl);
        snprintf(desc, sizeof(desc), "datetime");
        if (vl)
            val = strdup("<datetime>");
    } else {
        snprintf(desc, sizeof(desc), "type0x%02x", t);
        r->ok = false;
    }
    if (types) {
        if (types->n)
            u8(types, ',');
        put(types, desc, strlen(desc));
    }
    return val;
}

static char *joined(out_t *o)
{
    u8(o, 0);
    return (char *)o->b;
}

static prepared_t *prepared_find(conn_t *c, int handle)
{
    for (size_t i = 0; i < c->nprep; i++)
        if (c->prep[i].handle == handle)
            return &c->prep[i];
    return NULL;
}

/* One RPC of a request: records it and appends its answer to o. false on a malformed request. */
static bool rpc_one(conn_t *c, in_t *r, unsigned long long hdr, out_t *o)
{
    tdsrec_event_t e = {.kind = TDSREC_RPC, .hdr = hdr};
    unsigned nl = (unsigned)le(r, 2);
    int id = 0;
    char name[64] = "";
    if (nl == 0xFFFF) {
        id = (int)le(r, 2);
        snprintf(name, sizeof(name), "%s",
                 id == 10   ? "sp_executesql"
                 : id == 11 ? "sp_prepare"
                 : id == 12 ? "sp_execute"
                 : id == 13 ? "sp_prepexec"
                 : id == 15 ? "sp_unprepare"
                            : "sp_other");
    } else {
        const unsigned char *p = take(r, nl * 2);
        char *s = p ? utf8_of(p, nl) : strdup("");
        snprintf(name, sizeof(name), "%s", s);
        free(s);
    }
    le(r, 2); /* option flags */
    e.proc = strdup(name);
    /* The leading parameters of each procedure, then the values. */
    int lead = !strcmp(name, "sp_executesql") ? 2
               : !strcmp(name, "sp_prepexec") ? 3
               : !strcmp(name, "sp_prepare")  ? 4
               : !strcmp(name, "sp_execute") || !strcmp(name, "sp_unprepare") ? 1
                                                                              : 0;
    char *lv[4] = {0};
    for (int i = 0; i < lead && r->ok; i++)
        lv[i] = param(r, NULL);
    out_t types = {0};
    char **vals = calloc(TDSREC_MAXP, sizeof(*vals));
    size_t nv = 0;
    while (r->ok && r->at < r->n && r->p[r->at] != 0x80 && r->p[r->at] != 0xFF && nv < TDSREC_MAXP)
        vals[nv++] = param(r, &types);
    if (!r->ok) {
        for (int i = 0; i < 4; i++)
            free(lv[i]);
        for (size_t i = 0; i < nv; i++)
            free(vals[i]);
        free(vals);
        free(types.b);
        free(e.proc);
        return false;
    }
    int handle = 0;
    if (!strcmp(name, "sp_executesql")) {
        e.sql = lv[0];
        e.decl = lv[1];
    } else if (!strcmp(name, "sp_prepexec") || !strcmp(name, "sp_prepare")) {
        e.decl = lv[1];
        e.sql = lv[2];
        free(lv[0]);
        free(lv[3]);
        handle = ++c->rec->next_handle;
        if (c->nprep < 256)
            c->prep[c->nprep++] = (prepared_t){handle, strdup(e.sql ? e.sql : ""),
                                               strdup(e.decl ? e.decl : "")};
    } else if (lv[0]) {
        prepared_t *p = prepared_find(c, atoi(lv[0]));
        e.sql = strdup(p ? p->sql : "<unknown handle>");
        e.decl = strdup(p ? p->decl : "");
        free(lv[0]);
    }
    e.types = joined(&types);
    e.values = vals;
    e.nvalues = nv;
    record(c, &e);
    bool failed = false;
    long long count = -1;
    if (strcmp(name, "sp_prepare") && strcmp(name, "sp_unprepare"))
        count = answer(c, o, e.sql ? e.sql : "", vals, nv, &failed);
    if (count >= 0 || failed)
        done(o, 0xFF, 0x01 | (failed ? 0x02 : 0), failed ? -1 : count); /* DONE_MORE */
    u8(o, 0x79); /* RETURNSTATUS */
    u32(o, failed ? 1 : 0);
    if (handle) { /* RETURNVALUE: the handle, output parameter 1 */
        u8(o, 0xAC);
        u16(o, 0);
        bvarchar(o, "@handle");
        u8(o, 1);
        u32(o, 0);
        u16(o, 0);
        u8(o, 0x26);
        u8(o, 4);
        u8(o, 4);
        u32(o, (unsigned long)handle);
    }
    return true;
}

static void on_rpc(conn_t *c, in_t *r, out_t *o)
{
    unsigned long long hdr = all_headers(r);
    for (;;) {
        if (!rpc_one(c, r, hdr, o)) {
            error_token(o, 8009, "tdsrec: an RPC it cannot parse");
            done(o, 0xFE, 0x02, -1);
            return;
        }
        bool more = r->at < r->n;
        done(o, 0xFE, more ? 0x01 : 0, -1);
        if (!more)
            return;
        r->at++; /* the batch flag between RPCs */
    }
}

static void on_batch(conn_t *c, in_t *r, out_t *o)
{
    tdsrec_event_t e = {.kind = TDSREC_BATCH};
    e.hdr = all_headers(r);
    e.sql = r->ok ? utf8_of(r->p + r->at, (r->n - r->at) / 2) : strdup("");
    record(c, &e);
    bool failed;
    long long count = answer(c, o, e.sql, NULL, 0, &failed);
    done(o, 0xFD, failed ? 0x02 : 0, failed ? -1 : count);
}

static void on_tm(conn_t *c, in_t *r, out_t *o)
{
    tdsrec_event_t e = {.kind = TDSREC_TM};
    e.hdr = all_headers(r);
    e.tm = (int)le(r, 2);
    if (e.tm == 5) {
        le(r, 1);
        take(r, le(r, 1) * 2);
    } else if (e.tm == 7 || e.tm == 8) {
        take(r, le(r, 1) * 2);
        e.tm_cont = (le(r, 1) & 1) != 0;
    }
    e.sql = strdup(e.tm == 5 ? "BEGIN" : e.tm == 7 ? "COMMIT" : e.tm == 8 ? "ROLLBACK" : "OTHER");
    record(c, &e);
    c->after_begin = true;
    if (e.tm == 5) {
        txn_begin(c, o);
    } else if ((e.tm == 7 || e.tm == 8) && c->trancount == 0) {
        /* What SQL Server answers with no transaction open (3902, 3903). */
        error_token(o, e.tm == 7 ? 3902 : 3903,
                    e.tm == 7 ? "The COMMIT TRANSACTION request has no corresponding BEGIN "
                                "TRANSACTION."
                              : "The ROLLBACK TRANSACTION request has no corresponding BEGIN "
                                "TRANSACTION.");
        done(o, 0xFD, 0x02, -1);
        return;
    } else if (e.tm == 7 || e.tm == 8) {
        txn_end(c, o, e.tm == 7 ? 9 : 10);
        if (e.tm_cont)
            txn_begin(c, o);
    }
    done(o, 0xFD, 0, -1);
}

static void on_prelogin(out_t *o)
{
    static const unsigned char opts[] = {
        0x00, 0, 26, 0, 6, /* VERSION */
        0x01, 0, 32, 0, 1, /* ENCRYPTION */
        0x02, 0, 33, 0, 1, /* INSTOPT */
        0x03, 0, 34, 0, 4, /* THREADID */
        0x04, 0, 38, 0, 1, /* MARS */
        0xFF,
    };
    static const unsigned char data[] = {15, 0, 0x07, 0xD0, 0, 0, /* 15.0.2000 */
                                         0x02,                    /* ENCRYPT_NOT_SUP */
                                         0, 0, 0, 0, 0, 0};
    put(o, opts, sizeof(opts));
    put(o, data, sizeof(data));
}

static void on_login(out_t *o)
{
    envchange_str(o, 1, "inboxd", "master");
    envchange_bytes(o, 7, COLLATION, 5, NULL, 0);
    envchange_str(o, 2, "us_english", "");
    envchange_str(o, 4, "4096", "4096");
    out_t t = {0};
    u8(&t, 1);                                       /* interface: SQL */
    put(&t, (const unsigned char[]){0x74, 0, 0, 4}, 4); /* TDS 7.4 */
    bvarchar(&t, "Microsoft SQL Server");
    put(&t, (const unsigned char[]){15, 0, 0x07, 0xD0}, 4);
    u8(o, 0xAD);
    u16(o, (unsigned)t.n);
    put(o, t.b, t.n);
    free(t.b);
    done(o, 0xFD, 0, -1);
}

static void *serve(void *arg)
{
    conn_t *c = arg;
    out_t msg = {0};
    unsigned char type;
    while (read_msg(c->fd, &type, &msg)) {
        out_t o = {0};
        in_t r = {msg.b, msg.n, 0, true};
        switch (type) {
        case 0x12:
            on_prelogin(&o);
            break;
        case 0x10:
            on_login(&o);
            break;
        case 0x01:
            on_batch(c, &r, &o);
            break;
        case 0x03:
            on_rpc(c, &r, &o);
            break;
        case 0x0E:
            on_tm(c, &r, &o);
            break;
        case 0x06: /* attention: acknowledge */
            done(&o, 0xFD, 0x20, -1);
            break;
        default:
            error_token(&o, 8009, "tdsrec: a packet type it does not know");
            done(&o, 0xFD, 0x02, -1);
        }
        bool sent = send_msg(c->fd, &o);
        free(o.b);
        if (!sent)
            break;
    }
    free(msg.b);
    for (size_t i = 0; i < c->nprep; i++) {
        free(c->prep[i].sql);
        free(c->prep[i].decl);
    }
    close(c->fd);
    free(c);
    return NULL;
}

static void *accept_loop(void *arg)
{
    tdsrec_t *r = arg;
    for (;;) {
        int fd = accept(r->lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        pthread_mutex_lock(&r->mu);
        if (r->stopping || r->nthreads == 64) {
            pthread_mutex_unlock(&r->mu);
            close(fd);
            if (r->stopping)
                return NULL;
            continue;
        }
        conn_t *c = calloc(1, sizeof(*c));
        c->rec = r;
        c->fd = fd;
        c->num = ++r->nconn;
        r->fds[r->nthreads] = fd;
        pthread_create(&r->threads[r->nthreads++], NULL, serve, c);
        pthread_mutex_unlock(&r->mu);
    }
}

tdsrec_t *tdsrec_start(const char *log_path)
{
    tdsrec_t *r = calloc(1, sizeof(*r));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    pthread_mutex_init(&r->mu, NULL);
    r->lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(r->lfd, 16) != 0 || getsockname(r->lfd, (struct sockaddr *)&a, &al) != 0) {
        if (r->lfd >= 0)
            close(r->lfd);
        free(r);
        return NULL;
    }
    r->port = ntohs(a.sin_port);
    r->log = log_path ? fopen(log_path, "w") : NULL;
    pthread_create(&r->acceptor, NULL, accept_loop, r);
    return r;
}

int tdsrec_port(const tdsrec_t *r)
{
    return r->port;
}

static void event_free(tdsrec_event_t *e)
{
    free(e->proc);
    free(e->sql);
    free(e->decl);
    free(e->types);
    for (size_t i = 0; i < e->nvalues; i++)
        free(e->values[i]);
    free(e->values);
}

void tdsrec_stop(tdsrec_t *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    pthread_mutex_unlock(&r->mu);
    shutdown(r->lfd, SHUT_RDWR);
    close(r->lfd);
    pthread_join(r->acceptor, NULL);
    for (size_t i = 0; i < r->nthreads; i++) {
        shutdown(r->fds[i], SHUT_RDWR);
        pthread_join(r->threads[i], NULL);
    }
    for (size_t i = 0; i < r->nev; i++)
        event_free(&r->ev[i]);
    free(r->ev);
    for (size_t i = 0; i < r->nrules; i++) {
        rule_t *ru = &r->rules[i];
        for (size_t k = 0; k < ru->rows * ru->ncols; k++)
            free(ru->cells[k]);
        free(ru->cells);
        free(ru->match);
        free(ru->columns);
        free(ru->errmsg);
    }
    free(r->rules);
    if (r->log)
        fclose(r->log);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static rule_t *rule_new(tdsrec_t *r, const char *match)
{
    r->rules = realloc(r->rules, (r->nrules + 1) * sizeof(*r->rules));
    rule_t *ru = &r->rules[r->nrules++];
    memset(ru, 0, sizeof(*ru));
    ru->match = strdup(match);
    return ru;
}

void tdsrec_rule(tdsrec_t *r, const char *match, const char *columns, const char *const *cells,
                 size_t rows, long long count)
{
    pthread_mutex_lock(&r->mu);
    rule_t *ru = rule_new(r, match);
    ru->columns = strdup(columns);
    ru->ncols = 1;
    for (const char *p = columns; *p; p++)
        ru->ncols += *p == ',';
    ru->rows = rows;
    ru->count = count;
    ru->cells = calloc(rows * ru->ncols + 1, sizeof(char *));
    for (size_t k = 0; k < rows * ru->ncols; k++)
        ru->cells[k] = cells[k] ? strdup(cells[k]) : NULL;
    pthread_mutex_unlock(&r->mu);
}

void tdsrec_rule_error(tdsrec_t *r, const char *match, int number, const char *message)
{
    pthread_mutex_lock(&r->mu);
    rule_t *ru = rule_new(r, match);
    ru->errnum = number;
    ru->errmsg = strdup(message);
    pthread_mutex_unlock(&r->mu);
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

tdsrec_event_t *tdsrec_events(tdsrec_t *r, size_t *n)
{
    pthread_mutex_lock(&r->mu);
    tdsrec_event_t *ev = calloc(r->nev + 1, sizeof(*ev));
    for (size_t i = 0; i < r->nev; i++) {
        ev[i] = r->ev[i];
        ev[i].proc = dup_or_null(r->ev[i].proc);
        ev[i].sql = dup_or_null(r->ev[i].sql);
        ev[i].decl = dup_or_null(r->ev[i].decl);
        ev[i].types = dup_or_null(r->ev[i].types);
        ev[i].values = calloc(r->ev[i].nvalues + 1, sizeof(char *));
        for (size_t k = 0; k < r->ev[i].nvalues; k++)
            ev[i].values[k] = dup_or_null(r->ev[i].values[k]);
    }
    *n = r->nev;
    pthread_mutex_unlock(&r->mu);
    return ev;
}

void tdsrec_events_free(tdsrec_event_t *ev, size_t n)
{
    for (size_t i = 0; i < n; i++)
        event_free(&ev[i]);
    free(ev);
}
