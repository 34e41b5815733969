/*
 * fx_blob.c - Get Blob over libcurl (fx_blob.h): the request's headers
 * (x-ms-version, x-ms-date, the authorisation), the size checked against
 * max_bytes when the headers end (the body never read when its
 * Content-Length is above it) and again on every body chunk, one
 * buffer of the announced size, the ETag and SHA-256 checked at the end.
 *
 * thread: the caller's (one easy handle per call).
 */
#include "fx_blob.h"
#include "ib_tls.h"

#include <ctype.h>
#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define AUTH_MAX 512

/* The state of one fetch, shared by the callbacks. */
typedef struct fetch {
    const fx_blob_req_t *req;
    fx_blob_t *out;
    long long announced; /* Content-Length; -1 when absent */
    size_t cap;
    bool started;   /* the body's first chunk came (admit asked) */
    bool refused;   /* a callback stopped the transfer: out->res says why */
} fetch_t;

const char *fx_blob_result_name(fx_blob_result_t r)
{
    static const char *const n[] = {"ok",      "missing", "refused",  "too_large",
                                    "changed", "no_room", "transient"};
    return (unsigned)r < sizeof n / sizeof n[0] ? n[r] : "?";
}

void fx_blob_free(fx_blob_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
}

/* What max_bytes stands for, in an error. */
static const char *max_name(const fx_blob_req_t *rq)
{
    return rq->max_name ? rq->max_name : "claim_check.max_bytes";
}

static size_t on_header(char *buf, size_t size, size_t n, void *ud)
{
    fetch_t *f = ud;
    size_t len = size * n;
    char line[256];
    if (len >= 9 && strncmp(buf, "HTTP/", 5) == 0) { /* a new answer (after a 100) */
        const char *sp = memchr(buf, ' ', len);
        f->announced = -1;
        f->out->etag[0] = '\0';
        f->out->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        return len;
    }
    if (len <= 2 && f->out->status >= 200 && f->out->status < 300 &&
        f->announced > (long long)f->req->max_bytes) { /* the headers' end: refused unread */
        f->out->res = FX_BLOB_TOO_LARGE;
        ib_error_set(&f->out->err, IB_E_INVAL, IB_CLASS_PERMANENT,
                     "the blob's Content-Length %lld is above %s %zu", f->announced,
                     max_name(f->req), f->req->max_bytes);
        f->refused = true;
        return 0;
    }
    if (len >= sizeof line)
        return len;
    memcpy(line, buf, len);
    line[len] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    if (strncasecmp(line, "content-length:", 15) == 0) {
        f->announced = strtoll(line + 15, NULL, 10);
    } else if (strncasecmp(line, "etag:", 5) == 0) {
        const char *v = line + 5 + strspn(line + 5, " \t\"");
        snprintf(f->out->etag, sizeof f->out->etag, "%.*s", (int)strcspn(v, "\""), v);
    } else if (strncasecmp(line, "retry-after:", 12) == 0) {
        long s = strtol(line + 12, NULL, 10);
        f->out->retry_after_ms = s > 0 ? s * 1000L : 0;
    }
    return len;
}

