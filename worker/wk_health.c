/*
 * wk_health.c - a deliberately small HTTP/1.1 server: one thread, poll(),
 * non-blocking sockets, one request per connection, fixed-size tables.
 *
 * Connection life: READING (collecting the request head until a blank line,
 * under a size cap and a deadline) -> WRITING (the whole response is built
 * in memory, then sent as the socket accepts it, under a deadline) ->
 * LINGER (our side shut for writing; unread input is drained briefly so the
 * kernel does not reset the connection and destroy the response before the
 * client read it) -> FREE.
 *
 * thread: the static functions from "sockets" on run on the server thread
 * only; the setters at the top run on any thread and touch atomics only.
 */
#include "wk_health.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ib_log.h"

#define LINGER_MS 1000
#define ACCEPTS_PER_TURN 64

typedef enum {
    WK_CONN_FREE = 0, /* slot unused; fd is -1 */
    WK_CONN_READING,  /* the server waits for the client's request head */
    WK_CONN_WRITING,  /* the server sends a response the client must read */
    WK_CONN_LINGER,   /* response sent; draining the client's leftovers */
} wk_conn_state_t;

typedef struct {
    wk_conn_state_t state;
    int fd;
    char *in; /* max_request_bytes + 1, allocated on first use */
    size_t inlen;
    char *out; /* the whole response */
    size_t outlen, outoff;
    long long deadline_ms; /* monotonic; the state's own deadline */
    long long since_ms;    /* when the connection was accepted */
} wk_conn_t;

struct wk_health {
    wk_health_opts_t o;
    wk_metrics_t *metrics;
    int lfd;
    int wake[2];
    int port;
    bool running;
    pthread_t thread;
    atomic_bool stop;

    _Atomic long long heartbeat_ms;
    atomic_bool cond[WK_HEALTH__COND_COUNT];
    atomic_bool draining;

    wk_conn_t *conns; /* o.max_connections slots; touched by the server thread only */
    struct pollfd *pfd;
    int *pfd_conn;
};

static const char *const cond_unmet[WK_HEALTH__COND_COUNT] = {
    "amqp not connected",
    "links not attached",
    "database unreachable",
};

/* Monotonic milliseconds: opts.clock_ms when given (tests step it), else ib_mono_ms. */
static long long now_ms(const wk_health_t *h)
{
    return h->o.clock_ms ? h->o.clock_ms(h->o.clock_ctx) : ib_mono_ms();
}

/* ---- state the worker sets ---- */

void wk_health_heartbeat(wk_health_t *h)
{
    if (h)
        atomic_store_explicit(&h->heartbeat_ms, now_ms(h), memory_order_relaxed);
}

void wk_health_set_condition(wk_health_t *h, wk_health_cond_t cond, bool met)
{
    if (h && (unsigned)cond < WK_HEALTH__COND_COUNT)
        atomic_store_explicit(&h->cond[cond], met, memory_order_relaxed);
}

void wk_health_set_draining(wk_health_t *h, bool draining)
{
    if (h)
        atomic_store_explicit(&h->draining, draining, memory_order_relaxed);
}

int wk_health_port(const wk_health_t *h)
{
    return h ? h->port : 0;
}

static long long heartbeat_age_ms(const wk_health_t *h)
{
    return now_ms(h) -
           atomic_load_explicit((_Atomic long long *)&h->heartbeat_ms, memory_order_relaxed);
}

bool wk_health_is_live(const wk_health_t *h)
{
    return h && heartbeat_age_ms(h) <= h->o.heartbeat_max_age_ms;
}

