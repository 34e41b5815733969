/*
 * sb_wsb.c - the WebSocket bridge's life (sb_wsb.h): the loopback
 * listener, its thread, the proxy choice and the error the core reads.
 * One outer leg at a time, since a connection core has one connection at
 * a time; the leg itself (libcurl and the pump) is in sb_wsb_leg.c.
 *
 * thread: sb_wsb_new / sb_wsb_error / sb_wsb_free on the core's thread;
 * bridge_main on the bridge's own thread.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ib_log.h"
#include "sb_wsb_int.h"

/* Whether NO_PROXY's comma list (entries "*", "host" or ".suffix") names host. */
static bool no_proxy_match(const char *list, const char *host)
{
    size_t hl = strlen(host);
    char item[256];

    while (list && *list) {
        size_t n = strcspn(list, ", ");
        if (n && n < sizeof(item)) {
            memcpy(item, list, n);
            item[n] = '\0';
            const char *it = item[0] == '.' ? item + 1 : item;
            size_t il = strlen(it);
            if (strcmp(item, "*") == 0 || strcasecmp(it, host) == 0 ||
                (il < hl && host[hl - il - 1] == '.' && strcasecmp(host + hl - il, it) == 0))
                return true;
        }
        list += n;
        list += strspn(list, ", ");
    }
    return false;
}

void sb_wsb_proxy_pick(const char *opts_proxy, const char *host, char *proxy, size_t psize,
                       char *shown, size_t ssize)
{
    const char *p = opts_proxy, *at, *scheme;

    if (!p) {
        const char *no = getenv("NO_PROXY") ? getenv("NO_PROXY") : getenv("no_proxy");
        p = getenv("HTTPS_PROXY") ? getenv("HTTPS_PROXY") : getenv("https_proxy");
        if (!p || no_proxy_match(no, host))
            p = "";
    }
    snprintf(proxy, psize, "%s", p);
    /* Shown without user:password: what lies between "//" (or the start) and the last '@'. */
    scheme = strstr(p, "://");
    scheme = scheme ? scheme + 3 : p;
    at = strrchr(scheme, '@');
    if (at)
        snprintf(shown, ssize, "%.*s%s", (int)(scheme - p), p, at + 1);
    else
        snprintf(shown, ssize, "%s", p);
}

void sb_wsb_proxy_secret(const char *proxy)
{
    const char *u = proxy ? strstr(proxy, "://") : NULL, *at;
    char userinfo[512];

    u = u ? u + 3 : proxy;
    at = u ? strrchr(u, '@') : NULL;
    if (!at || (size_t)(at - u) >= sizeof(userinfo))
        return;
    snprintf(userinfo, sizeof(userinfo), "%.*s", (int)(at - u), u);
    ib_log_add_secret(userinfo);
    if (strchr(userinfo, ':'))
        ib_log_add_secret(strchr(userinfo, ':') + 1);
}

/* A loopback listener on an ephemeral port; -1 on failure. */
static int listen_loopback(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

void sb_wsb_fail(sb_wsb_t *wsb, const ib_error_t *why)
{
    pthread_mutex_lock(&wsb->lock);
    wsb->last_err = *why;
    pthread_mutex_unlock(&wsb->lock);
    IB_LOG(IB_LOG_WARN, "ws_connect", IB_MSG("WebSocket leg failed"), IB_S("host", wsb->host),
           IB_I("port", wsb->ws_port), IB_S("proxy", wsb->shown[0] ? wsb->shown : NULL),
           IB_S("error", ib_err_name(why->code)), IB_S("detail", why->text));
}

bool sb_wsb_error(sb_wsb_t *wsb, ib_error_t *why)
{
    bool got;

    pthread_mutex_lock(&wsb->lock);
    got = wsb->last_err.code != IB_E_OK;
    if (got)
        *why = wsb->last_err;
    ib_error_clear(&wsb->last_err);
    pthread_mutex_unlock(&wsb->lock);
    return got;
}

static void *bridge_main(void *arg)
{
    sb_wsb_t *wsb = arg;
    int one = 1;

    while (!atomic_load(&wsb->stop)) {
        struct pollfd p = {.fd = wsb->lfd, .events = POLLIN};
        int fd;
        if (poll(&p, 1, 200) <= 0)
            continue;
        fd = accept4(wsb->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        /* AMQP frames are small and answered: never held back for Nagle. */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        sb_wsb_leg_run(wsb, fd);
        close(fd);
    }
    return NULL;
}

sb_wsb_t *sb_wsb_new(const sb_wsb_opts_t *opts, ib_error_t *err)
{
    sb_wsb_t *wsb = calloc(1, sizeof(*wsb));

    if (!wsb) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return NULL;
    }
    snprintf(wsb->host, sizeof(wsb->host), "%s", opts->host);
    snprintf(wsb->ca_file, sizeof(wsb->ca_file), "%s", opts->ca_file ? opts->ca_file : "");
    wsb->ws_port = opts->port;
    wsb->tls = opts->tls;
    sb_wsb_proxy_pick(opts->proxy, opts->host, wsb->proxy, sizeof(wsb->proxy), wsb->shown,
                      sizeof(wsb->shown));
    sb_wsb_proxy_secret(wsb->proxy);
    pthread_mutex_init(&wsb->lock, NULL);
    wsb->lfd = listen_loopback(&wsb->port);
    if (wsb->lfd < 0 || pthread_create(&wsb->thread, NULL, bridge_main, wsb) != 0) {
        ib_error_set(err, IB_E_IO, IB_CLASS_TRANSIENT,
                     "the WebSocket bridge could not listen on 127.0.0.1");
        if (wsb->lfd >= 0)
            close(wsb->lfd);
        pthread_mutex_destroy(&wsb->lock);
        free(wsb);
        return NULL;
    }
    IB_LOG(IB_LOG_INFO, "ws_bridge", IB_MSG("AMQP over WebSockets"), IB_S("host", wsb->host),
           IB_I("port", wsb->ws_port), IB_B("tls", wsb->tls),
           IB_S("proxy", wsb->shown[0] ? wsb->shown : NULL));
    return wsb;
}

int sb_wsb_port(const sb_wsb_t *wsb)
{
    return wsb->port;
}

void sb_wsb_free(sb_wsb_t *wsb)
{
    if (!wsb)
        return;
    atomic_store(&wsb->stop, 1);
    pthread_join(wsb->thread, NULL);
    close(wsb->lfd);
    pthread_mutex_destroy(&wsb->lock);
    free(wsb);
}
