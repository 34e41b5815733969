/*
 * emu_http.c - the HTTPS management endpoint of sbemu: GET /ENTITY and
 * GET /TOPIC/Subscriptions/SUB (any api-version) answer the Atom entry that
 * Service Bus's administration clients read (QueueDescription,
 * TopicDescription, SubscriptionDescription with CountDetails), from the
 * namespace's live counts.
 *
 * One thread of its own accepts connections and answers one request per
 * connection (Connection: close). It reads the namespace only while it
 * holds the broker mutex, which the proactor thread holds while it handles
 * an event batch, so every answer is a consistent instant of the broker.
 * With a certificate the port speaks TLS only (the official SDKs require
 * https); without one, plain HTTP.
 *
 * Authorization as on Service Bus: "SharedAccessSignature sr=..." (its
 * resource must cover the entity; a query string in sr is not part of the
 * path) or "Bearer <jwt>" when --jwt-issuer is set. A missing or bad
 * token is 401. An entity that does not exist is 200 with an empty feed,
 * as Service Bus answers it.
 */
#include "emu_http.h"

#include "emu_auth.h"
#include "ib_log.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define REQ_MAX 16384
#define IO_TIMEOUT_MS 5000

struct emu_http {
    emu_broker_t *b;
    pthread_mutex_t *mu;
    int fd;
    SSL_CTX *ssl;
    pthread_t tid;
    atomic_int stop;
    int status_fault; /* answer every request with this status (0 = off) */
    int64_t created_s;
};

/* A growing response body. */
typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf_t;

static void sb_printf(sbuf_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *s, const char *fmt, ...)
{
    for (;;) {
        if (s->oom)
            return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(s->p ? s->p + s->len : NULL, s->p ? s->cap - s->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            s->oom = true;
            return;
        }
        if (s->p && s->len + (size_t)n < s->cap) {
            s->len += (size_t)n;
            return;
        }
        size_t cap = (s->cap ? s->cap * 2 : 4096) + (size_t)n;
        char *np = realloc(s->p, cap);
        if (!np) {
            s->oom = true;
            return;
        }
        s->p = np;
        s->cap = cap;
    }
}

/* XML text with & < > " escaped. */
static void sb_xml(sbuf_t *s, const char *t)
{
    for (; *t; t++) {
        switch (*t) {
        case '&': sb_printf(s, "&amp;"); break;
        case '<': sb_printf(s, "&lt;"); break;
        case '>': sb_printf(s, "&gt;"); break;
        case '"': sb_printf(s, "&quot;"); break;
        default: sb_printf(s, "%c", *t);
        }
    }
}

/* An xs:duration as Service Bus writes it: PT1M, PT30S, P1DT2H; 0 is PT0S. */
static void iso_duration(char *buf, size_t size, int64_t s)
{
    int64_t d = s / 86400, h = s % 86400 / 3600, m = s % 3600 / 60, sec = s % 60;
    size_t off = (size_t)snprintf(buf, size, "P");
    if (d)
        off += (size_t)snprintf(buf + off, size - off, "%lldD", (long long)d);
    if (h || m || sec || !d) {
        off += (size_t)snprintf(buf + off, size - off, "T");
        if (h)
            off += (size_t)snprintf(buf + off, size - off, "%lldH", (long long)h);
        if (m)
            off += (size_t)snprintf(buf + off, size - off, "%lldM", (long long)m);
        if (sec || (!h && !m))
            snprintf(buf + off, size - off, "%lldS", (long long)sec);
    }
}

/* TimeSpan.MaxValue, what Service Bus shows for "never". */
#define NEVER "P10675199DT2H48M5.4775807S"