bool wk_health_is_ready(const wk_health_t *h, char *why, size_t why_size)
{
    size_t n = 0;
    bool ready = h != NULL;
    if (why && why_size)
        why[0] = '\0';
    if (!h)
        return false;
    for (int c = 0; c <= WK_HEALTH__COND_COUNT; c++) {
        const char *unmet = NULL;
        if (c < WK_HEALTH__COND_COUNT) {
            if (!atomic_load_explicit((atomic_bool *)&h->cond[c], memory_order_relaxed))
                unmet = cond_unmet[c];
        } else if (atomic_load_explicit((atomic_bool *)&h->draining, memory_order_relaxed)) {
            unmet = "draining";
        }
        if (!unmet)
            continue;
        ready = false;
        if (why && n < why_size) {
            int k = snprintf(why + n, why_size - n, "%s%s", n ? "; " : "", unmet);
            n += k > 0 ? (size_t)k : 0;
        }
    }
    return ready;
}

/* ---- sockets ---- */

static void conn_close(wk_conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->out);
    c->out = NULL;
    c->outlen = c->outoff = c->inlen = 0;
    c->state = WK_CONN_FREE;
}

/* Builds the full response into c->out and switches the connection to WRITING. */
static void conn_respond(wk_health_t *h, wk_conn_t *c, int status, const char *reason,
                         const char *ctype, const char *body, size_t body_len, bool head_only,
                         const char *extra_headers)
{
    char hdr[512];
    int hn = snprintf(hdr, sizeof hdr,
                      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Cache-Control: no-store\r\nConnection: close\r\n%s\r\n",
                      status, reason, ctype, body_len, extra_headers ? extra_headers : "");
    size_t blen = head_only ? 0 : body_len;
    free(c->out);
    c->out = malloc((size_t)hn + blen);
    c->outoff = 0;
    if (!c->out) {
        conn_close(c);
        return;
    }
    memcpy(c->out, hdr, (size_t)hn);
    if (blen)
        memcpy(c->out + hn, body, blen);
    c->outlen = (size_t)hn + blen;
    c->state = WK_CONN_WRITING;
    c->deadline_ms = now_ms(h) + h->o.write_timeout_ms;
}

static void conn_respond_text(wk_health_t *h, wk_conn_t *c, int status, const char *reason,
                              const char *text, bool head_only)
{
    conn_respond(h, c, status, reason, "text/plain; charset=utf-8", text, strlen(text), head_only,
                 NULL);
}

/* Answers one complete request head held in c->in (NUL-terminated). */
static void handle_request(wk_health_t *h, wk_conn_t *c)
{
    char *line = c->in;
    char *eol = strpbrk(line, "\r\n");
    if (eol)
        *eol = '\0';
    char *sp1 = strchr(line, ' ');
    char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp1 || !sp2 || sp1 == line || sp2 == sp1 + 1 || strchr(sp2 + 1, ' ') ||
        strncmp(sp2 + 1, "HTTP/1.", 7) != 0) {
        conn_respond_text(h, c, 400, "Bad Request", "bad request\n", false);
        return;
    }
    *sp1 = *sp2 = '\0';
    const char *method = line;
    char *target = sp1 + 1;
    bool head = strcmp(method, "HEAD") == 0;
    if (!head && strcmp(method, "GET") != 0) {
        conn_respond(h, c, 405, "Method Not Allowed", "text/plain; charset=utf-8",
                     "method not allowed\n", 19, false, "Allow: GET, HEAD\r\n");
        return;
    }
    char *q = strchr(target, '?');
    if (q)
        *q = '\0';

    if (strcmp(target, "/healthz") == 0) {
        long long age = heartbeat_age_ms(h);
        if (age <= h->o.heartbeat_max_age_ms) {
            conn_respond_text(h, c, 200, "OK", "ok\n", head);
        } else {
            char body[128];
            snprintf(body, sizeof body, "event loop stalled: last heartbeat %lld ms ago\n", age);
            conn_respond_text(h, c, 503, "Service Unavailable", body, head);
        }
    } else if (strcmp(target, "/readyz") == 0) {
        char why[256], body[300];
        if (wk_health_is_ready(h, why, sizeof why)) {
            conn_respond_text(h, c, 200, "OK", "ready\n", head);
        } else {
            snprintf(body, sizeof body, "not ready: %s\n", why);
            conn_respond_text(h, c, 503, "Service Unavailable", body, head);
        }
    } else if (strcmp(target, "/metrics") == 0 && h->metrics) {
        size_t len = 0;
        char *text = wk_metrics_render(h->metrics, &len);
        if (!text) {
            conn_respond_text(h, c, 500, "Internal Server Error", "out of memory\n", head);
            return;
        }
        conn_respond(h, c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", text, len, head,
                     NULL);
        free(text);
    } else {
        conn_respond_text(h, c, 404, "Not Found", "not found\n", head);
    }
}

