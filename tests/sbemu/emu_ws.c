/*
 * emu_ws.c - sbemu's AMQP over WebSockets endpoint (--ws-listen), what
 * Service Bus serves at wss://NAMESPACE:443/$servicebus/websocket/ with
 * subprotocol AMQPWSB10: ws://, or wss:// when sbemu has --tls-cert and
 * --tls-key (the official SDK only speaks wss://).
 *
 * A gateway: each WebSocket connection gets a thread that answers the
 * handshake (sb_ws.h, the server's side), opens a TCP connection to
 * sbemu's own AMQP listener and pumps bytes both ways (masked client frames
 * in, binary frames out, pings answered, close answered). The broker thus
 * sees an ordinary AMQP connection; nothing of the broker is touched.
 *
 * thread: emu_ws_start / emu_ws_stop on the main thread; the accept loop
 * and one thread per connection of their own.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "emu_ws.h"
#include "sb_ws.h"

#define WS_CHUNK 65536

struct emu_ws {
    int lfd;
    const atomic_int *amqp_port;
    atomic_int stop;
    pthread_t thread;
    SSL_CTX *tls; /* NULL: plain ws:// */
};

typedef struct ws_conn {
    emu_ws_t *ws;
    int cfd;  /* the WebSocket client */
    int afd;  /* sbemu's AMQP listener */
    SSL *ssl; /* over cfd, when the endpoint has TLS */
    sb_ws_dec_t dec;
    uint8_t in[WS_CHUNK];
    uint8_t out[SB_WS_FRAME_HEAD_MAX + WS_CHUNK];
} ws_conn_t;

static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t k = write(fd, b, n);
        if (k <= 0)
            return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Reads from the client (through TLS when there is one). */
static ssize_t c_read(ws_conn_t *c, void *p, size_t n)
{
    return c->ssl ? SSL_read(c->ssl, p, (int)n) : read(c->cfd, p, n);
}

static int c_write(ws_conn_t *c, const void *p, size_t n)
{
    if (!c->ssl)
        return write_all(c->cfd, p, n);
    return n == 0 || SSL_write(c->ssl, p, (int)n) == (int)n ? 0 : -1;
}

