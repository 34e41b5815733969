/*
 * fx_client.c - one HTTP exchange over libcurl and what its outcome means.
 *
 * The question that matters is whether the destination may have acted when
 * no answer came back. The debug callback sees every byte libcurl writes to
 * the connection; the request counts as sent once the end of its header
 * block and then every body byte have gone out. The body is fed through a
 * read callback whose seek callback refuses to rewind once it was sent, so
 * libcurl's own retry on a dead reused connection can never deliver a
 * non-idempotent request twice behind the caller's back.
 *
 * thread: a client is used by one worker thread at a time.
 */
#include "fx_client.h"
#include "fx_int.h"
#include "ib_tls.h"

#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define FX_HEADERS_MAX (16 * 1024)

struct fx_client {
    CURL *curl;
};


ib_err_t fx_global_init(ib_error_t *err)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return ib_error_set(err, IB_E_IO, IB_CLASS_PERMANENT, "curl_global_init failed");
    return IB_E_OK;
}

void fx_global_cleanup(void)
{
    curl_global_cleanup(); /* reference-counted by libcurl */
}

fx_client_t *fx_client_new(void)
{
    fx_client_t *fx = calloc(1, sizeof(*fx));
    if (!fx)
        return NULL;
    fx->curl = curl_easy_init();
    if (!fx->curl) {
        free(fx);
        return NULL;
    }
    return fx;
}

void fx_client_free(fx_client_t *fx)
{
    if (!fx)
        return;
    curl_easy_cleanup(fx->curl);
    free(fx);
}

void fx_response_free(fx_response_t *resp)
{
    if (!resp)
        return;
    free(resp->body);
    free(resp->headers);
    resp->body = resp->headers = NULL;
    resp->body_len = resp->headers_len = 0;
}

fx_class_t fx_classify_status(long status)
{
    if (status >= 200 && status < 300)
        return FX_APPLIED;
    if (status == 408 || status == 429 || (status >= 500 && status < 600))
        return FX_TRANSIENT;
    return FX_PERMANENT;
}

const char *fx_class_name(fx_class_t cls)
{
    static const char *const names[] = {"applied", "transient", "permanent", "ambiguous"};
    return (unsigned)cls < sizeof(names) / sizeof(names[0]) ? names[cls] : "unknown";
}

const char *fx_response_metric_class(const fx_response_t *resp)
{
    if (resp->status >= 200 && resp->status < 300)
        return "2xx";
    if (resp->status == 429)
        return "429"; /* throttled: apart from the refusals */
    if (resp->status >= 400 && resp->status < 500)
        return "4xx";
    if (resp->status >= 500 && resp->status < 600)
        return "5xx";
    if (resp->status == 0 && resp->err.code == IB_E_TIMEOUT)
        return "timeout";
    return "error";
}