/* End of the request head: a blank line, tolerating bare LF line ends. */
static bool head_complete(const char *buf, size_t len)
{
    for (size_t i = 1; i < len; i++)
        if (buf[i] == '\n' &&
            (buf[i - 1] == '\n' || (i >= 2 && buf[i - 1] == '\r' && buf[i - 2] == '\n')))
            return true;
    return false;
}

static void conn_read(wk_health_t *h, wk_conn_t *c)
{
    size_t cap = h->o.max_request_bytes;
    for (;;) {
        ssize_t n = recv(c->fd, c->in + c->inlen, cap - c->inlen, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            conn_close(c); /* the client went away before asking anything */
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        c->inlen += (size_t)n;
        c->in[c->inlen] = '\0';
        if (memchr(c->in, '\0', c->inlen)) {
            conn_respond_text(h, c, 400, "Bad Request", "bad request\n", false);
            return;
        }
        if (head_complete(c->in, c->inlen)) {
            handle_request(h, c);
            return;
        }
        if (c->inlen == cap) {
            conn_respond_text(h, c, 431, "Request Header Fields Too Large", "request too large\n",
                              false);
            return;
        }
    }
}

static void conn_write(const wk_health_t *h, wk_conn_t *c)
{
    while (c->outoff < c->outlen) {
        ssize_t n =
            send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                conn_close(c);
            return;
        }
        c->outoff += (size_t)n;
    }
    shutdown(c->fd, SHUT_WR);
    free(c->out);
    c->out = NULL;
    c->state = WK_CONN_LINGER;
    c->deadline_ms = now_ms(h) + LINGER_MS;
}

