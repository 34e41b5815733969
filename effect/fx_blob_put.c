/*
 * fx_blob_put.c - the upload of a blob (fx_blob.h, fx_blob_put): Put Blob
 * for a body up to block_bytes, else Put Block per block and Put Block
 * List. Each request reads its bytes in place from the caller's buffer
 * (a read callback over a slice), so the upload holds nothing but curl's
 * own buffers; one easy handle, reused across the blocks.
 *
 * thread: the caller's (the outbox relay's).
 */
#include "fx_blob.h"
#include "ib_tls.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define AUTH_MAX 512
#define URL_MAX 4096
#define BLOCK_ID_LEN 16 /* base64 of 12 bytes: no padding */

/* The bytes one request sends. */
typedef struct slice {
    const char *p;
    size_t left;
} slice_t;

static size_t on_read(char *buf, size_t size, size_t n, void *ud)
{
    slice_t *s = ud;
    size_t k = size * n < s->left ? size * n : s->left;
    memcpy(buf, s->p, k);
    s->p += k;
    s->left -= k;
    return k;
}

static size_t on_discard(char *buf, size_t size, size_t n, void *ud)
{
    (void)buf;
    (void)ud;
    return size * n; /* an answer's body (an error's XML): not kept */
}

static size_t on_header(char *buf, size_t size, size_t n, void *ud)
{
    fx_blob_put_t *o = ud;
    size_t len = size * n;
    if (len > 12 && strncasecmp(buf, "retry-after:", 12) == 0) {
        long s = strtol(buf + 12, NULL, 10);
        o->retry_after_ms = s > 0 ? s * 1000L : 0;
    }
    return len;
}

/* Appends h to *l; false, the list freed, when out of memory. */
static bool append(struct curl_slist **l, const char *h)
{
    struct curl_slist *t = curl_slist_append(*l, h);
    if (!t) {
        curl_slist_free_all(*l);
        *l = NULL;
        return false;
    }
    *l = t;
    return true;
}

/* The Authorization header (Shared Key or a bearer) into *l; false with o set. */
static bool put_auth(const fx_blob_put_req_t *rq, const fx_blob_sig_t *sg, struct curl_slist **l,
                     fx_blob_put_t *o)
{
    char auth[AUTH_MAX], *line = NULL;
    bool ok;
    if (rq->account_key && !fx_blob_sign(sg, rq->account, rq->account_key, auth, sizeof auth)) {
        curl_slist_free_all(*l);
        *l = NULL;
        o->res = FX_BLOB_REFUSED;
        ib_error_set(&o->err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                     "the upload cannot be signed (the account key is not base64, or the URL "
                     "is too long)");
        return false;
    }
    const char *v = rq->account_key ? auth : rq->bearer;
    if (!v)
        return true; /* sas: in the URL */
    if ((line = malloc(strlen(v) + 32)))
        sprintf(line, "Authorization: %s%s", rq->account_key ? "" : "Bearer ", v);
    ok = line && append(l, line);
    free(line);
    if (ok)
        return true;
    curl_slist_free_all(*l);
    *l = NULL;
    o->res = FX_BLOB_TRANSIENT;
    ib_error_set(&o->err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    return false;
}

/* One request's headers: its type, the x-ms- ones ("name:value\n" lines in ms) and the auth. */
static struct curl_slist *put_headers(const fx_blob_put_req_t *rq, const char *url, size_t len,
                                      const char *ctype, const char *ms, fx_blob_put_t *o)
{
    char date[64], h[512];
    time_t now = time(NULL);
    struct tm tm;
    struct curl_slist *l = NULL;
    bool ok;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    ok =
        append(&l, "x-ms-version: " FX_BLOB_VERSION) && append(&l, "Expect:"); /* no 100-continue */
    snprintf(h, sizeof h, "x-ms-date: %s", date);
    ok = ok && append(&l, h);
    snprintf(h, sizeof h, "Content-Type: %s", ctype);
    ok = ok && append(&l, h);
    for (const char *m = ms; ok && m && *m; m += strcspn(m, "\n") + 1) {
        int k = (int)strcspn(m, "\n");
        const char *colon = memchr(m, ':', (size_t)k);
        snprintf(h, sizeof h, "%.*s: %.*s", colon ? (int)(colon - m) : k, m,
                 colon ? (int)(k - (colon - m) - 1) : 0, colon ? colon + 1 : "");
        ok = append(&l, h);
    }
    if (!ok) {
        o->res = FX_BLOB_TRANSIENT;
        ib_error_set(&o->err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return NULL;
    }
    fx_blob_sig_t sg = {.verb = "PUT",
                        .url = url,
                        .content_length = len,
                        .content_type = ctype,
                        .ms_headers = ms,
                        .date = date,
                        .version = FX_BLOB_VERSION};
    return put_auth(rq, &sg, &l, o) ? l : NULL;
}

/* What a PUT's answer (or its absence) says; true on 2xx. */
static bool put_result(CURLcode cc, const char *eb, const char *what, fx_blob_put_t *o)
{
    long st = o->status;
    if (cc != CURLE_OK) {
        o->res = FX_BLOB_TRANSIENT;
        ib_error_set(&o->err, IB_E_IO, IB_CLASS_TRANSIENT, "%s: the storage service: %s", what,
                     eb[0] ? eb : curl_easy_strerror(cc));
    } else if (st >= 200 && st < 300) {
        return true;
    } else if (st == 404) {
        o->res = FX_BLOB_MISSING;
        ib_error_set(&o->err, IB_E_NOTFOUND, IB_CLASS_TRANSIENT,
                     "%s: the container does not exist (404)", what);
    } else if (st == 408 || st == 429 || st >= 500) {
        o->res = FX_BLOB_TRANSIENT;
        ib_error_set(&o->err, IB_E_IO, IB_CLASS_TRANSIENT, "%s: the storage service answered %ld",
                     what, st);
    } else {
        o->res = FX_BLOB_REFUSED;
        ib_error_set(&o->err, IB_E_AUTH, IB_CLASS_TRANSIENT,
                     "%s: the storage account refused the upload (%ld)", what, st);
    }
    return false;
}

/* One PUT of [p, p + len) to url with content type ctype and extra x-ms- headers ms. */
static bool put_once(CURL *c, const fx_blob_put_req_t *rq, const char *url, const char *p,
                     size_t len, const char *ctype, const char *ms, const char *what,
                     fx_blob_put_t *o)
{
    char eb[CURL_ERROR_SIZE] = "";
    slice_t sl = {p, len};
    double secs = 0;
    struct curl_slist *h = put_headers(rq, url, len, ctype, ms, o);
    if (!h)
        return false;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(c, CURLOPT_READDATA, &sl);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, o);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_discard);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, rq->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, rq->timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, eb);
    curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, 256L * 1024);
    ib_tls_curl_trust(c, rq->ca_file);
    o->status = 0;
    CURLcode cc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &o->status);
    curl_easy_getinfo(c, CURLINFO_TOTAL_TIME, &secs);
    o->duration_s += secs;
    o->requests++;
    curl_slist_free_all(h);
    return put_result(cc, eb, what, o);
}

