/*
 * sb_wsb_leg.c - one outer leg of the WebSocket bridge (sb_wsb.h): libcurl
 * with CONNECT_ONLY does TCP, the proxy's CONNECT tunnel (Basic auth) and
 * TLS verified against the namespace's name; this file then speaks the
 * RFC 6455 handshake (sb_ws.h) and pumps: loopback bytes go out as masked
 * binary frames (masked in place behind a reserved header, never copied),
 * frames coming in are written to the loopback socket, pings answered,
 * a close answered and ended.
 *
 * thread: the bridge's thread only.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/rand.h>

#include "ib_tls.h"
#include "sb_ws.h"
#include "sb_wsb_int.h"

#define LEG_CHUNK 65536
#define LEG_CONNECT_MS 15000
#define LEG_HANDSHAKE_MS 15000

typedef struct leg {
    sb_wsb_t *wsb;
    CURL *c;
    curl_socket_t s;
    int fd; /* the loopback socket */
    sb_ws_dec_t dec;
    uint8_t out[SB_WS_FRAME_HEAD_MAX + LEG_CHUNK];
    uint8_t in[LEG_CHUNK];
} leg_t;

/* Waits for events on the outer socket for up to ms; false when the bridge stops. */
static bool leg_wait(leg_t *l, short events, int ms)
{
    struct pollfd p = {.fd = l->s, .events = events};
    poll(&p, 1, ms);
    return !atomic_load(&l->wsb->stop);
}

static ib_err_t leg_send(leg_t *l, const uint8_t *p, size_t n, ib_error_t *err)
{
    while (n) {
        size_t sent = 0;
        CURLcode rc = curl_easy_send(l->c, p, n, &sent);
        if (rc == CURLE_AGAIN) {
            if (!leg_wait(l, POLLOUT, 1000))
                return ib_error_set(err, IB_E_SHUTDOWN, IB_CLASS_TRANSIENT, "shutting down");
            continue;
        }
        if (rc != CURLE_OK)
            return ib_error_set(err, IB_E_IO, IB_CLASS_TRANSIENT, "WebSocket send to %s: %s",
                                l->wsb->host, curl_easy_strerror(rc));
        p += sent;
        n -= sent;
    }
    return IB_E_OK;
}

/* Why curl_easy_perform failed, the proxy named when it refused. */
static ib_err_t leg_open_error(leg_t *l, CURLcode rc, const char *detail, ib_error_t *err)
{
    long code = 0;
    const sb_wsb_t *w = l->wsb;

    curl_easy_getinfo(l->c, CURLINFO_HTTP_CONNECTCODE, &code);
    if (code == 407)
        return sb_ws_status_error(407, w->host, w->shown, err);
    if (code == 401) /* some proxies (tinyproxy) answer wrong credentials so */
        return ib_error_set(err, IB_E_AUTH, IB_CLASS_PERMANENT,
                            "proxy %s refused the tunnel: 401 Unauthorized (give servicebus.proxy "
                            "or HTTPS_PROXY a user:password it accepts)",
                            w->shown);
    if (code >= 300)
        return ib_error_set(err, IB_E_IO, IB_CLASS_TRANSIENT,
                            "proxy %s refused the tunnel to %s:%d: HTTP status %ld", w->shown,
                            w->host, w->ws_port, code);
    return ib_error_set(err, rc == CURLE_PEER_FAILED_VERIFICATION ? IB_E_TLS : IB_E_IO,
                        IB_CLASS_TRANSIENT, "WebSocket connection to %s:%d%s%s failed: %s", w->host,
                        w->ws_port, w->shown[0] ? " via proxy " : "", w->shown,
                        detail[0] ? detail : curl_easy_strerror(rc));
}

/* libcurl's progress callback: a stopping bridge aborts a connect in progress. */
static int leg_progress(void *ctx, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    return atomic_load(&((sb_wsb_t *)ctx)->stop) ? 1 : 0;
}