static void conn_linger(wk_conn_t *c)
{
    char sink[4096];
    for (int i = 0; i < 16; i++) {
        ssize_t n = recv(c->fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        break; /* EOF or error: done */
    }
    conn_close(c);
}

static void conn_io(wk_health_t *h, wk_conn_t *c)
{
    if (c->state == WK_CONN_READING)
        conn_read(h, c);
    if (c->state == WK_CONN_WRITING) /* also straight after a request was answered */
        conn_write(h, c);
    else if (c->state == WK_CONN_LINGER)
        conn_linger(c);
}

/* A free slot, evicting the oldest connection still reading when full. */
static wk_conn_t *conn_slot(wk_health_t *h)
{
    wk_conn_t *oldest = NULL;
    for (int i = 0; i < h->o.max_connections; i++) {
        wk_conn_t *c = &h->conns[i];
        if (c->state == WK_CONN_FREE)
            return c;
        if (c->state == WK_CONN_READING && (!oldest || c->since_ms < oldest->since_ms))
            oldest = c;
    }
    if (oldest)
        conn_close(oldest);
    return oldest;
}

static void accept_some(wk_health_t *h)
{
    for (int i = 0; i < ACCEPTS_PER_TURN; i++) {
        int fd = accept4(h->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
                IB_LOG(IB_LOG_WARN, "http_accept", IB_MSG("accept failed"),
                       IB_S("error", strerror(errno)));
            return;
        }
        wk_conn_t *c = conn_slot(h);
        if (!c) { /* every slot is busy writing: refuse */
            close(fd);
            continue;
        }
        if (!c->in && !(c->in = malloc(h->o.max_request_bytes + 1))) {
            close(fd);
            continue;
        }
        long long now = now_ms(h);
        c->fd = fd;
        c->state = WK_CONN_READING;
        c->inlen = 0;
        c->since_ms = now;
        c->deadline_ms = now + h->o.read_timeout_ms;
    }
}

static void expire(wk_health_t *h, long long now)
{
    for (int i = 0; i < h->o.max_connections; i++) {
        wk_conn_t *c = &h->conns[i];
        if (c->state == WK_CONN_FREE || now < c->deadline_ms)
            continue;
        if (c->state == WK_CONN_READING) {
            conn_respond_text(h, c, 408, "Request Timeout", "request timeout\n", false);
            if (c->state == WK_CONN_WRITING)
                conn_write(h, c);
        } else {
            conn_close(c);
        }
    }
}

/* thread: http (the server's own). */
static void *serve(void *arg)
{
    wk_health_t *h = arg;
    while (!atomic_load(&h->stop)) {
        long long now = now_ms(h);
        long long next = now + 1000;
        int n = 0;
        h->pfd[n++] = (struct pollfd){.fd = h->wake[0], .events = POLLIN};
        h->pfd[n++] = (struct pollfd){.fd = h->lfd, .events = POLLIN};
        for (int i = 0; i < h->o.max_connections; i++) {
            wk_conn_t *c = &h->conns[i];
            if (c->state == WK_CONN_FREE)
                continue;
            h->pfd_conn[n] = i;
            h->pfd[n++] = (struct pollfd){.fd = c->fd,
                                          .events = c->state == WK_CONN_WRITING ? POLLOUT : POLLIN};
            if (c->deadline_ms < next)
                next = c->deadline_ms;
        }
        int timeout = next > now ? (int)(next - now) : 0;
        int r = poll(h->pfd, (nfds_t)n, timeout);
        if (r < 0 && errno != EINTR) {
            IB_LOG(IB_LOG_ERROR, "http_poll", IB_MSG("poll failed; endpoints stop"),
                   IB_S("error", strerror(errno)));
            break;
        }
        if (r > 0) {
            for (int k = 2; k < n; k++)
                if (h->pfd[k].revents)
                    conn_io(h, &h->conns[h->pfd_conn[k]]);
            if (h->pfd[1].revents & POLLIN)
                accept_some(h);
        }
        expire(h, now_ms(h));
    }
    return NULL;
}

/* ---- start and stop ---- */

/* Splits "host:port", "[v6]:port" or ":port" into host (may be "") and port. */
static bool split_listen(const char *listen, char *host, size_t hsize, char *port, size_t psize)
{
    const char *colon;
    if (listen[0] == '[') {
        const char *end = strchr(listen, ']');
        if (!end || end[1] != ':')
            return false;
        if ((size_t)(end - listen - 1) >= hsize)
            return false;
        memcpy(host, listen + 1, (size_t)(end - listen - 1));
        host[end - listen - 1] = '\0';
        colon = end + 1;
    } else {
        colon = strrchr(listen, ':');
        if (!colon || memchr(listen, ':', (size_t)(colon - listen)))
            return false;
        if ((size_t)(colon - listen) >= hsize)
            return false;
        memcpy(host, listen, (size_t)(colon - listen));
        host[colon - listen] = '\0';
    }
    const char *p = colon + 1;
    if (!*p || strlen(p) >= psize || strspn(p, "0123456789") != strlen(p) || atol(p) > 65535)
        return false;
    ib_strlcpy(port, p, psize);
    return true;
}

/*
 * Splits and resolves addr the one way both the daemon and --check-config
 * use. Returns the address list (freeaddrinfo) or NULL with err filled.
 */
static struct addrinfo *resolve_listen(const char *addr, ib_error_t *err)
{
    char host[256], port[8];
    if (!split_listen(addr, host, sizeof host, port, sizeof port)) {
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                     "\"%s\" is not host:port with a port from 0 to 65535", addr);
        return NULL;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    const char *node = host[0] && strcmp(host, "*") != 0 ? host : "0.0.0.0";
    int gai = getaddrinfo(node, port, &hints, &res);
    if (gai != 0) {
        ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "%s: %s", addr, gai_strerror(gai));
        return NULL;
    }
    return res;
}