/* Before the first body byte of a 2xx: the size against the bound, then admit, then the buffer. */
static bool body_start(fetch_t *f)
{
    const fx_blob_req_t *rq = f->req;
    fx_blob_t *o = f->out;
    f->started = true;
    if (f->announced > (long long)rq->max_bytes) {
        o->res = FX_BLOB_TOO_LARGE;
        ib_error_set(&o->err, IB_E_INVAL, IB_CLASS_PERMANENT,
                     "the blob's Content-Length %lld is above %s %zu", f->announced,
                     max_name(rq), rq->max_bytes);
        return false;
    }
    f->cap = f->announced >= 0 ? (size_t)f->announced : rq->max_bytes;
    if (rq->admit && !rq->admit(rq->admit_ctx, f->cap)) {
        o->res = FX_BLOB_NO_ROOM;
        ib_error_set(&o->err, IB_E_AGAIN, IB_CLASS_TRANSIENT,
                     "no room for the blob's %zu bytes in servicebus.max_held_mb now", f->cap);
        return false;
    }
    o->reserved = rq->admit ? f->cap : 0;
    /* An unannounced size grows from 64 KiB, never past max_bytes. */
    size_t first = f->announced >= 0 ? f->cap : (f->cap < 65536 ? f->cap : 65536);
    if (!(o->data = malloc(first + 1))) {
        o->res = FX_BLOB_TRANSIENT;
        ib_error_set(&o->err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory for the blob");
        return false;
    }
    f->cap = first;
    return true;
}

static bool grow(fetch_t *f, size_t need)
{
    size_t cap = f->cap * 2 > need ? f->cap * 2 : need;
    if (cap > f->req->max_bytes)
        cap = f->req->max_bytes;
    char *d = realloc(f->out->data, cap + 1);
    if (!d)
        return false;
    f->out->data = d;
    f->cap = cap;
    return true;
}

static size_t on_body(char *buf, size_t size, size_t n, void *ud)
{
    fetch_t *f = ud;
    fx_blob_t *o = f->out;
    size_t len = size * n;
    if (o->status < 200 || o->status > 299)
        return len; /* an error's body: not kept */
    if (!f->started && !body_start(f))
        goto stop;
    if (o->len + len > f->req->max_bytes ||
        (f->announced >= 0 && o->len + len > (size_t)f->announced)) {
        o->res = FX_BLOB_TOO_LARGE;
        ib_error_set(&o->err, IB_E_INVAL, IB_CLASS_PERMANENT,
                     "the blob's body ran past %s (%zu bytes)",
                     f->announced >= 0 && (size_t)f->announced < f->req->max_bytes
                         ? "its Content-Length"
                         : max_name(f->req),
                     f->announced >= 0 && (size_t)f->announced < f->req->max_bytes
                         ? (size_t)f->announced
                         : f->req->max_bytes);
        goto stop;
    }
    if (o->len + len > f->cap && !grow(f, o->len + len)) {
        o->res = FX_BLOB_TRANSIENT;
        ib_error_set(&o->err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory for the blob");
        goto stop;
    }
    memcpy(o->data + o->len, buf, len);
    o->len += len;
    return len;
stop:
    f->refused = true;
    return 0; /* CURLE_WRITE_ERROR: the rest is never read */
}

/* ---- Shared Key ------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void pct_decode(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (*r == '%' && isxdigit((unsigned char)r[1]) && isxdigit((unsigned char)r[2])) {
            char h[3] = {r[1], r[2], 0};
            *w++ = (char)strtol(h, NULL, 16);
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

/*
 * The canonicalized resource: "/account/path", then each query parameter
 * as "\nname:value" (name in lower case, value decoded), sorted by name.
 */
static bool canon_resource(const char *url, const char *account, char *out, size_t size)
{
    const char *a = strstr(url, "://");
    if (!a)
        return false;
    const char *path = a + 3 + strcspn(a + 3, "/?#");
    size_t plen = strcspn(path, "?#");
    int w = snprintf(out, size, "/%s%.*s", account, (int)plen, plen ? path : "/");
    if (w < 0 || (size_t)w >= size)
        return false;
    if (path[plen] != '?')
        return true;
    char *q = strndup(path + plen + 1, strcspn(path + plen + 1, "#"));
    char *items[64];
    size_t n = 0;
    for (char *save = NULL, *t = strtok_r(q, "&", &save); t && n < 64; t = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(t, '=');
        for (char *c = t; *c && c != eq; c++)
            *c = (char)tolower((unsigned char)*c);
        if (eq)
            *eq = ':';
        pct_decode(t);
        items[n++] = t;
    }
    qsort(items, n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < n; i++) {
        size_t used = strlen(out);
        int k = snprintf(out + used, size - used, "\n%s%s", items[i], strchr(items[i], ':') ? "" : ":");
        if (k < 0 || (size_t)k >= size - used) {
            free(q);
            return false;
        }
    }
    free(q);
    return true;
}

bool fx_blob_sign(const fx_blob_sig_t *sg, const char *account, const char *key, char *out,
                  size_t size)
{
    unsigned char k[128], mac[EVP_MAX_MD_SIZE], b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
    unsigned int maclen = 0;
    size_t klen = strlen(key);
    char res[2048], sts[2800], clen[32] = "";
    if (klen == 0 || klen % 4 || klen / 4 * 3 > sizeof k)
        return false;
    int dl = EVP_DecodeBlock(k, (const unsigned char *)key, (int)klen);
    if (dl < 0)
        return false;
    dl -= (key[klen - 1] == '=') + (key[klen - 2] == '=');
    if (!canon_resource(sg->url, account, res, sizeof res))
        return false;
    if (sg->content_length) /* empty for 0 (versions from 2015-02-21) */
        snprintf(clen, sizeof clen, "%zu", sg->content_length);
    /* VERB, Content-Encoding, -Language, -Length, -MD5, -Type, Date, If-Modified-Since,
     * If-Match, If-None-Match, If-Unmodified-Since, Range, the x-ms- headers, the resource. */
    int n = snprintf(sts, sizeof sts, "%s\n\n\n%s\n\n%s\n\n\n\n\n\n\n%sx-ms-date:%s\nx-ms-version:%s\n%s",
                     sg->verb, clen, sg->content_type ? sg->content_type : "",
                     sg->ms_headers ? sg->ms_headers : "", sg->date, sg->version, res);
    if (n < 0 || (size_t)n >= sizeof sts)
        return false;
    if (!HMAC(EVP_sha256(), k, dl, (const unsigned char *)sts, (size_t)n, mac, &maclen))
        return false;
    EVP_EncodeBlock(b64, mac, (int)maclen);
    n = snprintf(out, size, "SharedKey %s:%s", account, (const char *)b64);
    return n > 0 && (size_t)n < size;
}

bool fx_blob_shared_key(const char *url, const char *account, const char *key, const char *date,
                        const char *version, char *out, size_t size)
{
    fx_blob_sig_t sg = {.verb = "GET", .url = url, .date = date, .version = version};
    return fx_blob_sign(&sg, account, key, out, size);
}

/* ---- the request ------------------------------------------------------ */

static struct curl_slist *add(struct curl_slist *l, const char *h)
{
    struct curl_slist *n = l ? curl_slist_append(l, h) : curl_slist_append(NULL, h);
    if (!n)
        curl_slist_free_all(l);
    return n;
}

/* x-ms-version, x-ms-date and the authorisation; NULL with out->err set on failure. */
static struct curl_slist *headers(const fx_blob_req_t *rq, fx_blob_t *out)
{
    char date[64], line[AUTH_MAX + 64], auth[AUTH_MAX];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    struct curl_slist *l = add(NULL, "x-ms-version: " FX_BLOB_VERSION);
    snprintf(line, sizeof line, "x-ms-date: %s", date);
    l = l ? add(l, line) : NULL;
    if (l && rq->account_key) {
        if (!fx_blob_shared_key(rq->url, rq->account, rq->account_key, date, FX_BLOB_VERSION,
                                auth, sizeof auth)) {
            curl_slist_free_all(l);
            ib_error_set(&out->err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                         "claim_check: the request cannot be signed (account_key is not base64, "
                         "or the URL is too long)");
            out->res = FX_BLOB_REFUSED;
            return NULL;
        }
        snprintf(line, sizeof line, "Authorization: %s", auth);
        l = add(l, line);
    } else if (l && rq->bearer) {
        char *b = malloc(strlen(rq->bearer) + 32);
        if (b) {
            sprintf(b, "Authorization: Bearer %s", rq->bearer);
            l = add(l, b);
            free(b);
        } else {
            curl_slist_free_all(l);
            l = NULL;
        }
    }
    if (!l) {
        ib_error_set(&out->err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        out->res = FX_BLOB_TRANSIENT;
    }
    return l;
}

static void setup(CURL *c, const fx_blob_req_t *rq, fetch_t *f, struct curl_slist *h, char *eb)
{
    curl_easy_setopt(c, CURLOPT_URL, rq->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, f);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, rq->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, rq->timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, eb);
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 256L * 1024); /* fewer, larger copies of a large body */
    ib_tls_curl_trust(c, rq->ca_file);
}

/* What an answer that came whole says. */
static void classify(const fx_blob_req_t *rq, fetch_t *f, fx_blob_t *o)
{
    long st = o->status;
    if (st >= 200 && st < 300) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int mdlen = 0;
        if (!f->started && !body_start(f)) /* an empty blob */
            return;
        o->data[o->len] = '\0';
        EVP_Digest(o->data, o->len, md, &mdlen, EVP_sha256(), NULL);
        for (unsigned i = 0; i < mdlen && i < 32; i++)
            snprintf(o->sha256 + 2 * i, 3, "%02x", md[i]);
        const char *want = rq->etag ? rq->etag + strspn(rq->etag, "\"") : NULL;
        if (want && (strlen(o->etag) != strcspn(want, "\"") ||
                     strncmp(o->etag, want, strlen(o->etag)) != 0)) {
            o->res = FX_BLOB_CHANGED;
            ib_error_set(&o->err, IB_E_INVAL, IB_CLASS_PERMANENT,
                         "the blob's ETag %s is not the message's %.*s", o->etag,
                         (int)strcspn(want, "\""), want);
        } else if (rq->sha256 && strcasecmp(rq->sha256, o->sha256) != 0) {
            o->res = FX_BLOB_CHANGED;
            ib_error_set(&o->err, IB_E_INVAL, IB_CLASS_PERMANENT,
                         "the blob's SHA-256 %s is not the message's %.64s", o->sha256,
                         rq->sha256);
        } else {
            o->res = FX_BLOB_OK;
            return;
        }
    } else if (st == 404) {
        o->res = FX_BLOB_MISSING;
        ib_error_set(&o->err, IB_E_NOTFOUND, IB_CLASS_PERMANENT, "the blob does not exist (404)");
    } else if (st == 412) {
        o->res = FX_BLOB_CHANGED;
        ib_error_set(&o->err, IB_E_INVAL, IB_CLASS_PERMANENT, "the blob changed (412)");
    } else if (st == 408 || st == 429 || st >= 500) {
        o->res = FX_BLOB_TRANSIENT;
        ib_error_set(&o->err, IB_E_IO, IB_CLASS_TRANSIENT, "the storage service answered %ld", st);
    } else {
        o->res = FX_BLOB_REFUSED;
        ib_error_set(&o->err, IB_E_AUTH, IB_CLASS_PERMANENT,
                     "the storage account refused the request (%ld)", st);
    }
    fx_blob_free(o);
}

fx_blob_result_t fx_blob_get(const fx_blob_req_t *rq, fx_blob_t *out)
{
    fetch_t f = {.req = rq, .out = out, .announced = -1};
    char eb[CURL_ERROR_SIZE] = "";
    memset(out, 0, sizeof(*out));
    out->retry_after_ms = -1;
    CURL *c = curl_easy_init();
    struct curl_slist *h = c ? headers(rq, out) : NULL;
    if (!c || !h) {
        if (!c) {
            out->res = FX_BLOB_TRANSIENT;
            ib_error_set(&out->err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        }
        curl_easy_cleanup(c);
        return out->res;
    }
    setup(c, rq, &f, h, eb);
    CURLcode cc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_TOTAL_TIME, &out->duration_s);
    if (f.refused) {
        fx_blob_free(out);
    } else if (cc != CURLE_OK) {
        out->res = FX_BLOB_TRANSIENT;
        ib_error_set(&out->err, IB_E_IO, IB_CLASS_TRANSIENT, "the storage service: %s",
                     eb[0] ? eb : curl_easy_strerror(cc));
        fx_blob_free(out);
    } else {
        classify(rq, &f, out);
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return out->res;
}