/* url + "?" or "&" + query, into out; false when it does not fit. */
static bool with_query(const char *url, const char *query, char *out, size_t size)
{
    int n = snprintf(out, size, "%s%c%s", url, strchr(url, '?') ? '&' : '?', query);
    return n > 0 && (size_t)n < size;
}

/* The id of block i: base64 of "block-%06zu" (12 bytes, so 16 characters, no padding). */
static void block_id(size_t i, char out[BLOCK_ID_LEN + 1])
{
    char raw[13];
    snprintf(raw, sizeof raw, "block-%06zu", i % 1000000);
    EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)raw, 12);
}

/* "%2B" for '+', "%2F" for '/': a block id in a query. */
static void id_query(const char *id, char *out, size_t size)
{
    size_t w = 0;
    for (; *id && w + 4 < size; id++)
        w += (size_t)(*id == '+' || *id == '/' || *id == '='
                          ? snprintf(out + w, size - w, "%%%02X", (unsigned char)*id)
                          : snprintf(out + w, size - w, "%c", *id));
    out[w] = '\0';
}

/* Put Block per block, then Put Block List naming them in order. */
static bool put_blocks(CURL *c, const fx_blob_put_req_t *rq, size_t bb, const char *ctype,
                       fx_blob_put_t *o)
{
    size_t nb = (rq->len + bb - 1) / bb, xml_len = 0;
    char url[URL_MAX], q[96], id[BLOCK_ID_LEN + 1], idq[64], ms[300];
    char *xml = malloc(nb * (BLOCK_ID_LEN + 20) + 96);
    bool ok = xml != NULL;
    if (!xml) {
        o->res = FX_BLOB_TRANSIENT;
        ib_error_set(&o->err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return false;
    }
    xml_len = (size_t)sprintf(xml, "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
    for (size_t i = 0; ok && i < nb; i++) {
        size_t off = i * bb, len = rq->len - off < bb ? rq->len - off : bb;
        block_id(i, id);
        id_query(id, idq, sizeof idq);
        snprintf(q, sizeof q, "comp=block&blockid=%s", idq);
        ok = with_query(rq->url, q, url, sizeof url) &&
             put_once(c, rq, url, (const char *)rq->data + off, len, "application/octet-stream",
                      NULL, "Put Block", o);
        xml_len += (size_t)sprintf(xml + xml_len, "<Latest>%s</Latest>", id);
    }
    xml_len += (size_t)sprintf(xml + xml_len, "</BlockList>");
    snprintf(ms, sizeof ms, "x-ms-blob-content-type:%s\n", ctype);
    ok = ok && with_query(rq->url, "comp=blocklist", url, sizeof url) &&
         put_once(c, rq, url, xml, xml_len, "application/xml", ms, "Put Block List", o);
    free(xml);
    return ok;
}

fx_blob_result_t fx_blob_put(const fx_blob_put_req_t *rq, fx_blob_put_t *out)
{
    size_t bb = rq->block_bytes ? rq->block_bytes : FX_BLOB_BLOCK_BYTES;
    const char *ctype =
        rq->content_type && *rq->content_type ? rq->content_type : "application/octet-stream";
    memset(out, 0, sizeof(*out));
    out->retry_after_ms = -1;
    out->res = FX_BLOB_OK;
    if (strlen(rq->url) + 96 >= URL_MAX || strlen(ctype) > 200) {
        out->res = FX_BLOB_REFUSED;
        ib_error_set(&out->err, IB_E_INVAL, IB_CLASS_PERMANENT,
                     "the blob's URL or content type is too long");
        return out->res;
    }
    CURL *c = curl_easy_init();
    if (!c) {
        out->res = FX_BLOB_TRANSIENT;
        ib_error_set(&out->err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return out->res;
    }
    if (rq->len <= bb)
        put_once(c, rq, rq->url, rq->data, rq->len, ctype, "x-ms-blob-type:BlockBlob\n", "Put Blob",
                 out);
    else
        put_blocks(c, rq, bb, ctype, out);
    curl_easy_cleanup(c);
    return out->res;
}