static ib_err_t leg_open(leg_t *l, ib_error_t *err)
{
    const sb_wsb_t *w = l->wsb;
    char url[400], detail[CURL_ERROR_SIZE] = "";
    CURLcode rc;

    snprintf(url, sizeof(url), "%s://%s:%d/", w->tls ? "https" : "http", w->host, w->ws_port);
    l->c = curl_easy_init();
    if (!l->c)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "curl_easy_init failed");
    curl_easy_setopt(l->c, CURLOPT_URL, url);
    curl_easy_setopt(l->c, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(l->c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(l->c, CURLOPT_CONNECTTIMEOUT_MS, (long)LEG_CONNECT_MS);
    curl_easy_setopt(l->c, CURLOPT_ERRORBUFFER, detail);
    curl_easy_setopt(l->c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(l->c, CURLOPT_XFERINFOFUNCTION, leg_progress);
    curl_easy_setopt(l->c, CURLOPT_XFERINFODATA, l->wsb);
    curl_easy_setopt(l->c, CURLOPT_PROXY, w->proxy);
    curl_easy_setopt(l->c, CURLOPT_HTTPPROXYTUNNEL, 1L);
    curl_easy_setopt(l->c, CURLOPT_PROXYAUTH, (long)CURLAUTH_BASIC);
    ib_tls_curl_trust(l->c, w->ca_file);
    rc = curl_easy_perform(l->c);
    ib_err_t res = IB_E_OK;
    if (rc == CURLE_ABORTED_BY_CALLBACK)
        res = ib_error_set(err, IB_E_SHUTDOWN, IB_CLASS_TRANSIENT, "shutting down");
    else if (rc != CURLE_OK)
        res = leg_open_error(l, rc, detail, err);
    /* detail is this frame's: libcurl must not write it after we return (curl_easy_send). */
    curl_easy_setopt(l->c, CURLOPT_ERRORBUFFER, NULL);
    if (res != IB_E_OK)
        return res;
    curl_easy_getinfo(l->c, CURLINFO_ACTIVESOCKET, &l->s);
    return IB_E_OK;
}

/* Writes all n bytes to the loopback socket. */
static ib_err_t loop_write(leg_t *l, const uint8_t *p, size_t n, ib_error_t *err)
{
    while (n) {
        ssize_t k = write(l->fd, p, n);
        if (k <= 0)
            return ib_error_set(err, IB_E_CLOSED, IB_CLASS_TRANSIENT, "loopback closed");
        p += k;
        n -= (size_t)k;
    }
    return IB_E_OK;
}

static ib_err_t leg_control(leg_t *l, int opcode, const uint8_t *p, size_t n, ib_error_t *err)
{
    uint8_t frame[SB_WS_FRAME_HEAD_MAX + SB_WS_CONTROL_MAX], mask[4];

    RAND_bytes(mask, 4);
    return leg_send(l, frame, sb_ws_control_encode(frame, opcode, p, n, mask), err);
}

/* Reads frames in in[0..n): data to the loopback, pings answered. IB_E_CLOSED after a close. */
static ib_err_t leg_frames(leg_t *l, uint8_t *in, size_t n, ib_error_t *err)
{
    size_t pos = 0, used;
    sb_ws_ev_t ev;

    do {
        if (sb_ws_dec_next(&l->dec, in + pos, n - pos, &used, &ev, err) != IB_E_OK) {
            uint8_t code[2] = {(uint8_t)(sb_ws_dec_close_code(&l->dec) >> 8),
                               (uint8_t)sb_ws_dec_close_code(&l->dec)};
            ib_error_t ignored;
            leg_control(l, SB_WS_OP_CLOSE, code, 2, &ignored);
            ib_error_prefix(err, "%s:%d", l->wsb->host, l->wsb->ws_port);
            return IB_E_IO;
        }
        pos += used;
        if (ev.kind == SB_WS_EV_DATA && loop_write(l, ev.data, ev.len, err) != IB_E_OK)
            return err->code;
        if (ev.kind == SB_WS_EV_PING && leg_control(l, SB_WS_OP_PONG, ev.data, ev.len, err))
            return err->code;
        if (ev.kind == SB_WS_EV_CLOSE) {
            leg_control(l, SB_WS_OP_CLOSE, ev.data, ev.len >= 2 ? 2 : 0, err);
            return ib_error_set(err, IB_E_CLOSED, IB_CLASS_TRANSIENT, "closed by the server");
        }
    } while (pos < n || ev.kind != SB_WS_EV_NONE);
    return IB_E_OK;
}

/* Receives from the outer leg until it would block. */
static ib_err_t leg_drain(leg_t *l, ib_error_t *err)
{
    for (;;) {
        size_t got = 0;
        CURLcode rc = curl_easy_recv(l->c, l->in, sizeof(l->in), &got);
        if (rc == CURLE_AGAIN)
            return IB_E_OK;
        if (rc != CURLE_OK || got == 0)
            return ib_error_set(err, IB_E_CLOSED, IB_CLASS_TRANSIENT, "outer leg closed");
        if (leg_frames(l, l->in, got, err) != IB_E_OK)
            return err->code;
    }
}

static ib_err_t leg_handshake(leg_t *l, ib_error_t *err)
{
    char req[1024], key[25];
    uint8_t nonce[16];
    size_t have = 0, used = 0;
    long long waited = 0;
    ib_err_t rc = IB_E_AGAIN;

    RAND_bytes(nonce, sizeof(nonce));
    sb_ws_key_make(key, nonce);
    if (leg_send(l, (uint8_t *)req,
                 sb_ws_request_format(req, sizeof(req), l->wsb->host, l->wsb->ws_port, SB_WS_PATH,
                                      key, SB_WS_PROTOCOL),
                 err) != IB_E_OK)
        return err->code;
    while (rc == IB_E_AGAIN && have < SB_WS_HEAD_MAX) {
        size_t got = 0;
        CURLcode c = curl_easy_recv(l->c, l->in + have, SB_WS_HEAD_MAX - have, &got);
        if (c == CURLE_AGAIN) {
            if (!leg_wait(l, POLLIN, 200) || (waited += 200) > LEG_HANDSHAKE_MS)
                return ib_error_set(err, IB_E_TIMEOUT, IB_CLASS_TRANSIENT,
                                    "no WebSocket handshake answer from %s:%d", l->wsb->host,
                                    l->wsb->ws_port);
            continue;
        }
        if (c != CURLE_OK || got == 0)
            return ib_error_set(err, IB_E_CLOSED, IB_CLASS_TRANSIENT,
                                "%s:%d closed during the WebSocket handshake", l->wsb->host,
                                l->wsb->ws_port);
        have += got;
        rc =
            sb_ws_answer_check((char *)l->in, have, key, SB_WS_PROTOCOL, l->wsb->shown, &used, err);
    }
    if (rc != IB_E_OK)
        return rc == IB_E_AGAIN ? sb_ws_answer_check((char *)l->in, have, key, SB_WS_PROTOCOL,
                                                     l->wsb->shown, &used, err)
                                : rc;
    return have > used ? leg_frames(l, l->in + used, have - used, err) : IB_E_OK;
}

/* Sends what the loopback socket has as one masked binary frame. */
static ib_err_t leg_up(leg_t *l, ib_error_t *err)
{
    uint8_t *payload = l->out + SB_WS_FRAME_HEAD_MAX, head[SB_WS_FRAME_HEAD_MAX], mask[4];
    ssize_t n = read(l->fd, payload, LEG_CHUNK);
    size_t h;

    if (n <= 0) {
        uint8_t code[2] = {SB_WS_CLOSE_NORMAL >> 8, SB_WS_CLOSE_NORMAL & 0xff};
        leg_control(l, SB_WS_OP_CLOSE, code, 2, err);
        return ib_error_set(err, IB_E_CLOSED, IB_CLASS_TRANSIENT, "loopback closed");
    }
    RAND_bytes(mask, 4);
    sb_ws_mask(payload, (size_t)n, mask, 0);
    h = sb_ws_head_encode(head, SB_WS_OP_BINARY, (uint64_t)n, mask);
    memcpy(payload - h, head, h);
    return leg_send(l, payload - h, h + (size_t)n, err);
}

static void leg_pump(leg_t *l)
{
    ib_error_t err;

    while (!atomic_load(&l->wsb->stop)) {
        struct pollfd p[2] = {{.fd = l->fd, .events = POLLIN}, {.fd = l->s, .events = POLLIN}};
        if (poll(p, 2, 200) < 0)
            return;
        if (p[0].revents && leg_up(l, &err) != IB_E_OK)
            return;
        if (p[1].revents && leg_drain(l, &err) != IB_E_OK) {
            if (err.code == IB_E_IO)
                sb_wsb_fail(l->wsb, &err);
            return;
        }
    }
}

void sb_wsb_leg_run(sb_wsb_t *wsb, int fd)
{
    leg_t *l = calloc(1, sizeof(*l));
    ib_error_t err;

    if (!l)
        return;
    l->wsb = wsb;
    l->fd = fd;
    sb_ws_dec_init(&l->dec, 0, 0);
    if (leg_open(l, &err) != IB_E_OK || leg_handshake(l, &err) != IB_E_OK) {
        if (err.code != IB_E_SHUTDOWN)
            sb_wsb_fail(wsb, &err);
    } else {
        leg_pump(l);
    }
    curl_easy_cleanup(l->c);
    free(l);
}