/* Appends at most cap - *len bytes; the buffer stays NUL-terminated. */
static size_t append_bounded(char **buf, size_t *len, size_t *cap, size_t limit, const char *p,
                             size_t n, bool *truncated)
{
    if (*len + n > limit) {
        if (truncated)
            *truncated = true;
        n = limit > *len ? limit - *len : 0;
    }
    if (*len + n + 1 > *cap) {
        size_t ncap = *cap ? *cap : 1024;
        while (ncap < *len + n + 1)
            ncap *= 2;
        char *nb = realloc(*buf, ncap);
        if (!nb)
            return 0;
        *buf = nb;
        *cap = ncap;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = '\0';
    return n;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *userp)
{
    exchange_t *x = userp;
    size_t n = size * nmemb;
    append_bounded(&x->resp->body, &x->resp->body_len, &x->body_cap, FX_BODY_MAX, p, n,
                   &x->resp->body_truncated);
    return n; /* the rest of an over-long body is read and dropped */
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *userp)
{
    exchange_t *x = userp;
    size_t n = size * nmemb;
    /* A new status line (after 100 Continue, say) starts the final header set. */
    if (n >= 5 && strncmp(p, "HTTP/", 5) == 0)
        x->resp->headers_len = 0;
    append_bounded(&x->resp->headers, &x->resp->headers_len, &x->headers_cap, FX_HEADERS_MAX, p, n,
                   NULL);
    return n;
}

static size_t on_read(char *p, size_t size, size_t nmemb, void *userp)
{
    exchange_t *x = userp;
    size_t left = x->req->body_len - x->read_pos, n = size * nmemb;
    if (n > left)
        n = left;
    memcpy(p, x->req->body + x->read_pos, n);
    x->read_pos += n;
    return n;
}

/* Rewinding is allowed only while the request has not been sent whole. */
static int on_seek(void *userp, curl_off_t offset, int origin)
{
    exchange_t *x = userp;
    if (x->resp->sent || origin != SEEK_SET || offset < 0 || (size_t)offset > x->req->body_len)
        return CURL_SEEKFUNC_FAIL;
    x->read_pos = (size_t)offset;
    return CURL_SEEKFUNC_OK;
}

void fx_count_out(exchange_t *x, const char *p, size_t n)
{
    size_t i = 0;
    /* An end that straddles two chunks ends in one of this chunk's first three bytes. */
    for (; !x->header_done && i < n && i < 3; i++) {
        memmove(x->tail, x->tail + 1, 3);
        x->tail[3] = p[i];
        x->header_done = memcmp(x->tail, "\r\n\r\n", 4) == 0;
    }
    /* Any later one lies whole in the chunk: searched, not fed byte by byte. */
    if (!x->header_done && i < n) {
        const char *end = memmem(p, n, "\r\n\r\n", 4);
        if (end) {
            x->header_done = true;
            i = (size_t)(end - p) + 4;
        } else {
            memcpy(x->tail, p + n - 4, 4); /* n > 3 here */
            i = n;
        }
    }
    if (x->header_done)
        x->body_out += n - i;
    if (x->header_done && x->body_out >= (x->req->body ? x->req->body_len : 0))
        x->resp->sent = true;
}

static int on_debug(CURL *curl, curl_infotype type, char *p, size_t n, void *userp)
{
    (void)curl;
    if (type == CURLINFO_HEADER_OUT || type == CURLINFO_DATA_OUT)
        fx_count_out(userp, p, n);
    return 0;
}

/* Seconds or an HTTP-date; -1 when absent or unreadable. */
static long parse_retry_after(const fx_response_t *resp)
{
    char v[128];
    if (!fx_response_header(resp, "Retry-After", v, sizeof v))
        return -1;
    char *end;
    long s = strtol(v, &end, 10);
    if (end != v && *end == '\0')
        return s < 0 ? -1 : (s > 86400 ? 86400 : s) * 1000;
    time_t t = curl_getdate(v, NULL);
    if (t == (time_t)-1)
        return -1;
    long d = (long)(t - time(NULL));
    return d < 0 ? 0 : (d > 86400 ? 86400 : d) * 1000L;
}

const char *fx_response_header(const fx_response_t *resp, const char *name, char *buf, size_t size)
{
    size_t nlen = strlen(name);
    const char *line = resp->headers;
    while (line && *line) {
        const char *eol = strstr(line, "\n");
        size_t llen = eol ? (size_t)(eol - line) : strlen(line);
        if (llen > nlen && strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
            const char *v = line + nlen + 1, *e = line + llen;
            while (v < e && (*v == ' ' || *v == '\t'))
                v++;
            while (e > v && isspace((unsigned char)e[-1]))
                e--;
            snprintf(buf, size, "%.*s", (int)(e - v), v);
            return buf;
        }
        line = eol ? eol + 1 : NULL;
    }
    return NULL;
}

static struct curl_slist *build_headers(const fx_request_t *req, bool *oom)
{
    struct curl_slist *list = NULL, *n;
    char line[8192];
    *oom = false;
    /* No 100-continue round trip: the body follows the header at once. */
    if (!(list = curl_slist_append(NULL, "Expect:")))
        goto fail;
    for (size_t i = 0; i < req->nheaders; i++) {
        snprintf(line, sizeof line, "%s: %s", req->headers[i].name, req->headers[i].value);
        if (!(n = curl_slist_append(list, line)))
            goto fail;
        list = n;
    }
    return list;
fail:
    curl_slist_free_all(list);
    *oom = true;
    return NULL;
}

static void set_options(CURL *c, const fx_request_t *req, exchange_t *x, struct curl_slist *hdrs,
                        char *errbuf)
{
    curl_easy_setopt(c, CURLOPT_URL, req->url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, req->timeout_ms > 0 ? req->timeout_ms : 10000L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    ib_tls_curl_trust(c, req->ca_file);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(c, CURLOPT_VERBOSE, 1L); /* feeds on_debug; libcurl prints nothing */
    curl_easy_setopt(c, CURLOPT_DEBUGFUNCTION, on_debug);
    curl_easy_setopt(c, CURLOPT_DEBUGDATA, x);
    if (req->body) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
        /* libcurl's smallest upload buffer: it is allocated per transfer (64 KiB by default). */
        curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, 16384L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(c, CURLOPT_READDATA, x);
        curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(c, CURLOPT_SEEKDATA, x);
    }
    if (strcmp(req->method, req->body ? "POST" : "GET") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
}

/* No HTTP answer: whether the destination may have acted decides the class. */
static void classify_failure(fx_response_t *resp, CURLcode cc, const char *errbuf)
{
    const char *why = errbuf[0] ? errbuf : curl_easy_strerror(cc);
    /* libcurl's text for it ("seek callback returned error 1") names our refusal, not the event. */
    if (cc == CURLE_SEND_FAIL_REWIND)
        why = "the connection closed after the request was sent; not sent again";
    ib_err_t code = cc == CURLE_OPERATION_TIMEDOUT ? IB_E_TIMEOUT
                    : cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CONNECT_ERROR ||
                            cc == CURLE_SSL_CACERT_BADFILE || cc == CURLE_SSL_CERTPROBLEM
                        ? IB_E_TLS
                        : IB_E_IO;
    if (cc == CURLE_URL_MALFORMAT || cc == CURLE_UNSUPPORTED_PROTOCOL) {
        resp->cls = FX_PERMANENT;
        ib_error_set(&resp->err, IB_E_INVAL, IB_CLASS_PERMANENT, "http: %s", why);
    } else if (resp->sent) {
        resp->cls = FX_AMBIGUOUS;
        ib_error_set(&resp->err, code, IB_CLASS_AMBIGUOUS,
                     "http: request sent, no answer (%s): the destination may have acted", why);
    } else {
        resp->cls = FX_TRANSIENT;
        ib_error_set(&resp->err, code, IB_CLASS_TRANSIENT, "http: request not sent: %s", why);
    }
}

static void classify_answer(fx_response_t *resp)
{
    resp->cls = fx_classify_status(resp->status);
    resp->retry_after_ms = parse_retry_after(resp);
    if (resp->cls == FX_TRANSIENT)
        ib_error_set(&resp->err, IB_E_AGAIN, IB_CLASS_TRANSIENT, "http: status %ld", resp->status);
    else if (resp->cls == FX_PERMANENT)
        ib_error_set(&resp->err, IB_E_BROKER, IB_CLASS_PERMANENT, "http: status %ld", resp->status);
}

bool fx_exchange_begin(CURL *c, const fx_request_t *req, fx_response_t *resp, exchange_t *x)
{
    memset(resp, 0, sizeof(*resp));
    memset(x, 0, sizeof(*x));
    resp->retry_after_ms = -1;
    x->req = req;
    x->resp = resp;
    bool oom;
    x->hdrs = build_headers(req, &oom);
    /* An empty body buffer, so callers may always read resp->body. */
    append_bounded(&resp->body, &resp->body_len, &x->body_cap, FX_BODY_MAX, "", 0, NULL);
    if (oom || !resp->body) {
        curl_slist_free_all(x->hdrs);
        x->hdrs = NULL;
        resp->cls = FX_TRANSIENT;
        ib_error_set(&resp->err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return false;
    }
    /* reset keeps the connection and DNS caches: that is the reuse. */
    curl_easy_reset(c);
    set_options(c, req, x, x->hdrs, x->errbuf);
    return true;
}

ib_err_t fx_exchange_end(CURL *c, CURLcode cc, exchange_t *x)
{
    fx_response_t *resp = x->resp;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
    curl_easy_getinfo(c, CURLINFO_TOTAL_TIME, &resp->duration_s);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(x->hdrs);
    x->hdrs = NULL;
    /* A status line that arrived is the destination's decision, even when
     * the rest of the answer was cut off. */
    if (cc == CURLE_OK || resp->status > 0) {
        classify_answer(resp);
        return IB_E_OK;
    }
    classify_failure(resp, cc, x->errbuf);
    return resp->err.code;
}

ib_err_t fx_client_call(fx_client_t *fx, const fx_request_t *req, fx_response_t *resp)
{
    exchange_t x;
    if (!fx_exchange_begin(fx->curl, req, resp, &x))
        return resp->err.code;
    return fx_exchange_end(fx->curl, curl_easy_perform(fx->curl), &x);
}