static int amqp_connect(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Reads the client's GET and answers it; returns the bytes after the request in c->in. */
static ssize_t handshake(ws_conn_t *c)
{
    size_t have = 0, used = 0;
    char key[25], ans[512];
    int offered = 0;
    ib_error_t err;
    ib_err_t rc = IB_E_AGAIN;

    while (rc == IB_E_AGAIN && have < SB_WS_HEAD_MAX) {
        ssize_t k = c_read(c, c->in + have, SB_WS_HEAD_MAX - have);
        if (k <= 0)
            return -1;
        have += (size_t)k;
        rc = sb_ws_request_check((char *)c->in, have, SB_WS_PROTOCOL, key, &offered, &used, &err);
    }
    if (rc != IB_E_OK || !offered) {
        static const char bad[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
        c_write(c, bad, sizeof(bad) - 1);
        return -1;
    }
    c->afd = amqp_connect(atomic_load(c->ws->amqp_port));
    if (c->afd < 0)
        return -1;
    if (c_write(c, ans, sb_ws_answer_format(ans, sizeof(ans), key, SB_WS_PROTOCOL)) != 0)
        return -1;
    memmove(c->in, c->in + used, have - used);
    return (ssize_t)(have - used);
}

static int control(ws_conn_t *c, int opcode, const uint8_t *p, size_t n)
{
    uint8_t f[SB_WS_FRAME_HEAD_MAX + SB_WS_CONTROL_MAX];
    return c_write(c, f, sb_ws_control_encode(f, opcode, p, n, NULL));
}

/* Frames from the client in c->in[0..n): data to the broker. -1 to end. */
static int from_client(ws_conn_t *c, size_t n)
{
    size_t pos = 0, used;
    sb_ws_ev_t ev;
    ib_error_t err;

    do {
        if (sb_ws_dec_next(&c->dec, c->in + pos, n - pos, &used, &ev, &err) != IB_E_OK) {
            uint8_t code[2] = {(uint8_t)(sb_ws_dec_close_code(&c->dec) >> 8),
                               (uint8_t)sb_ws_dec_close_code(&c->dec)};
            fprintf(stderr, "sbemu: ws: %s\n", err.text);
            control(c, SB_WS_OP_CLOSE, code, 2);
            return -1;
        }
        pos += used;
        if (ev.kind == SB_WS_EV_DATA && write_all(c->afd, ev.data, ev.len) != 0)
            return -1;
        if (ev.kind == SB_WS_EV_PING && control(c, SB_WS_OP_PONG, ev.data, ev.len) != 0)
            return -1;
        if (ev.kind == SB_WS_EV_CLOSE) {
            control(c, SB_WS_OP_CLOSE, ev.data, ev.len >= 2 ? 2 : 0);
            return -1;
        }
    } while (pos < n || ev.kind != SB_WS_EV_NONE);
    return 0;
}

/* What the broker wrote, as one binary frame to the client. -1 to end. */
static int from_broker(ws_conn_t *c)
{
    uint8_t *payload = c->out + SB_WS_FRAME_HEAD_MAX, head[SB_WS_FRAME_HEAD_MAX];
    ssize_t n = read(c->afd, payload, WS_CHUNK);
    size_t h;

    if (n <= 0) {
        uint8_t code[2] = {SB_WS_CLOSE_NORMAL >> 8, SB_WS_CLOSE_NORMAL & 0xff};
        control(c, SB_WS_OP_CLOSE, code, 2);
        return -1;
    }
    h = sb_ws_head_encode(head, SB_WS_OP_BINARY, (uint64_t)n, NULL);
    memcpy(payload - h, head, h);
    return c_write(c, payload - h, h + (size_t)n);
}

/* Pumps both ways until either side ends. */
static void pump(ws_conn_t *c)
{
    while (!atomic_load(&c->ws->stop)) {
        struct pollfd p[2] = {{.fd = c->cfd, .events = POLLIN}, {.fd = c->afd, .events = POLLIN}};
        int pending = c->ssl && SSL_pending(c->ssl) > 0;
        if (!pending && poll(p, 2, 200) < 0)
            return;
        if (pending || p[0].revents) {
            ssize_t k = c_read(c, c->in, sizeof(c->in));
            if (k <= 0 || from_client(c, (size_t)k) != 0)
                return;
        }
        if (!pending && p[1].revents && from_broker(c) != 0)
            return;
    }
}

static void *conn_main(void *arg)
{
    ws_conn_t *c = arg;
    ssize_t extra = -1;

    if (c->ws->tls) {
        c->ssl = SSL_new(c->ws->tls);
        if (c->ssl && (SSL_set_fd(c->ssl, c->cfd) != 1 || SSL_accept(c->ssl) != 1)) {
            SSL_free(c->ssl);
            c->ssl = NULL;
        }
    }
    if (!c->ws->tls || c->ssl)
        extra = handshake(c);
    sb_ws_dec_init(&c->dec, 1, 0);
    if (extra >= 0 && (extra == 0 || from_client(c, (size_t)extra) == 0))
        pump(c);
    if (c->ssl) {
        SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
    }
    close(c->cfd);
    if (c->afd >= 0)
        close(c->afd);
    free(c);
    return NULL;
}

static void *accept_main(void *arg)
{
    emu_ws_t *ws = arg;

    while (!atomic_load(&ws->stop)) {
        struct pollfd p = {.fd = ws->lfd, .events = POLLIN};
        pthread_t t;
        ws_conn_t *c;
        int fd;
        if (poll(&p, 1, 200) <= 0 || (fd = accept4(ws->lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
            continue;
        c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            continue;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
        c->ws = ws;
        c->cfd = fd;
        c->afd = -1;
        if (pthread_create(&t, NULL, conn_main, c) != 0) {
            close(fd);
            free(c);
            continue;
        }
        pthread_detach(t);
    }
    return NULL;
}

/* A server TLS context of cert and key; NULL when either is NULL or bad. */
static SSL_CTX *tls_new(const char *cert, const char *key)
{
    SSL_CTX *ctx;

    if (!cert || !key || !(ctx = SSL_CTX_new(TLS_server_method())))
        return NULL;
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

emu_ws_t *emu_ws_start(const char *listen_on, const char *tls_cert, const char *tls_key,
                       const atomic_int *amqp_port, int *bound_port, char *err, size_t errlen)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof(a);
    const char *colon = strrchr(listen_on, ':');
    char host[64];
    emu_ws_t *ws = calloc(1, sizeof(*ws));

    if (!ws || !colon || (size_t)(colon - listen_on) >= sizeof(host)) {
        snprintf(err, errlen, "--ws-listen wants HOST:PORT");
        free(ws);
        return NULL;
    }
    snprintf(host, sizeof(host), "%.*s", (int)(colon - listen_on), listen_on);
    a.sin_port = htons((uint16_t)atoi(colon + 1));
    ws->amqp_port = amqp_port;
    ws->tls = tls_new(tls_cert, tls_key);
    if (tls_cert && !ws->tls) {
        snprintf(err, errlen, "--ws-listen: cannot load %s / %s", tls_cert, tls_key);
        free(ws);
        return NULL;
    }
    ws->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1 || ws->lfd < 0 ||
        bind(ws->lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ws->lfd, 64) != 0 ||
        getsockname(ws->lfd, (struct sockaddr *)&a, &al) != 0 ||
        pthread_create(&ws->thread, NULL, accept_main, ws) != 0) {
        snprintf(err, errlen, "--ws-listen %s: cannot listen", listen_on);
        if (ws->lfd >= 0)
            close(ws->lfd);
        SSL_CTX_free(ws->tls);
        free(ws);
        return NULL;
    }
    *bound_port = ntohs(a.sin_port);
    return ws;
}

void emu_ws_stop(emu_ws_t *ws)
{
    if (!ws)
        return;
    atomic_store(&ws->stop, 1);
    pthread_join(ws->thread, NULL);
    close(ws->lfd);
    SSL_CTX_free(ws->tls);
    free(ws);
}