static void iso_time(char *buf, size_t size, int64_t s)
{
    time_t t = (time_t)s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static size_t held(const emu_entity_t *e)
{
    /* Locked and deferred messages stay in Service Bus's active count. */
    return e->avail.count + e->locked.count + e->deferred.count;
}

static void count_details(sbuf_t *s, const emu_entity_t *e)
{
    size_t active = held(e), dead = e->dlq ? held(e->dlq) : 0;
    sb_printf(s,
              "<CountDetails xmlns:d2p1=\"http://schemas.microsoft.com/netservices/2011/06/"
              "servicebus\"><d2p1:ActiveMessageCount>%zu</d2p1:ActiveMessageCount>"
              "<d2p1:DeadLetterMessageCount>%zu</d2p1:DeadLetterMessageCount>"
              "<d2p1:ScheduledMessageCount>%zu</d2p1:ScheduledMessageCount>"
              "<d2p1:TransferMessageCount>0</d2p1:TransferMessageCount>"
              "<d2p1:TransferDeadLetterMessageCount>0</d2p1:TransferDeadLetterMessageCount>"
              "</CountDetails>",
              active, dead, e->scheduled.count);
}

/* The options Service Bus lists for a queue or a subscription, in its order. */
static void entity_options(sbuf_t *s, const emu_entity_t *e, bool queue)
{
    char lock[40], ttl[40], dup[40];
    iso_duration(lock, sizeof lock, e->opts.lock_duration_s);
    if (e->opts.default_ttl_s > 0)
        iso_duration(ttl, sizeof ttl, e->opts.default_ttl_s);
    else
        snprintf(ttl, sizeof ttl, "%s", NEVER);
    iso_duration(dup, sizeof dup, e->opts.dup_window_s > 0 ? e->opts.dup_window_s : 600);
    sb_printf(s, "<LockDuration>%s</LockDuration>", lock);
    if (queue)
        sb_printf(s,
                  "<MaxSizeInMegabytes>1024</MaxSizeInMegabytes><RequiresDuplicateDetection>%s"
                  "</RequiresDuplicateDetection>",
                  e->opts.dup_window_s > 0 ? "true" : "false");
    sb_printf(s, "<RequiresSession>%s</RequiresSession>",
              e->opts.requires_session ? "true" : "false");
    sb_printf(s,
              "<DefaultMessageTimeToLive>%s</DefaultMessageTimeToLive>"
              "<DeadLetteringOnMessageExpiration>%s</DeadLetteringOnMessageExpiration>",
              ttl, e->opts.dead_letter_on_expiry ? "true" : "false");
    if (queue)
        sb_printf(s, "<DuplicateDetectionHistoryTimeWindow>%s</DuplicateDetectionHistoryTimeWindow>",
                  dup);
    else
        sb_printf(s, "<DeadLetteringOnFilterEvaluationExceptions>true"
                     "</DeadLetteringOnFilterEvaluationExceptions>");
    /* 0 (unlimited in sbemu) is shown as the largest count Service Bus accepts. */
    sb_printf(s,
              "<MaxDeliveryCount>%d</MaxDeliveryCount><EnableBatchedOperations>true"
              "</EnableBatchedOperations>",
              e->opts.max_delivery_count > 0 ? e->opts.max_delivery_count : 2000);
}

static void entity_times(sbuf_t *s, const emu_http_t *h)
{
    char t[40], now[40];
    iso_time(t, sizeof t, h->created_s);
    iso_time(now, sizeof now, emu_now_ms() / 1000);
    sb_printf(s, "<CreatedAt>%s</CreatedAt><UpdatedAt>%s</UpdatedAt><AccessedAt>%s</AccessedAt>", t,
              t, now);
}

static void describe_queue(sbuf_t *s, const emu_http_t *h, const emu_entity_t *e)
{
    size_t total = held(e) + (e->dlq ? held(e->dlq) : 0) + e->scheduled.count;
    sb_printf(s, "<QueueDescription xmlns=\"http://schemas.microsoft.com/netservices/2010/10/"
                 "servicebus/connect\" xmlns:i=\"http://www.w3.org/2001/XMLSchema-instance\">");
    entity_options(s, e, true);
    sb_printf(s,
              "<SizeInBytes>0</SizeInBytes><MessageCount>%zu</MessageCount>"
              "<IsAnonymousAccessible>false</IsAnonymousAccessible><AuthorizationRules/>"
              "<Status>Active</Status>",
              total);
    entity_times(s, h);
    sb_printf(s, "<SupportOrdering>true</SupportOrdering>");
    count_details(s, e);
    sb_printf(s, "<AutoDeleteOnIdle>" NEVER "</AutoDeleteOnIdle><EnablePartitioning>false"
                 "</EnablePartitioning><EntityAvailabilityStatus>Available"
                 "</EntityAvailabilityStatus><EnableExpress>false</EnableExpress>"
                 "<MaxMessageSizeInKilobytes>256</MaxMessageSizeInKilobytes></QueueDescription>");
}

static void describe_subscription(sbuf_t *s, const emu_http_t *h, const emu_entity_t *e)
{
    size_t total = held(e) + (e->dlq ? held(e->dlq) : 0) + e->scheduled.count;
    sb_printf(s, "<SubscriptionDescription xmlns=\"http://schemas.microsoft.com/netservices/2010/"
                 "10/servicebus/connect\" xmlns:i=\"http://www.w3.org/2001/XMLSchema-instance\">");
    entity_options(s, e, false);
    sb_printf(s, "<MessageCount>%zu</MessageCount>", total);
    entity_times(s, h);
    count_details(s, e);
    sb_printf(s, "<Status>Active</Status><AutoDeleteOnIdle>" NEVER "</AutoDeleteOnIdle>"
                 "<EntityAvailabilityStatus>Available</EntityAvailabilityStatus>"
                 "</SubscriptionDescription>");
}

static void describe_topic(sbuf_t *s, const emu_http_t *h, const emu_entity_t *e)
{
    char ttl[40], dup[40];
    if (e->opts.default_ttl_s > 0)
        iso_duration(ttl, sizeof ttl, e->opts.default_ttl_s);
    else
        snprintf(ttl, sizeof ttl, "%s", NEVER);
    iso_duration(dup, sizeof dup, e->opts.dup_window_s > 0 ? e->opts.dup_window_s : 600);
    sb_printf(s,
              "<TopicDescription xmlns=\"http://schemas.microsoft.com/netservices/2010/10/"
              "servicebus/connect\" xmlns:i=\"http://www.w3.org/2001/XMLSchema-instance\">"
              "<DefaultMessageTimeToLive>%s</DefaultMessageTimeToLive><MaxSizeInMegabytes>1024"
              "</MaxSizeInMegabytes><RequiresDuplicateDetection>%s</RequiresDuplicateDetection>"
              "<DuplicateDetectionHistoryTimeWindow>%s</DuplicateDetectionHistoryTimeWindow>"
              "<EnableBatchedOperations>true</EnableBatchedOperations><SizeInBytes>0</SizeInBytes>"
              "<Status>Active</Status>",
              ttl, e->opts.dup_window_s > 0 ? "true" : "false", dup);
    entity_times(s, h);
    sb_printf(s,
              "<SupportOrdering>true</SupportOrdering><CountDetails xmlns:d2p1=\"http://"
              "schemas.microsoft.com/netservices/2011/06/servicebus\"><d2p1:ActiveMessageCount>0"
              "</d2p1:ActiveMessageCount><d2p1:DeadLetterMessageCount>0"
              "</d2p1:DeadLetterMessageCount><d2p1:ScheduledMessageCount>0"
              "</d2p1:ScheduledMessageCount><d2p1:TransferMessageCount>0"
              "</d2p1:TransferMessageCount><d2p1:TransferDeadLetterMessageCount>0"
              "</d2p1:TransferDeadLetterMessageCount></CountDetails><SubscriptionCount>%zu"
              "</SubscriptionCount><AutoDeleteOnIdle>" NEVER "</AutoDeleteOnIdle>"
              "<EnablePartitioning>false</EnablePartitioning><EntityAvailabilityStatus>Available"
              "</EntityAvailabilityStatus><EnableExpress>false</EnableExpress>"
              "<MaxMessageSizeInKilobytes>256</MaxMessageSizeInKilobytes></TopicDescription>",
              e->nsubs);
}

/* The Atom entry (or an empty feed when the entity does not exist). thread: http, under mu. */
static void render(sbuf_t *s, const emu_http_t *h, const char *host, const char *path)
{
    emu_entity_t *e = emu_ns_find(h->b->ns, path, strlen(path));
    char now[40];
    iso_time(now, sizeof now, emu_now_ms() / 1000);
    sb_printf(s, "<?xml version=\"1.0\" encoding=\"utf-8\"?>");
    if (!e || e->kind == EMU_KIND_DLQ) {
        sb_printf(s, "<feed xmlns=\"http://www.w3.org/2005/Atom\"><title type=\"text\">Publicly "
                     "Listed Services</title><id>uuid:00000000-0000-0000-0000-000000000000;id=1"
                     "</id><updated>%s</updated><generator>Service Bus 1.1</generator></feed>",
                  now);
        return;
    }
    const char *slash = strrchr(e->path, '/');
    sb_printf(s, "<entry xmlns=\"http://www.w3.org/2005/Atom\"><id>https://");
    sb_xml(s, host);
    sb_printf(s, "/");
    sb_xml(s, e->path);
    sb_printf(s, "?api-version=2021-05</id><title type=\"text\">");
    sb_xml(s, slash ? slash + 1 : e->path);
    sb_printf(s, "</title><published>%s</published><updated>%s</updated><author><name>sbemu"
                 "</name></author><link rel=\"self\" href=\"https://", now, now);
    sb_xml(s, host);
    sb_printf(s, "/");
    sb_xml(s, e->path);
    sb_printf(s, "?api-version=2021-05\"/><content type=\"application/xml\">");
    if (e->kind == EMU_KIND_QUEUE)
        describe_queue(s, h, e);
    else if (e->kind == EMU_KIND_SUBSCRIPTION)
        describe_subscription(s, h, e);
    else
        describe_topic(s, h, e);
    sb_printf(s, "</content></entry>");
}

/* ---- one connection --------------------------------------------------------- */

typedef struct {
    int fd;
    SSL *ssl;
} conn_t;

static int conn_wait(conn_t *c, short ev)
{
    struct pollfd p = {c->fd, ev, 0};
    return poll(&p, 1, IO_TIMEOUT_MS) > 0 ? 0 : -1;
}

static long conn_read(conn_t *c, char *buf, size_t n)
{
    if (conn_wait(c, POLLIN) != 0)
        return -1;
    if (!c->ssl)
        return read(c->fd, buf, n);
    int r = SSL_read(c->ssl, buf, (int)n);
    return r > 0 ? r : -1;
}

static int conn_write(conn_t *c, const char *buf, size_t n)
{
    while (n > 0) {
        long w = c->ssl ? SSL_write(c->ssl, buf, (int)n) : write(c->fd, buf, n);
        if (w <= 0)
            return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads up to the end of the headers; the request's length, or -1. */
static long read_request(conn_t *c, char *buf, size_t size)
{
    size_t len = 0;
    while (len + 1 < size) {
        long r = conn_read(c, buf + len, size - 1 - len);
        if (r <= 0)
            return -1;
        len += (size_t)r;
        buf[len] = '\0';
        if (strstr(buf, "\r\n\r\n"))
            return (long)len;
    }
    return -1;
}

/* The value of header name (case-insensitive) into out; false when absent. */
static bool header(const char *req, const char *name, char *out, size_t size)
{
    size_t nl = strlen(name);
    for (const char *p = strstr(req, "\r\n"); p && p[2] != '\r'; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2;
        if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ')
                v++;
            const char *end = strstr(v, "\r\n");
            size_t vl = end ? (size_t)(end - v) : strlen(v);
            if (vl >= size)
                return false;
            memcpy(out, v, vl);
            out[vl] = '\0';
            return true;
        }
    }
    return false;
}

static void respond(conn_t *c, int status, const char *reason, const char *body)
{
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/atom+xml;type=entry;"
                     "charset=utf-8\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                     status, reason, strlen(body));
    if (conn_write(c, head, (size_t)n) == 0)
        conn_write(c, body, strlen(body));
}

static void respond_error(conn_t *c, int status, const char *reason, const char *detail)
{
    char body[512];
    snprintf(body, sizeof body, "<Error><Code>%d</Code><Detail>%s</Detail></Error>", status,
             detail);
    respond(c, status, reason, body);
}

/* 0 when the Authorization header grants path; else why. thread: http. */
static int authorize(const emu_http_t *h, const char *req, const char *path, char *why,
                     size_t wl)
{
    const emu_broker_t *b = h->b;
    if (!b->key && !b->jwt_issuer)
        return 0;
    char auth[4096];
    if (!header(req, "Authorization", auth, sizeof auth)) {
        snprintf(why, wl, "no Authorization header");
        return -1;
    }
    int64_t exp, now = emu_now_ms() / 1000;
    if (strncmp(auth, "Bearer ", 7) == 0) {
        if (!b->jwt_issuer) {
            snprintf(why, wl, "bearer tokens are not accepted");
            return -1;
        }
        return emu_jwt_check(auth + 7, b->jwt_issuer, b->jwt_secret, now, &exp, why, wl);
    }
    if (!b->key) {
        snprintf(why, wl, "SAS tokens are not accepted");
        return -1;
    }
    return emu_sas_check(auth, b->key_name, b->key, path, now, &exp, why, wl);
}

/* Parses "GET /path?query HTTP/1.1" into the decoded path (no leading '/'). */
static int request_path(const char *req, char *path, size_t size)
{
    if (strncmp(req, "GET /", 5) != 0)
        return -1;
    const char *p = req + 5;
    size_t n = strcspn(p, "? \r\n");
    return emu_pct_decode(p, n, path, size);
}

static void serve(emu_http_t *h, conn_t *c)
{
    static char req[REQ_MAX];
    if (read_request(c, req, sizeof req) < 0)
        return;
    char path[1024], host[256], why[256];
    if (strncmp(req, "GET ", 4) != 0) {
        respond_error(c, 405, "Method Not Allowed", "sbemu serves GET only");
        return;
    }
    if (request_path(req, path, sizeof path) != 0) {
        respond_error(c, 400, "Bad Request", "bad request path");
        return;
    }
    if (!header(req, "Host", host, sizeof host))
        snprintf(host, sizeof host, "localhost");
    if (h->status_fault) {
        respond_error(c, h->status_fault, "Fault", "sbemu --fault-http-status");
        return;
    }
    if (authorize(h, req, path, why, sizeof why) != 0) {
        IB_LOG(IB_LOG_INFO, "http", IB_MSG("unauthorized"), IB_S("path", path), IB_S("why", why));
        respond_error(c, 401, "Unauthorized", why);
        return;
    }
    sbuf_t body = {0};
    pthread_mutex_lock(h->mu);
    render(&body, h, host, path);
    pthread_mutex_unlock(h->mu);
    if (body.oom)
        respond_error(c, 500, "Internal Server Error", "out of memory");
    else
        respond(c, 200, "OK", body.p);
    free(body.p);
}

static void *http_main(void *arg)
{
    emu_http_t *h = arg;
    while (!h->stop) {
        struct pollfd p = {h->fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        conn_t c = {accept(h->fd, NULL, NULL), NULL};
        if (c.fd < 0)
            continue;
        if (h->ssl) {
            c.ssl = SSL_new(h->ssl);
            if (!c.ssl || SSL_set_fd(c.ssl, c.fd) != 1 || SSL_accept(c.ssl) != 1) {
                ERR_clear_error();
                SSL_free(c.ssl);
                close(c.fd);
                continue;
            }
        }
        serve(h, &c);
        if (c.ssl) {
            SSL_shutdown(c.ssl);
            SSL_free(c.ssl);
        }
        close(c.fd);
    }
    return NULL;
}

static int listen_on(const char *hostport, int *bound, char *err, size_t el)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || (size_t)(colon - hostport) >= sizeof host) {
        snprintf(err, el, "--http-listen wants HOST:PORT");
        return -1;
    }
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE}, *ai;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0) {
        snprintf(err, el, "cannot resolve %s", hostport);
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM, 0), one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0) {
        snprintf(err, el, "cannot listen on %s", hostport);
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

emu_http_t *emu_http_start(const emu_http_opts_t *o, int *bound_port, char *err, size_t errlen)
{
    emu_http_t *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->b = o->broker;
    h->mu = o->mu;
    h->status_fault = o->status_fault;
    h->created_s = emu_now_ms() / 1000;
    if (o->tls_cert) {
        h->ssl = SSL_CTX_new(TLS_server_method());
        if (!h->ssl || SSL_CTX_use_certificate_chain_file(h->ssl, o->tls_cert) != 1 ||
            SSL_CTX_use_PrivateKey_file(h->ssl, o->tls_key, SSL_FILETYPE_PEM) != 1) {
            snprintf(err, errlen, "cannot load TLS certificate %s / key %s", o->tls_cert,
                     o->tls_key);
            SSL_CTX_free(h->ssl);
            free(h);
            return NULL;
        }
    }
    h->fd = listen_on(o->listen, bound_port, err, errlen);
    if (h->fd < 0 || pthread_create(&h->tid, NULL, http_main, h) != 0) {
        if (h->fd >= 0) {
            close(h->fd);
            snprintf(err, errlen, "cannot start the http thread");
        }
        SSL_CTX_free(h->ssl);
        free(h);
        return NULL;
    }
    return h;
}

void emu_http_stop(emu_http_t *h)
{
    if (!h)
        return;
    h->stop = 1;
    pthread_join(h->tid, NULL);
    close(h->fd);
    SSL_CTX_free(h->ssl);
    free(h);
}