ib_err_t wk_health_listen_check(const char *listen, ib_error_t *err)
{
    struct addrinfo *res;
    if (!listen || !listen[0])
        return IB_E_OK;
    res = resolve_listen(listen, err);
    if (!res)
        return IB_E_CONFIG;
    freeaddrinfo(res);
    return IB_E_OK;
}

static int bind_listen(const char *addr, int *port_out, ib_error_t *err)
{
    struct addrinfo *res = resolve_listen(addr, err);
    if (!res) {
        ib_error_prefix(err, "http.listen");
        return -1;
    }
    int fd = -1, saved = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return ib_error_set(err, IB_E_IO, IB_CLASS_PERMANENT, "http.listen: %s: %s", addr,
                            strerror(saved)),
               -1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *port_out = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        *port_out = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                             : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

wk_health_t *wk_health_start(const wk_health_opts_t *opts, ib_error_t *err)
{
    wk_health_t *h = calloc(1, sizeof *h);
    if (!h) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_PERMANENT, "http: out of memory");
        return NULL;
    }
    h->o = *opts;
    h->metrics = opts->metrics;
    if (h->o.heartbeat_max_age_ms <= 0)
        h->o.heartbeat_max_age_ms = 30000;
    if (h->o.max_request_bytes < 64)
        h->o.max_request_bytes = h->o.max_request_bytes ? 64 : 8192;
    if (h->o.read_timeout_ms <= 0)
        h->o.read_timeout_ms = 5000;
    if (h->o.write_timeout_ms <= 0)
        h->o.write_timeout_ms = 10000;
    if (h->o.max_connections <= 0)
        h->o.max_connections = 32;
    h->o.listen = NULL; /* not kept: the caller's string may go away */
    h->lfd = h->wake[0] = h->wake[1] = -1;
    atomic_store(&h->heartbeat_ms, now_ms(h));
    if (!opts->listen || !opts->listen[0])
        return h; /* disabled: state only */

    h->conns = calloc((size_t)h->o.max_connections, sizeof *h->conns);
    h->pfd = calloc((size_t)h->o.max_connections + 2, sizeof *h->pfd);
    h->pfd_conn = calloc((size_t)h->o.max_connections + 2, sizeof *h->pfd_conn);
    if (!h->conns || !h->pfd || !h->pfd_conn) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_PERMANENT, "http: out of memory");
        wk_health_stop(h);
        return NULL;
    }
    for (int i = 0; i < h->o.max_connections; i++)
        h->conns[i].fd = -1;
    h->lfd = bind_listen(opts->listen, &h->port, err);
    if (h->lfd < 0) {
        wk_health_stop(h);
        return NULL;
    }
    if (pipe2(h->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        ib_error_set(err, IB_E_IO, IB_CLASS_PERMANENT, "http: pipe: %s", strerror(errno));
        wk_health_stop(h);
        return NULL;
    }
    /* Signals belong to the main thread: the server thread starts with all blocked. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&h->thread, NULL, serve, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        ib_error_set(err, IB_E_IO, IB_CLASS_PERMANENT, "http: thread: %s", strerror(rc));
        wk_health_stop(h);
        return NULL;
    }
    h->running = true;
    IB_LOG(IB_LOG_INFO, "http_listen", IB_MSG("serving /healthz /readyz /metrics"),
           IB_S("listen", opts->listen), IB_I("port", h->port));
    return h;
}

void wk_health_stop(wk_health_t *h)
{
    if (!h)
        return;
    if (h->running) {
        atomic_store(&h->stop, true);
        ssize_t w;
        do
            w = write(h->wake[1], "x", 1);
        while (w < 0 && errno == EINTR);
        pthread_join(h->thread, NULL);
    }
    if (h->conns)
        for (int i = 0; i < h->o.max_connections; i++) {
            conn_close(&h->conns[i]);
            free(h->conns[i].in);
        }
    if (h->lfd >= 0)
        close(h->lfd);
    if (h->wake[0] >= 0)
        close(h->wake[0]);
    if (h->wake[1] >= 0)
        close(h->wake[1]);
    free(h->conns);
    free(h->pfd);
    free(h->pfd_conn);
    free(h);
}
